"""Activation caches: one HDF5 file per trained refit, written once and read by every analysis.

Contract (docs/caches.md): `{results_dir}/{arch}/caches/seed{seed}.h5` holds one group per prompt
set with
- `tokens` int32 `[prompt, pos]` (pad id where padded), `lengths` int32 `[prompt]`,
  `prompts` fixed-width UTF-8 bytes `[prompt]`;
- `attn_pattern` `[layer, head, lower_entry]`: post-softmax `blocks.{layer}.attn.hook_pattern`, packed:
  for each prompt in file order, the row-major lower triangle (diagonal included) of its
  length x length block, prompt p at `pattern_offsets[p]:pattern_offsets[p + 1]` (int64
  `[prompt + 1]`). These are exactly the entries the paper compares (Eq. 1); everything else of a
  causal pattern is zero. `CacheReader.attn_pattern` unpacks to `[layer, prompt, head, query_pos,
  key_pos]`; `CacheReader.attn_pattern_lower` hands out the packed entries;
- `resid_mid` `[layer, prompt, pos, d_model]`: `blocks.{layer}.hook_resid_mid` (attention-only
  models have no such hook: `hook_resid_post`, identical without an MLP; attribute `resid_hook`
  says which), zero-padded;
- `head_out` `[layer, prompt, pos, head, d_head]`: `blocks.{layer}.attn.hook_z`, zero-padded;
- optional `resid_pre` / `resid_post` `[layer, prompt, pos, d_model]`: `blocks.{layer}.hook_resid_pre` /
  `hook_resid_post`, stored only when asked (`extra_resid_hooks`, from config key analysis.cka_hook),
  zero-padded; file attribute `extra_resid_hooks` lists them.

Floating datasets are float32, or float16 when the config asks (the forward pass stays float32).
Every dataset carries HDF5's fletcher32 checksum, so every read verifies what it reads; a mismatch
raises CacheError naming the file, the dataset and the rebuild command. `attn_pattern` is chunked
(1, head, PATTERN_CHUNK_BYTES worth of entries) and uncompressed; the others are chunked one (layer,
prompt) per chunk, so a layer of a prompt set is read alone. Files are written to `<path>.tmp`,
stamped `complete=True` last and renamed, so an interrupted job never leaves a file that looks
finished. `open_cache` is the only way analyses open a cache: it checks the contract and names the
file and the command to rebuild it when a file is missing, truncated, corrupt or foreign.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from tqdm.auto import tqdm

from headstab.fileio import atomic_path
from headstab.formats import CACHE_FORMAT, CACHE_FORMAT_VERSION

__all__ = [
    "CACHE_FORMAT",
    "CACHE_FORMAT_VERSION",
    "CacheChecksumError",
    "CacheError",
    "CacheReader",
    "RESID_HOOKS",
    "cache_activations",
    "check_consistent_shapes",
    "check_prompt_lengths",
    "collect_activations",
    "open_cache",
    "pad_token_lists",
    "rebuild_command",
    "resid_dataset_name",
    "resid_hook_name",
    "tokenize_prompts",
    "valid_positions",
    "write_activation_cache",
]

log = logging.getLogger(__name__)

DATASET_DIMS = {
    "tokens": "prompt,pos",
    "lengths": "prompt",
    "prompts": "prompt",
    "pattern_offsets": "prompt+1",
    "attn_pattern": "layer,head,lower_entry",
    "resid_mid": "layer,prompt,pos,d_model",
    "head_out": "layer,prompt,pos,head,d_head",
}
# Residual-stream hooks a cache can hold (config key analysis.cka_hook): `resid_mid` is always stored;
# the others only when the writer is asked for them, as datasets named after the hook without "hook_".
RESID_HOOKS = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post")
OPTIONAL_DATASET_DIMS = {"resid_pre": "layer,prompt,pos,d_model", "resid_post": "layer,prompt,pos,d_model"}
ALL_DATASET_DIMS = {**DATASET_DIMS, **OPTIONAL_DATASET_DIMS}
# Default gzip level of resid_mid / head_out behind the shuffle filter: readable by any HDF5 tool
# (lzf is not), and higher levels gain little (docs/caches.md).
GZIP_LEVEL = 1
# Bytes of one attn_pattern chunk: a few MB keeps per-chunk overhead small while a prompt range of all
# layers reads about one chunk per layer (docs/caches.md).
PATTERN_CHUNK_BYTES = 2 << 20
FLOAT16_MAX = float(np.finfo(np.float16).max)


class CacheError(ValueError):
    """A cache file is missing, unreadable, incomplete, foreign or inconsistent; the message says how to rebuild it."""


class CacheChecksumError(CacheError):
    """A dataset of a cache fails its fletcher32 checksum: the file is corrupt."""


def rebuild_command(path: str | Path) -> str:
    """The shell command that rebuilds the cache at `path` (run with the run's --configfile/--profile)."""
    quoted = shlex.quote(str(path))
    return f"rm -f {quoted} && snakemake {quoted}"


def _fix_hint(path: str | Path) -> str:
    return f"rebuild it with `{rebuild_command(path)}` (with the --configfile/--profile of the run that made it)"


def _forcerun_hint(path: str | Path, hook: str) -> str:
    return (
        f"set analysis.cka_hook: {hook} in the config and rebuild the caches with "
        f"`snakemake {shlex.quote(str(path))} --forcerun cache_activations` (with the --configfile/--profile of "
        "the run that made it)"
    )


def is_filter_failure(error: OSError) -> bool:
    """Whether an h5py read error is a failed filter: HDF5 reports a fletcher32 mismatch as "filter returned failure"."""
    text = str(error).lower()
    return "filter" in text or "checksum" in text


# ---------------------------------------------------------------- tokens
def resid_hook_name(model: Any) -> str:
    """`hook_resid_mid` when the model has it, `hook_resid_post` for attention-only models (no MLP: identical)."""
    return "hook_resid_mid" if "blocks.0.hook_resid_mid" in model.hook_dict else "hook_resid_post"


def _check_resid_hook(hook: str) -> None:
    if hook not in RESID_HOOKS:
        raise ValueError(
            f"residual hook {hook!r} is not one of {', '.join(RESID_HOOKS)} (config key analysis.cka_hook)"
        )


def resid_dataset_name(hook: str, resid_hook: str = "hook_resid_mid") -> str:
    """The dataset holding residual hook `hook` in a cache whose `resid_mid` holds `resid_hook`.

    `hook_resid_mid` is always `resid_mid`; so is `hook_resid_post` of an attention-only model (its
    `resid_mid` holds `hook_resid_post`); otherwise the hook's name without "hook_" (`resid_pre`, `resid_post`).
    """
    _check_resid_hook(hook)
    if hook in ("hook_resid_mid", resid_hook):
        return "resid_mid"
    return hook.removeprefix("hook_")


def _extra_resid_datasets(extra_resid_hooks: Sequence[str], resid_hook: str) -> dict[str, str]:
    """{dataset: hook} of the requested hooks that `resid_mid` does not already hold, in RESID_HOOKS order."""
    if isinstance(extra_resid_hooks, str):
        raise TypeError(f"extra_resid_hooks must be a sequence of hook names, got the string {extra_resid_hooks!r}")
    for hook in extra_resid_hooks:
        _check_resid_hook(hook)
    return {
        resid_dataset_name(hook, resid_hook): hook
        for hook in RESID_HOOKS
        if hook in extra_resid_hooks and resid_dataset_name(hook, resid_hook) != "resid_mid"
    }


def tokenize_prompts(tokenizer: Any, prompts: Sequence[str], prepend_bos: bool) -> list[list[int]]:
    """Token ids of each prompt, without the tokenizer's own special tokens, BOS prepended when asked.

    Matches the paper's code (TransformerLens prepends BOS); tokenizing without special tokens and
    prepending `bos_token_id` ourselves keeps that exact for tokenizers that add other specials.
    """
    bos = tokenizer.bos_token_id
    if prepend_bos and bos is None:
        raise ValueError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', tokenizer)!r} has no bos_token_id, but cache.prepend_bos "
            "is true; set cache.prepend_bos: false or use a tokenizer with a BOS token"
        )
    encoded = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    return [([int(bos)] if prepend_bos else []) + [int(t) for t in ids] for ids in encoded]


def pad_token_id_of(tokenizer: Any) -> int:
    """Id stored in padded positions of `tokens` (pad, else EOS, else 0); never attended by real tokens."""
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if candidate is not None:
            return int(candidate)
    return 0


def check_prompt_lengths(
    token_lists: Sequence[Sequence[int]], n_ctx: int, promptset: str, source: str | Path | None = None
) -> None:
    """Fail on an empty prompt or one longer than the model's context (BOS counted), naming its index and length."""
    where = f" (file {source})" if source is not None else ""
    for index, ids in enumerate(token_lists):
        if len(ids) == 0:
            raise ValueError(
                f"prompt set '{promptset}'{where}: prompt {index} has no tokens; remove it or fill it in"
            )
        if len(ids) > n_ctx:
            raise ValueError(
                f"prompt set '{promptset}'{where}: prompt {index} has {len(ids)} tokens (BOS included when "
                f"prepended), longer than the model's context n_ctx={n_ctx}; shorten or remove that prompt"
            )


def pad_token_lists(token_lists: Sequence[Sequence[int]], pad_token_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token lists to the longest one.

    Returns (tokens int32 [prompt, pos], lengths int32 [prompt]).
    """
    lengths = np.array([len(ids) for ids in token_lists], dtype=np.int32)
    tokens = np.full((len(token_lists), int(lengths.max(initial=0))), pad_token_id, dtype=np.int32)
    for row, ids in enumerate(token_lists):
        tokens[row, : len(ids)] = ids
    return tokens, lengths


# ---------------------------------------------------------------- forward pass
def valid_positions(lengths: np.ndarray, n_pos: int) -> np.ndarray:
    """[prompt, pos] True where the position holds a real token."""
    return np.arange(n_pos)[None, :] < np.asarray(lengths)[:, None]


def lower_triangle_offsets(lengths: np.ndarray) -> np.ndarray:
    """int64 [prompt + 1]: where each prompt's packed lower triangle starts in `attn_pattern` (last: the total)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(lengths * (lengths + 1) // 2)]).astype(np.int64)


@functools.lru_cache(maxsize=64)
def lower_triangle_index(length: int, n_pos: int | None = None) -> np.ndarray:
    """Flat row-major indices into an n_pos x n_pos square (default: length x length) of the lower
    triangle, diagonal included, of its leading length x length block: read-only [length (length + 1) / 2]."""
    rows, cols = np.tril_indices(length)
    index = rows * (length if n_pos is None else n_pos) + cols
    index.setflags(write=False)
    return index


def pack_lower_triangle(pattern: np.ndarray, length: int) -> np.ndarray:
    """[..., query_pos, key_pos] -> [..., length * (length + 1) / 2]: the row-major lower triangle
    (diagonal included) of the leading length x length block."""
    pattern = np.asarray(pattern)
    n_pos = pattern.shape[-1]
    return pattern.reshape(*pattern.shape[:-2], n_pos * n_pos)[..., lower_triangle_index(length, n_pos)]


def unpack_lower_triangles(packed: np.ndarray, lengths: np.ndarray, offsets: np.ndarray, n_pos: int) -> np.ndarray:
    """Inverse of packing: [..., lower_entry] (segments at `offsets`) -> [..., prompt, query_pos, key_pos]
    zero outside each prompt's lower triangle. The prompt axis is inserted before the two position axes."""
    lead = packed.shape[:-1]
    out = np.zeros((*lead, len(lengths), n_pos * n_pos), dtype=np.float32)
    for prompt, length in enumerate(np.asarray(lengths, dtype=np.int64)):
        out[..., prompt, lower_triangle_index(int(length), n_pos)] = packed[..., offsets[prompt] : offsets[prompt + 1]]
    return out.reshape(*lead, len(lengths), n_pos, n_pos)


def _hook_templates(resid_hook: str, extra_resid_hooks: Sequence[str] = ()) -> dict[str, str]:
    """TransformerLens hook behind each dataset, `{layer}` to fill in (extra residual hooks after the three)."""
    return {
        "attn_pattern": "blocks.{layer}.attn.hook_pattern",
        "resid_mid": "blocks.{layer}." + resid_hook,
        "head_out": "blocks.{layer}.attn.hook_z",
        **{kind: "blocks.{layer}." + hook for kind, hook in _extra_resid_datasets(extra_resid_hooks, resid_hook).items()},
    }


def _hook_names(n_layers: int, resid_hook: str, extra_resid_hooks: Sequence[str] = ()) -> dict[str, list[str]]:
    return {
        kind: [template.format(layer=layer) for layer in range(n_layers)]
        for kind, template in _hook_templates(resid_hook, extra_resid_hooks).items()
    }


def collect_activations(
    model: Any, tokens: np.ndarray, lengths: np.ndarray, extra_resid_hooks: Sequence[str] = ()
) -> dict[str, np.ndarray]:
    """One forward pass over a right-padded batch; the cached activations, zeroed outside real tokens.

    tokens: int [batch, pos]; lengths: [batch]. Right padding keeps every real token's causal
    pattern exact (a query never attends to later positions). Returns float32 numpy arrays
    `attn_pattern` [layer, batch, head, query_pos, key_pos], `resid_mid` [layer, batch, pos, d_model],
    `head_out` [layer, batch, pos, head, d_head], and for each of `extra_resid_hooks` that `resid_mid`
    does not already hold (see resid_dataset_name) `resid_pre` / `resid_post` [layer, batch, pos, d_model].
    """
    import torch

    n_layers = int(model.cfg.n_layers)
    names = _hook_names(n_layers, resid_hook_name(model), extra_resid_hooks)
    wanted = {name for kind_names in names.values() for name in kind_names}
    device = next(model.parameters()).device
    batch = torch.as_tensor(np.asarray(tokens), dtype=torch.long, device=device)
    valid = torch.as_tensor(valid_positions(lengths, batch.shape[1]), device=device)
    # [batch, pos] -> broadcastable masks per kind; zeroing on the device is cheap there.
    masks = {
        "attn_pattern": valid[:, None, :, None] & valid[:, None, None, :],
        "resid_mid": valid[:, :, None],
        "head_out": valid[:, :, None, None],
        **dict.fromkeys(OPTIONAL_DATASET_DIMS, valid[:, :, None]),
    }
    out = {}
    with torch.inference_mode():
        # names_filter keeps only what we store: the full cache of a big model is many times larger.
        _, cache = model.run_with_cache(batch, names_filter=lambda name: name in wanted)
        for kind, kind_names in names.items():
            stacked = torch.stack([cache[name].float() for name in kind_names])
            out[kind] = torch.where(masks[kind], stacked, 0.0).cpu().numpy()
        del cache
    return out


# ---------------------------------------------------------------- writing
def pattern_chunk_entries(n_heads: int, itemsize: int, n_entries: int) -> int:
    """K of attn_pattern's (1, n_heads, K) chunks: PATTERN_CHUNK_BYTES per chunk, at most the whole row."""
    return max(1, min(n_entries, PATTERN_CHUNK_BYTES // (n_heads * itemsize)))


def _filters(compression_level: int | None, checksum: bool, compress: bool) -> dict[str, Any]:
    """h5py filter options of one dataset: shuffle + gzip when `compress` and a level is set, fletcher32 when `checksum`."""
    filters: dict[str, Any] = {"fletcher32": checksum}
    if compress and compression_level is not None:
        filters |= {"compression": "gzip", "compression_opts": compression_level, "shuffle": True}
    return filters


def _json_attr(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _check_float16_range(values: np.ndarray, kind: str, promptset: str, rows: np.ndarray) -> None:
    peak = float(np.abs(values).max(initial=0.0))
    if peak > FLOAT16_MAX:
        raise ValueError(
            f"prompt set '{promptset}', prompts {sorted(rows.tolist())}: {kind} reaches {peak:.4g}, beyond float16's range "
            f"({FLOAT16_MAX:.0f}); set cache.dtype: float32 in the config"
        )


def write_activation_cache(
    path: str | Path,
    model: Any,
    token_sets: Mapping[str, Sequence[Sequence[int]]],
    *,
    pad_token_id: int,
    batch_size: int = 20,
    dtype: str = "float32",
    prompt_texts: Mapping[str, Sequence[str]] | None = None,
    set_attrs: Mapping[str, Mapping[str, Any]] | None = None,
    attrs: Mapping[str, Any] | None = None,
    compression_level: int | None = GZIP_LEVEL,
    extra_resid_hooks: Sequence[str] = (),
    show_progress: bool = True,
    checksum: bool = True,
) -> Path:
    """Run every prompt set through `model` in right-padded batches and write the HDF5 cache at `path`.

    token_sets: {prompt set: [token ids of each prompt]} (BOS already prepended when wanted).
    prompt_texts: {prompt set: [prompt text]} stored as the `prompts` dataset (else token ids as text).
    set_attrs: extra attributes per group (e.g. the prompt file and its sha256); attrs: extra file
    attributes (dicts and lists stored as JSON strings). Each batch is written as it is computed, so
    memory holds about one batch plus one prompt set's packed patterns (about half its padded
    patterns), not the cache.
    compression_level: gzip level 1-9 behind the shuffle filter for resid_mid/head_out (and optional
    residual hooks), or None for uncompressed chunks.
    extra_resid_hooks: residual hooks to store beside `resid_mid` (e.g. ("hook_resid_pre",)), as datasets
    `resid_pre` / `resid_post` laid out like `resid_mid`; hooks `resid_mid` already holds add nothing.
    checksum: fletcher32 on every dataset (the format's contract); False only to measure its cost
    (benchmarks/).
    Returns the path.
    """
    if dtype not in ("float32", "float16"):
        raise ValueError(f"cache dtype {dtype!r} is not supported; use float32 or float16 (config key cache.dtype)")
    if batch_size < 1:
        raise ValueError(f"cache batch_size must be >= 1, got {batch_size} (config key cache.batch_size)")
    if compression_level is not None and not 1 <= compression_level <= 9:
        raise ValueError(f"compression_level must be 1-9 or None (uncompressed), got {compression_level}")
    path = Path(path)
    n_ctx = int(model.cfg.n_ctx)
    for name, token_lists in token_sets.items():
        if "/" in name or not name:
            raise ValueError(f"prompt set name {name!r} cannot be an HDF5 group name; rename it in the config")
        if len(token_lists) == 0:
            raise ValueError(f"prompt set '{name}' has no prompts; add prompts to it or remove it from prompt_sets")
        check_prompt_lengths(token_lists, n_ctx, name, (set_attrs or {}).get(name, {}).get("prompt_file"))
    resid_hook = resid_hook_name(model)
    extra_datasets = _extra_resid_datasets(extra_resid_hooks, resid_hook)
    padded = {name: pad_token_lists(lists, pad_token_id) for name, lists in token_sets.items()}
    n_batches = sum(-(-len(lengths) // batch_size) for _, lengths in padded.values())

    model.eval()
    progress = tqdm(total=n_batches, desc=f"cache {path.name}", unit="batch", disable=not show_progress)
    writer = _SetWriter(model, dtype, compression_level, checksum, extra_resid_hooks, batch_size)
    try:
        with atomic_path(path) as tmp, h5py.File(tmp, "w") as handle:
            handle.attrs["format"] = CACHE_FORMAT
            handle.attrs["format_version"] = CACHE_FORMAT_VERSION
            handle.attrs["complete"] = False
            for key, value in (attrs or {}).items():
                handle.attrs[key] = _json_attr(value) if isinstance(value, (dict, list, tuple)) else value
            handle.attrs["prompt_sets"] = _json_attr(list(token_sets))
            handle.attrs["resid_hook"] = resid_hook
            handle.attrs["extra_resid_hooks"] = _json_attr(list(extra_datasets.values()))
            handle.attrs["cache_dtype"] = dtype
            handle.attrs["compression"] = "none" if compression_level is None else f"shuffle+gzip{compression_level}"
            handle.attrs["checksum"] = "fletcher32" if checksum else "none"
            handle.attrs["batch_size"] = batch_size
            handle.attrs["pad_token_id"] = pad_token_id
            for key in ("n_layers", "n_heads", "d_model", "d_head", "n_ctx"):
                handle.attrs[key] = int(getattr(model.cfg, key))
            for name, (tokens, lengths) in padded.items():
                texts = list((prompt_texts or {}).get(name) or [" ".join(map(str, ids)) for ids in token_sets[name]])
                group = handle.create_group(name)
                for key, value in ((set_attrs or {}).get(name) or {}).items():
                    group.attrs[key] = _json_attr(value) if isinstance(value, (dict, list, tuple)) else value
                writer.write_set(group, tokens, lengths, texts, progress)
            handle.attrs["complete"] = True  # last: a file without it was interrupted
    finally:
        progress.close()
    log.info("wrote activation cache %s (%s prompt sets, %s)", path, len(token_sets), dtype)
    return path


class _SetWriter:
    """Writes one prompt set's group: its small datasets, then the activations batch by batch."""

    def __init__(self, model: Any, dtype: str, compression_level: int | None, checksum: bool,
                 extra_resid_hooks: Sequence[str], batch_size: int):
        cfg = model.cfg
        self.model, self.batch_size, self.extra_resid_hooks = model, batch_size, extra_resid_hooks
        self.n_layers, self.n_heads, self.d_model, self.d_head = (
            int(cfg.n_layers), int(cfg.n_heads), int(cfg.d_model), int(cfg.d_head))
        self.dtype = np.dtype(dtype)
        self.compression_level, self.checksum = compression_level, checksum
        resid_hook = resid_hook_name(model)
        self.templates = _hook_templates(resid_hook, extra_resid_hooks)
        self.extra_datasets = _extra_resid_datasets(extra_resid_hooks, resid_hook)

    def _small(self, group: h5py.Group, name: str, data: np.ndarray) -> None:
        group.create_dataset(name, data=data, **_filters(None, self.checksum, compress=False))

    def write_set(self, group: h5py.Group, tokens: np.ndarray, lengths: np.ndarray, texts: list[str],
                  progress: Any) -> None:
        n_prompts, n_pos = tokens.shape
        name = group.name.lstrip("/")
        if len(texts) != n_prompts:
            raise ValueError(f"prompt set '{name}': {len(texts)} prompt texts for {n_prompts} token lists")
        self._small(group, "tokens", tokens)
        self._small(group, "lengths", lengths)
        # Fixed-width UTF-8 bytes, not variable-length strings: HDF5 filters (the checksum) skip vlen data.
        encoded = [text.encode("utf-8") for text in texts]
        width = max(1, max(len(text) for text in encoded))
        self._small(group, "prompts", np.array(encoded, dtype=h5py.string_dtype("utf-8", width)))
        offsets = lower_triangle_offsets(lengths)
        self._small(group, "pattern_offsets", offsets)
        shapes = {
            "resid_mid": (self.n_layers, n_prompts, n_pos, self.d_model),
            "head_out": (self.n_layers, n_prompts, n_pos, self.n_heads, self.d_head),
            **dict.fromkeys(self.extra_datasets, (self.n_layers, n_prompts, n_pos, self.d_model)),
        }
        # One chunk per (layer, prompt): a layer is read alone, and every write covers whole chunks.
        datasets = {
            kind: group.create_dataset(kind, shape=shape, dtype=self.dtype, chunks=(1, 1, *shape[2:]), fillvalue=0,
                                       **_filters(self.compression_level, self.checksum, compress=True))
            for kind, shape in shapes.items()
        }
        # Held for the whole set and written once: length-sorted batches scatter over the file order.
        packed = np.empty((self.n_layers, self.n_heads, int(offsets[-1])), dtype=self.dtype)
        order = np.argsort(lengths, kind="stable")  # similar lengths per batch: less padding
        for start in range(0, n_prompts, self.batch_size):
            rows = np.sort(order[start : start + self.batch_size])  # h5py writes rows in increasing order
            width = int(lengths[rows].max())
            acts = collect_activations(self.model, tokens[rows, :width], lengths[rows], self.extra_resid_hooks)
            for kind, values in acts.items():
                if self.dtype == np.float16:
                    _check_float16_range(values, kind, name, rows)
                if kind == "attn_pattern":
                    for position, row in enumerate(rows):
                        packed[..., offsets[row] : offsets[row + 1]] = pack_lower_triangle(values[:, position], int(lengths[row]))
                    continue
                block = np.zeros((self.n_layers, len(rows), *shapes[kind][2:]), dtype=self.dtype)
                block[:, :, :width] = values
                datasets[kind][:, rows] = block
            progress.update(1)
        self._pattern(group, packed)
        for kind, dataset in datasets.items():
            dataset.attrs["dims"] = ALL_DATASET_DIMS[kind]
            dataset.attrs["hook"] = self.templates[kind]

    def _pattern(self, group: h5py.Group, packed: np.ndarray) -> None:
        """attn_pattern in (1, n_heads, K) chunks: a prompt range of all layers and a whole layer both read few chunks."""
        chunk = (1, self.n_heads, pattern_chunk_entries(self.n_heads, self.dtype.itemsize, packed.shape[-1]))
        dataset = group.create_dataset("attn_pattern", data=packed, chunks=chunk,
                                       **_filters(None, self.checksum, compress=False))
        dataset.attrs["dims"] = DATASET_DIMS["attn_pattern"]
        dataset.attrs["hook"] = self.templates["attn_pattern"]
        dataset.attrs["packing"] = (
            "row-major lower triangle (diagonal included) of each prompt's length x length block, "
            "prompts in file order, prompt p at pattern_offsets[p]:pattern_offsets[p+1]"
        )


def cache_activations(
    path: str | Path,
    model: Any,
    tokenizer: Any,
    prompt_sets: Mapping[str, Sequence[str]],
    *,
    prepend_bos: bool = True,
    batch_size: int = 20,
    dtype: str = "float32",
    prompt_files: Mapping[str, Mapping[str, str]] | None = None,
    attrs: Mapping[str, Any] | None = None,
    compression_level: int | None = GZIP_LEVEL,
    extra_resid_hooks: Sequence[str] = (),
    show_progress: bool = True,
) -> Path:
    """Tokenize `prompt_sets` ({name: [prompt text]}) and write the cache (see write_activation_cache).

    prompt_files: {prompt set: {"prompt_file": path, "prompt_file_sha256": hex}} stored on each group.
    The tokenizer's identity (name_or_path, vocab size, BOS/pad ids) goes into the file attributes.
    """
    token_sets = {name: tokenize_prompts(tokenizer, prompts, prepend_bos) for name, prompts in prompt_sets.items()}
    identity = {
        "tokenizer_name_or_path": str(getattr(tokenizer, "name_or_path", "")),
        "tokenizer_vocab_size": int(len(tokenizer)),
        "bos_token_id": -1 if tokenizer.bos_token_id is None else int(tokenizer.bos_token_id),
        "prepend_bos": bool(prepend_bos),
    }
    return write_activation_cache(
        path,
        model,
        token_sets,
        pad_token_id=pad_token_id_of(tokenizer),
        batch_size=batch_size,
        dtype=dtype,
        prompt_texts=prompt_sets,
        set_attrs=prompt_files,
        attrs={**identity, **(attrs or {})},
        compression_level=compression_level,
        extra_resid_hooks=extra_resid_hooks,
        show_progress=show_progress,
    )


# ---------------------------------------------------------------- reading
def _decode_attr(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    if isinstance(value, np.generic):
        return value.item()
    return value


class CacheReader:
    """Read-only view of one activation cache, validated against the contract when opened.

    Floating data comes back as float32 whatever the stored dtype. Use as a context manager:
    `with open_cache(path) as cache: cache.attn_pattern("primary", layer=0)`.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise CacheError(
                f"activation cache {self.path} does not exist; build it with `snakemake {shlex.quote(str(self.path))}`"
            )
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as err:
            raise CacheError(
                f"activation cache {self.path} is not a readable HDF5 file (truncated or corrupt: {err}); "
                + _fix_hint(self.path)
            ) from err
        try:
            self.attrs: dict[str, Any] = {key: _decode_attr(value) for key, value in self._file.attrs.items()}
            self._offsets: dict[str, np.ndarray] = {}
            self._patterns: dict[str, h5py.Dataset] = {}
            self._validate()
        except BaseException:
            self._file.close()
            raise

    # -- validation
    def _fail(self, what: str) -> CacheError:
        return CacheError(f"activation cache {self.path} {what}; " + _fix_hint(self.path))

    def _validate(self) -> None:
        if self.attrs.get("format") != CACHE_FORMAT:
            raise self._fail(
                f"is not a headstab activation cache (attribute format={self.attrs.get('format')!r}, expected "
                f"{CACHE_FORMAT!r})"
            )
        if self.attrs.get("format_version") != CACHE_FORMAT_VERSION:
            raise self._fail(
                f"has format_version {self.attrs.get('format_version')!r}; this code reads version {CACHE_FORMAT_VERSION}"
            )
        if self.attrs.get("complete") is not True:
            raise self._fail("is incomplete (its writer was interrupted: attribute complete is not True)")
        required = ("prompt_sets", "n_layers", "n_heads", "d_model", "d_head", "resid_hook", "cache_dtype")
        missing = [key for key in required if key not in self.attrs]
        if missing:
            raise self._fail(f"lacks the attributes {', '.join(missing)}")
        sets = self.attrs["prompt_sets"]
        if not isinstance(sets, list) or not sets:
            raise self._fail(f"has no prompt sets (attribute prompt_sets={sets!r})")
        n_layers, n_heads = self.attrs["n_layers"], self.attrs["n_heads"]
        d_model, d_head = self.attrs["d_model"], self.attrs["d_head"]
        # Optional residual hooks (attribute absent: none stored).
        extra_hooks = self.attrs.get("extra_resid_hooks", [])
        if not isinstance(extra_hooks, list) or not set(extra_hooks) <= set(RESID_HOOKS):
            raise self._fail(f"has an invalid extra_resid_hooks attribute {extra_hooks!r}")
        listed = [resid_dataset_name(hook, str(self.attrs["resid_hook"])) for hook in extra_hooks]
        for name in sets:
            group = self._file.get(name)
            if not isinstance(group, h5py.Group):
                raise self._fail(f"lacks the group /{name} listed in its prompt_sets attribute")
            missing = [key for key in (*DATASET_DIMS, *listed) if not isinstance(group.get(key), h5py.Dataset)]
            if missing:
                raise self._fail(f"lacks the datasets {', '.join('/' + name + '/' + m for m in missing)}")
            n_prompts, n_pos = group["tokens"].shape
            offsets = self._offsets[name] = self._read(name, "pattern_offsets", ())
            offsets.setflags(write=False)
            if group["lengths"].shape == (n_prompts,) and not np.array_equal(offsets, lower_triangle_offsets(self._read(name, "lengths", ()))):
                raise self._fail(f"has /{name}/pattern_offsets that do not match its lengths (packed attn_pattern is unreadable)")
            self._patterns[name] = _with_chunk_cache(group, "attn_pattern", n_chunks=int(self.attrs["n_layers"]) + 2)
            expected = {
                "lengths": (n_prompts,),
                "prompts": (n_prompts,),
                "pattern_offsets": (n_prompts + 1,),
                "attn_pattern": (n_layers, n_heads, int(offsets[-1]) if offsets.size else 0),
                "resid_mid": (n_layers, n_prompts, n_pos, d_model),
                "head_out": (n_layers, n_prompts, n_pos, n_heads, d_head),
                **{key: (n_layers, n_prompts, n_pos, d_model) for key in OPTIONAL_DATASET_DIMS if key in group},
            }
            for key, shape in expected.items():
                if group[key].shape != shape:
                    raise self._fail(f"has /{name}/{key} of shape {group[key].shape}, expected {shape}")

    # -- context manager
    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> CacheReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CacheReader({str(self.path)!r})"

    # -- metadata
    def prompt_sets(self) -> list[str]:
        return list(self.attrs["prompt_sets"])

    @property
    def n_layers(self) -> int:
        return int(self.attrs["n_layers"])

    @property
    def n_heads(self) -> int:
        return int(self.attrs["n_heads"])

    @property
    def resid_hook(self) -> str:
        """`hook_resid_mid`, or `hook_resid_post` for attention-only models (stored in `resid_mid`)."""
        return str(self.attrs["resid_hook"])

    def resid_hooks(self) -> list[str]:
        """Residual hooks this cache can hand out through `resid` (RESID_HOOKS order)."""
        stored = {"resid_mid"} | {resid_dataset_name(hook, self.resid_hook) for hook in self.attrs.get("extra_resid_hooks", [])}
        return [hook for hook in RESID_HOOKS if resid_dataset_name(hook, self.resid_hook) in stored]

    def group_attrs(self, promptset: str) -> dict[str, Any]:
        return {key: _decode_attr(value) for key, value in self._group(promptset).attrs.items()}

    def shapes(self, promptset: str) -> dict[str, tuple[int, ...]]:
        """Shape of every dataset of one prompt set (optional residual datasets when stored)."""
        group = self._group(promptset)
        return {key: tuple(group[key].shape) for key in ALL_DATASET_DIMS if key in group}

    def _group(self, promptset: str) -> h5py.Group:
        if promptset not in self.attrs["prompt_sets"]:
            raise KeyError(
                f"activation cache {self.path} has no prompt set '{promptset}'; it holds "
                f"{', '.join(self.attrs['prompt_sets'])} (add the set under prompt_sets in the config and rebuild)"
            )
        return self._file[promptset]

    def _dataset(self, promptset: str, key: str) -> h5py.Dataset:
        return self._patterns[promptset] if key == "attn_pattern" else self._group(promptset)[key]

    def _read(self, promptset: str, key: str, selection: tuple[Any, ...], out: np.ndarray | None = None) -> np.ndarray:
        """dataset[selection] (into `out` when given); a failed checksum or read becomes CacheError."""
        dataset = self._dataset(promptset, key)
        try:
            if out is None:
                return dataset[selection]
            dataset.read_direct(out, selection)
            return out
        except OSError as err:  # a damaged chunk surfaces only when read
            raise self._read_error(promptset, key, err) from err

    def _read_error(self, promptset: str, key: str, err: OSError) -> CacheError:
        if is_filter_failure(err):
            return CacheChecksumError(
                f"activation cache {self.path}: dataset /{promptset}/{key} is corrupt (checksum mismatch; HDF5: {err}); "
                + _fix_hint(self.path)
            )
        return self._fail(f"could not read /{promptset}/{key} ({err})")

    def verify(self) -> None:
        """Read every dataset of every prompt set in full, chunk by chunk, which checks every checksum.

        Raises CacheChecksumError naming the first corrupt dataset.
        """
        for promptset in self.prompt_sets():
            for key in self._group(promptset):
                dataset = self._dataset(promptset, key)
                for selection in dataset.iter_chunks() if dataset.chunks else [()]:
                    self._read(promptset, key, selection)

    # -- data
    def tokens(self, promptset: str) -> np.ndarray:
        """int32 [prompt, pos], pad id where padded."""
        return self._read(promptset, "tokens", ())

    def lengths(self, promptset: str) -> np.ndarray:
        """int32 [prompt]: real tokens per prompt (BOS included when prepended)."""
        return self._read(promptset, "lengths", ())

    def prompts(self, promptset: str) -> list[str]:
        return [text.decode("utf-8") if isinstance(text, bytes) else str(text)
                for text in self._read(promptset, "prompts", ())]

    def _layer_selection(self, key: str, layer: int | None, prompts: slice | None) -> tuple[Any, ...]:
        if layer is not None and not 0 <= layer < self.n_layers:
            raise IndexError(f"layer {layer} out of range for {self.path} ({self.n_layers} layers)")
        return (slice(None) if layer is None else int(layer), slice(None) if prompts is None else prompts)

    def _float(self, promptset: str, key: str, layer: int | None, prompts: slice | None) -> np.ndarray:
        return self._read(promptset, key, self._layer_selection(key, layer, prompts)).astype(np.float32, copy=False)

    def pattern_offsets(self, promptset: str) -> np.ndarray:
        """int64 [prompt + 1], read-only: prompt p's packed lower triangle is attn_pattern_lower(...)[..., o[p]:o[p + 1]]."""
        self._group(promptset)  # a clear KeyError for an unknown set
        return self._offsets[promptset]  # read and checked against the lengths when the file was opened

    def attn_pattern(self, promptset: str, layer: int | None = None, prompts: slice | Sequence[int] | None = None) -> np.ndarray:
        """Post-softmax patterns unpacked to float32 [layer, prompt, head, query_pos, key_pos], or
        [prompt, head, query_pos, key_pos] when `layer` is given (that layer alone is read); exactly
        zero above the diagonal and outside each prompt's length x length block."""
        lengths, offsets = self.lengths(promptset), self.pattern_offsets(promptset)
        n_pos = self._group(promptset)["tokens"].shape[1]
        wanted = np.arange(lengths.size)[slice(None) if prompts is None else prompts]
        first, last = (int(wanted.min()), int(wanted.max())) if wanted.size else (0, -1)
        # Only the entries from the first to the last wanted prompt are read.
        packed = self.attn_pattern_lower(promptset, layer=layer, prompts=slice(first, last + 1))  # [(layer,) head, entry]
        base = offsets[first]
        segments = [packed[..., offsets[p] - base : offsets[p + 1] - base] for p in wanted]
        segments = np.concatenate(segments, axis=-1) if segments else packed[..., :0]
        unpacked = unpack_lower_triangles(segments, lengths[wanted], lower_triangle_offsets(lengths[wanted]), n_pos)
        # [(layer,) head, prompt, q, k] -> [(layer,) prompt, head, q, k]
        return np.ascontiguousarray(np.swapaxes(unpacked, -4, -3))

    def attn_pattern_lower(
        self, promptset: str, layer: int | None = None, prompts: slice | None = None, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Packed lower triangles as stored, float32 [layer, head, lower_entry] ([head, lower_entry] with
        `layer`); `prompts` a contiguous slice of prompts (their entries are contiguous). `out`: a
        C-contiguous float32 array of the result's shape to read into (no intermediate copy)."""
        offsets = self.pattern_offsets(promptset)
        selected = np.arange(offsets.size - 1)[slice(None) if prompts is None else prompts]
        if selected.size and np.any(np.diff(selected) != 1):
            raise ValueError(f"prompts must be a contiguous slice of prompts (step 1); got {prompts}")
        start, stop = (int(offsets[selected[0]]), int(offsets[selected[-1] + 1])) if selected.size else (0, 0)
        if layer is not None and not 0 <= layer < self.n_layers:
            raise IndexError(f"layer {layer} out of range for {self.path} ({self.n_layers} layers)")
        selection = (slice(None) if layer is None else int(layer), slice(None), slice(start, stop))
        if out is None:
            return self._read(promptset, "attn_pattern", selection).astype(np.float32, copy=False)
        expected = ((self.n_layers,) if layer is None else ()) + (self.n_heads, stop - start)
        if out.shape != expected or out.dtype != np.float32 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous float32 array of shape {expected}; got {out.dtype} {out.shape}")
        if self._patterns[promptset].dtype == np.float32:
            return self._read(promptset, "attn_pattern", selection, out=out)
        out[...] = self._read(promptset, "attn_pattern", selection)
        return out

    def resid_mid(self, promptset: str, layer: int | None = None, prompts: slice | None = None) -> np.ndarray:
        """Residual stream after attention (hook named by `resid_hook`), float32: [layer, prompt, pos, d_model]
        ([prompt, pos, d_model] with `layer`)."""
        return self._float(promptset, "resid_mid", layer, prompts)

    def resid(self, promptset: str, hook: str, layer: int | None = None, prompts: slice | None = None) -> np.ndarray:
        """Residual stream at `hook` ("hook_resid_mid", "hook_resid_pre" or "hook_resid_post"), float32:
        [layer, prompt, pos, d_model] ([prompt, pos, d_model] with `layer`).

        hook_resid_mid is `resid_mid` (hook_resid_post for attention-only models, which also serves their
        hook_resid_post); the others need the cache to have been written with them (config key
        analysis.cka_hook), else CacheError names the file, the missing dataset and how to rebuild it.
        """
        key = resid_dataset_name(hook, self.resid_hook)
        if key not in self._group(promptset):
            raise CacheError(
                f"activation cache {self.path} has no dataset /{promptset}/{key} ({hook}; it was written with "
                f"residual hooks {', '.join(self.resid_hooks())} only); " + _forcerun_hint(self.path, hook)
            )
        return self._float(promptset, key, layer, prompts)

    def head_out(self, promptset: str, layer: int | None = None, prompts: slice | None = None) -> np.ndarray:
        """Per-head attention outputs `hook_z`, float32: [layer, prompt, pos, head, d_head]
        ([prompt, pos, head, d_head] with `layer`)."""
        return self._float(promptset, "head_out", layer, prompts)

    def iter_layers(self, promptset: str, key: str = "attn_pattern") -> Iterator[tuple[int, np.ndarray]]:
        """(layer, that layer's data) for each layer, read one at a time (memory: one layer); attn_pattern unpacked."""
        for layer in range(self.n_layers):
            yield layer, self.attn_pattern(promptset, layer) if key == "attn_pattern" else self._float(promptset, key, layer, None)


def _with_chunk_cache(group: h5py.Group, name: str, n_chunks: int) -> h5py.Dataset:
    """Dataset `name` of `group` opened with a chunk cache of `n_chunks` of its chunks.

    attn_pattern needs n_layers + 2: a read of a prompt range of all layers ends in one chunk per layer
    that the next range starts in, plus room for the chunks it passes through; smaller caches read and
    verify those chunks twice. (w0 keeps HDF5's default: with w0 = 1, HDF5 2.0 kept every partly read
    chunk, the whole dataset.)
    """
    dataset = group[name]
    if dataset.chunks is None:
        return dataset
    chunk_bytes = int(np.prod(dataset.chunks)) * dataset.dtype.itemsize
    del dataset  # HDF5 applies a chunk cache only when it opens a dataset that no handle holds open
    access = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    nslots, _, w0 = access.get_chunk_cache()
    access.set_chunk_cache(nslots, n_chunks * chunk_bytes, w0)
    return h5py.Dataset(h5py.h5d.open(group.id, name.encode(), dapl=access))


def open_cache(path: str | Path) -> CacheReader:
    """Open and validate an activation cache; the only way analyses should read one."""
    return CacheReader(path)


def check_consistent_shapes(paths: Sequence[str | Path]) -> dict[str, dict[str, tuple[int, ...]]]:
    """Check that caches of one architecture agree in prompt sets, shapes and prompt lengths.

    Returns {prompt set: {dataset: shape}} of the first file. Raises CacheError naming both files.
    """
    if not paths:
        raise ValueError("check_consistent_shapes needs at least one cache path")
    reference: dict[str, dict[str, tuple[int, ...]]] = {}
    reference_lengths: dict[str, np.ndarray] = {}
    first = Path(paths[0])
    for index, path in enumerate(paths):
        with open_cache(path) as cache:
            sets = cache.prompt_sets()
            if index == 0:
                reference = {name: cache.shapes(name) for name in sets}
                reference_lengths = {name: cache.lengths(name) for name in sets}
                continue
            if sets != list(reference):
                raise CacheError(
                    f"activation caches {first} and {path} hold different prompt sets ({list(reference)} vs {sets}); "
                    f"rebuild the stale one with `{rebuild_command(path)}`"
                )
            for name in sets:
                shapes = cache.shapes(name)
                for key, shape in reference[name].items():
                    if key in shapes and shapes[key] != shape:  # optional resid_pre/resid_post: only when both hold it
                        raise CacheError(
                            f"activation caches {first} and {path} disagree on /{name}/{key} "
                            f"({ALL_DATASET_DIMS[key]}): {shape} vs {shapes[key]}; caches of one architecture must "
                            f"share layers, heads, prompts and positions; rebuild the stale one with "
                            f"`{rebuild_command(path)}`"
                        )
                if not np.array_equal(cache.lengths(name), reference_lengths[name]):
                    raise CacheError(
                        f"activation caches {first} and {path} disagree on /{name}/lengths (different tokenizer or "
                        f"prompts); rebuild the stale one with `{rebuild_command(path)}`"
                    )
    return reference
