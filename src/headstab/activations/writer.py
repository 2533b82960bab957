"""Writing an activation cache: every prompt set through the model in batches, into one HDF5 file.

Contract: docs/caches.md. Each prompt's activations are written as soon as its batch is computed,
only its real tokens (padding is the datasets' fill value, zero); the packed patterns of a prompt set
are gathered in memory and written once, since length-sorted batches scatter over the file order.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from tqdm.auto import tqdm

from headstab.activations.capture import (
    check_known_words,
    check_prompt_lengths,
    collect_activations,
    extra_resid_hooks_for,
    hook_template,
    pad_token_id_of,
    pad_token_lists,
    resid_hook_name,
    stored_hooks,
    tokenize_prompts,
)
from headstab.activations.h5util import seal
from headstab.activations.options import CacheOptions
from headstab.activations.packing import lower_triangle_index, lower_triangle_offsets
from headstab.fileio import atomic_path
from headstab.plan.formats import CACHE_FORMAT, CACHE_FORMAT_VERSION

__all__ = [
    "DATASET_DIMS",
    "CacheOptions",
    "PATTERN_CHUNK_BYTES",
    "POSITION_CHUNK",
    "cache_activations",
    "dataset_dims",
    "write_activation_cache",
]

log = logging.getLogger(__name__)

DEFAULT_OPTIONS = CacheOptions()  # frozen: one shared default is safe

DATASET_DIMS = {
    "tokens": "prompt,pos",
    "lengths": "prompt",
    "prompts": "prompt",
    "pattern_offsets": "prompt+1",
    "hook_pattern": "layer,head,lower_entry",
    "hook_z": "layer,prompt,pos,head,d_head",
}
RESID_DIMS = "layer,prompt,pos,d_model"
# A few MB per hook_pattern chunk: small per-chunk overhead, and a prompt range of all layers reads
# about one chunk per layer.
PATTERN_CHUNK_BYTES = 2 << 20
# Positions per chunk of the per-token datasets: chunks wholly in a prompt's padding are never written.
POSITION_CHUNK = 32
FLOAT16_MAX = float(np.finfo(np.float16).max)


def dataset_dims(name: str) -> str:
    """The `dims` attribute of dataset `name` (the residual hooks share one layout)."""
    return DATASET_DIMS.get(name, RESID_DIMS)


def _filters(compression_level: int | None, checksum: bool) -> dict[str, Any]:
    """h5py options: fletcher32 when `checksum`, shuffle + gzip when a level is given."""
    filters: dict[str, Any] = {"fletcher32": checksum}
    if compression_level is not None:
        filters |= {"compression": "gzip", "compression_opts": compression_level, "shuffle": True}
    return filters


def _compression_attr(level: int | None) -> str:
    return "none" if level is None else f"shuffle+gzip{level}"


def _json_attr(value: Any) -> Any:
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list, tuple)) else value


def _check_arguments(
    token_sets: Mapping[str, Sequence[Sequence[int]]],
    n_ctx: int,
    set_attrs: Mapping[str, Mapping[str, Any]],
    activation_sets: Sequence[str] | None,
) -> None:
    for name, token_lists in token_sets.items():
        if "/" in name or not name:
            raise ValueError(f"prompt set name {name!r} cannot be an HDF5 group name; rename it in the config")
        if len(token_lists) == 0:
            raise ValueError(f"prompt set '{name}' has no prompts; add prompts to it or remove it from prompt_sets")
        check_prompt_lengths(token_lists, n_ctx, name, set_attrs.get(name, {}).get("prompt_file"))
    unknown = [name for name in activation_sets or () if name not in token_sets]
    if unknown:
        raise ValueError(
            f"activation_sets names prompt sets {unknown} that are not among the cached sets {list(token_sets)} "
            "(config key cache.activation_sets)"
        )


def _mode(
    patterns_only: bool, residual_only: bool, activation_sets: Sequence[str] | None, full_sets: list[str]
) -> tuple[dict[str, Any], str | None]:
    """The file attributes of a cache's mode, and the `activations` marker of its full sets (None: no markers)."""
    attrs = {
        **({"patterns_only": True} if patterns_only else {}),
        **({"residual_only": True} if residual_only else {}),
        **({} if patterns_only or activation_sets is None else {"activation_sets": full_sets}),
    }
    if patterns_only or (activation_sets is None and not residual_only):
        return attrs, None
    return attrs, "residual" if residual_only else "all"


def write_activation_cache(
    path: str | Path,
    model: Any,
    token_sets: Mapping[str, Sequence[Sequence[int]]],
    *,
    pad_token_id: int,
    options: CacheOptions = DEFAULT_OPTIONS,
    prompt_texts: Mapping[str, Sequence[str]] | None = None,
    set_attrs: Mapping[str, Mapping[str, Any]] | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> Path:
    """Run every prompt set through `model` in right-padded, length-sorted batches and write the cache.

    token_sets: {prompt set: [token ids of each prompt]} (BOS already prepended when wanted).
    prompt_texts: {prompt set: [prompt text]} stored as `prompts` (else the token ids as text).
    set_attrs: attributes per group (e.g. the prompt file and its sha256); attrs: file attributes
    (dicts and lists stored as JSON strings).
    options: how it is written (`CacheOptions`).
    Written through a temporary file, `complete=True` last; returns the path.
    """
    set_attrs = set_attrs or {}
    _check_arguments(token_sets, int(model.cfg.n_ctx), set_attrs, options.activation_sets)
    patterns_only, activation_sets, dtype = options.patterns_only, options.activation_sets, options.dtype
    full_sets = (
        [] if patterns_only else [name for name in token_sets if activation_sets is None or name in activation_sets]
    )
    mode_attrs, marker = _mode(patterns_only, options.residual_only, activation_sets, full_sets)
    path = Path(path)
    resid_hook = resid_hook_name(model)
    extra = [] if patterns_only else extra_resid_hooks_for(options.extra_resid_hooks, resid_hook)
    padded = {name: pad_token_lists(lists, pad_token_id) for name, lists in token_sets.items()}
    n_batches = sum(-(-len(lengths) // options.batch_size) for _, lengths in padded.values())
    model.eval()
    writer = _SetWriter(
        model,
        dtype,
        _filters(options.compression_level, options.checksum),
        _filters(None, options.checksum),
        extra,
        options.batch_size,
        patterns_only,
        pattern_filters=_filters(options.pattern_compression_level, options.checksum),
        residual_only=options.residual_only,
    )
    file_attrs = {
        **(attrs or {}),
        "prompt_sets": list(token_sets),
        "resid_hook": resid_hook,
        "extra_resid_hooks": extra,
        "cache_dtype": dtype,
        "compression": _compression_attr(options.compression_level),
        "pattern_compression": _compression_attr(options.pattern_compression_level),
        "checksum": "fletcher32" if options.checksum else "none",
        "batch_size": options.batch_size,
        "pad_token_id": pad_token_id,
        **mode_attrs,
        **{key: int(getattr(model.cfg, key)) for key in ("n_layers", "n_heads", "d_model", "d_head", "n_ctx")},
    }
    with (
        tqdm(total=n_batches, desc=f"cache {path.name}", unit="batch", disable=not options.show_progress) as progress,
        atomic_path(path) as tmp,
        h5py.File(tmp, "w") as handle,
    ):
        handle.attrs.update({"format": CACHE_FORMAT, "format_version": CACHE_FORMAT_VERSION, "complete": False})
        for key, value in file_attrs.items():
            handle.attrs[key] = _json_attr(value)
        for name, (tokens, lengths) in padded.items():
            texts = list((prompt_texts or {}).get(name) or [" ".join(map(str, ids)) for ids in token_sets[name]])
            group = handle.create_group(name)
            for key, value in (set_attrs.get(name) or {}).items():
                group.attrs[key] = _json_attr(value)
            if marker is not None:
                group.attrs["activations"] = marker if name in full_sets else "hook_pattern"
            writer.write_set(group, tokens, lengths, texts, progress, patterns_only=name not in full_sets)
        seal(handle)  # the attributes' digests, then complete=True: a file without it was interrupted
    log.info("wrote activation cache %s (%s prompt sets, %s)", path, len(token_sets), dtype)
    return path


class _SetWriter:
    """Writes one prompt set's group: its small datasets, then the activations batch by batch."""

    def __init__(
        self,
        model: Any,
        dtype: str,
        filters: dict[str, Any],
        plain: dict[str, Any],
        extra_resid_hooks: list[str],
        batch_size: int,
        patterns_only: bool = False,
        pattern_filters: dict[str, Any] | None = None,
        residual_only: bool = False,
    ):
        cfg = model.cfg
        self.model, self.batch_size, self.extra_resid_hooks = model, batch_size, extra_resid_hooks
        self.n_layers, self.n_heads = int(cfg.n_layers), int(cfg.n_heads)
        self.dtype = np.dtype(dtype)
        self.filters, self.plain = filters, plain
        self.pattern_filters = plain if pattern_filters is None else pattern_filters
        self.patterns_only, self.residual_only = patterns_only, residual_only
        self.all_hooks = ["hook_pattern"] if patterns_only else stored_hooks(resid_hook_name(model), extra_resid_hooks)
        self.all_hooks = [hook for hook in self.all_hooks if not (residual_only and hook == "hook_z")]
        self._buffer = np.empty(0, dtype=self.dtype)
        self.all_shapes = {
            hook: (int(cfg.n_heads), int(cfg.d_head)) if hook == "hook_z" else (int(cfg.d_model),)
            for hook in self.all_hooks
            if hook != "hook_pattern"
        }

    def write_set(
        self,
        group: h5py.Group,
        tokens: np.ndarray,
        lengths: np.ndarray,
        texts: list[str],
        progress: Any,
        patterns_only: bool = False,
    ) -> None:
        """patterns_only: this set stores hook_pattern alone (not in activation_sets)."""
        patterns_only = patterns_only or self.patterns_only
        hooks = ["hook_pattern"] if patterns_only else self.all_hooks
        shapes = {} if patterns_only else self.all_shapes
        n_prompts, n_pos = tokens.shape
        name = group.name.lstrip("/")
        if len(texts) != n_prompts:
            raise ValueError(f"prompt set '{name}': {len(texts)} prompt texts for {n_prompts} token lists")
        # Fixed-width UTF-8 bytes, not variable-length strings: HDF5 filters (the checksum) skip vlen data.
        encoded = [text.encode("utf-8") for text in texts]
        offsets = lower_triangle_offsets(lengths)
        small = {
            "tokens": tokens,
            "lengths": lengths,
            "pattern_offsets": offsets,
            "prompts": np.array(encoded, dtype=h5py.string_dtype("utf-8", max(1, max(map(len, encoded))))),
        }
        for key in ("tokens", "lengths", "prompts", "pattern_offsets"):
            group.create_dataset(key, data=small[key], **self.plain)
        datasets = {
            hook: group.create_dataset(
                hook,
                shape=(self.n_layers, n_prompts, n_pos, *rest),
                dtype=self.dtype,
                chunks=(1, 1, min(n_pos, POSITION_CHUNK), *rest),
                fillvalue=0,
                **self.filters,
            )
            for hook, rest in shapes.items()
        }
        packed = self._packed_buffer(int(offsets[-1]))
        order = np.argsort(lengths, kind="stable")  # similar lengths per batch: less padding
        for start in range(0, n_prompts, self.batch_size):
            rows = order[start : start + self.batch_size]
            width = int(lengths[rows].max())
            acts = collect_activations(
                self.model, tokens[rows, :width], self.extra_resid_hooks, patterns_only, self.residual_only
            )
            for position, row in enumerate(rows):
                self._write_prompt(acts, position, int(lengths[row]), packed[..., offsets[row] : offsets[row + 1]])
                for hook, dataset in datasets.items():
                    dataset[:, row, : lengths[row]] = self._stacked(
                        acts[hook], position, int(lengths[row]), hook, name, row
                    )
            progress.update(1)
        pattern = group.create_dataset(
            "hook_pattern", data=packed, chunks=self._pattern_chunks(packed.shape[-1]), **self.pattern_filters
        )
        pattern.attrs["packing"] = (
            "row-major lower triangle (diagonal included) of each prompt's length x length block, "
            "prompts in file order, prompt p at pattern_offsets[p]:pattern_offsets[p+1]"
        )
        for hook in hooks:
            group[hook].attrs.update({"dims": dataset_dims(hook), "hook": hook_template(hook)})

    def _packed_buffer(self, n_entries: int) -> np.ndarray:
        """[layer, head, n_entries] for one prompt set's packed patterns, in memory kept across sets:
        fresh pages cost time."""
        size = self.n_layers * self.n_heads * n_entries
        if self._buffer.size < size:
            self._buffer = np.empty(size, dtype=self.dtype)
        return self._buffer[:size].reshape(self.n_layers, self.n_heads, n_entries)

    def _write_prompt(self, acts: dict[str, list[np.ndarray]], position: int, length: int, segment: np.ndarray) -> None:
        """One prompt's packed lower triangles of every layer into `segment` [layer, head, entry]."""
        width = acts["hook_pattern"][0].shape[-1]
        index = lower_triangle_index(length, width)
        for layer, values in enumerate(acts["hook_pattern"]):
            square = values[position].reshape(self.n_heads, width * width)
            if self.dtype == np.float32:
                np.take(square, index, axis=1, out=segment[layer], mode="clip")  # no temporary copy
            else:
                segment[layer] = square[:, index]

    def _stacked(
        self, per_layer: list[np.ndarray], position: int, length: int, hook: str, name: str, row: int
    ) -> np.ndarray:
        """[layer, length, ...] of one prompt's real tokens, in the stored dtype."""
        block = np.stack([values[position, :length] for values in per_layer])
        if self.dtype == np.float16:
            peak = float(np.abs(block).max(initial=0.0))
            if peak > FLOAT16_MAX:
                raise ValueError(
                    f"prompt set '{name}', prompt {row}: {hook} reaches {peak:.4g}, beyond float16's range "
                    f"({FLOAT16_MAX:.0f}); set cache.dtype: float32 in the config"
                )
        return block.astype(self.dtype, copy=False)

    def _pattern_chunks(self, n_entries: int) -> tuple[int, int, int]:
        """(1, n_heads, K): PATTERN_CHUNK_BYTES per chunk, at most the whole row."""
        return 1, self.n_heads, max(1, min(n_entries, PATTERN_CHUNK_BYTES // (self.n_heads * self.dtype.itemsize)))


def cache_activations(
    path: str | Path,
    model: Any,
    tokenizer: Any,
    prompt_sets: Mapping[str, Sequence[str]],
    *,
    options: CacheOptions = DEFAULT_OPTIONS,
    prepend_bos: bool = True,
    prompt_files: Mapping[str, Mapping[str, str]] | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> Path:
    """Tokenize `prompt_sets` ({name: [prompt text]}) and write the cache as `options` say
    (`CacheOptions`). prompt_files: {prompt set: {"prompt_file": path, "prompt_file_sha256":
    hex}} stored on each group; the tokenizer's identity goes into the file attributes. A prompt with words
    the tokenizer does not know fails before the model runs (rule check_prompts runs the same check)."""
    for name, prompts in prompt_sets.items():
        check_known_words(tokenizer, prompts, name, (prompt_files or {}).get(name, {}).get("prompt_file"))
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
        prompt_texts=prompt_sets,
        set_attrs=prompt_files,
        attrs={**identity, **(attrs or {})},
        options=options,
    )
