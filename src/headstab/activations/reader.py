"""Reading an activation cache: the validated reader every analysis uses (contract: docs/caches.md).

`open_cache` checks the file against the contract when it opens it; a missing, truncated, corrupt,
foreign, incomplete or older-format file, or one whose attributes fail their digest, raises CacheError
naming the file and the command that rebuilds it. Floating data comes back as float32 whatever is stored; every read verifies the
fletcher32 checksums of the chunks it touches.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from headstab.activations.capture import ATTENTION_HOOKS, RESID_HOOKS, check_resid_hook
from headstab.activations.errors import (
    CacheChecksumError,
    CacheError,
    activation_sets_message,
    fix_hint,
    forcerun_hint,
    is_filter_failure,
    rebuild_command,
)
from headstab.activations.h5util import attribute_digest_mismatches, decode_attr, with_chunk_cache
from headstab.activations.packing import lower_triangle_offsets, unpack_lower_triangles
from headstab.plan.formats import ATTRS_DIGEST, CACHE_FORMAT, CACHE_FORMAT_VERSION

__all__ = [
    "CacheChecksumError",
    "CacheError",
    "CacheReader",
    "check_consistent_shapes",
    "is_filter_failure",
    "open_cache",
    "rebuild_command",
]

SMALL_DATASETS = ("tokens", "lengths", "prompts", "pattern_offsets")


class CacheReader:
    """Read-only view of one activation cache, validated when opened; use as a context manager:
    `with open_cache(path) as cache: cache.hook_pattern("primary", layer=0)`."""

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
                + fix_hint(self.path)
            ) from err
        try:
            self.attrs: dict[str, Any] = {key: decode_attr(value) for key, value in self._file.attrs.items()}
            self._offsets: dict[str, np.ndarray] = {}
            self._patterns: dict[str, h5py.Dataset] = {}
            self._validate()
        except BaseException:
            self._file.close()
            raise

    # -- validation
    def _fail(self, what: str) -> CacheError:
        return CacheError(f"activation cache {self.path} {what}; " + fix_hint(self.path))

    def _validate(self) -> None:
        if self.attrs.get("format") != CACHE_FORMAT:
            raise self._fail(
                f"is not a headstab activation cache (attribute format={self.attrs.get('format')!r}, "
                f"expected {CACHE_FORMAT!r})"
            )
        if self.attrs.get("format_version") != CACHE_FORMAT_VERSION:
            raise self._fail(
                f"has format_version {self.attrs.get('format_version')!r}; this code reads version "
                f"{CACHE_FORMAT_VERSION}"
            )
        if self.attrs.get("complete") is not True:
            raise self._fail("is incomplete (its writer was interrupted: attribute complete is not True)")
        mismatches = attribute_digest_mismatches(self._file)
        if mismatches:
            raise self._fail(
                f"has {', '.join(mismatches)} failing the digest in attribute {ATTRS_DIGEST} (changed after the file "
                "was written)"
            )
        missing = [
            key
            for key in ("prompt_sets", "n_layers", "n_heads", "d_model", "d_head", "resid_hook", "cache_dtype")
            if key not in self.attrs
        ]
        if missing:
            raise self._fail(f"lacks the attributes {', '.join(missing)}")
        sets, extra = self.attrs["prompt_sets"], self.attrs.get("extra_resid_hooks", [])
        if not isinstance(sets, list) or not sets:
            raise self._fail(f"has no prompt sets (attribute prompt_sets={sets!r})")
        if self.attrs["resid_hook"] not in ("hook_resid_mid", "hook_resid_post"):
            raise self._fail(f"has an invalid resid_hook attribute {self.attrs['resid_hook']!r}")
        if not isinstance(extra, list) or not set(extra) <= set(RESID_HOOKS):
            raise self._fail(f"has an invalid extra_resid_hooks attribute {extra!r}")
        for name in sets:
            group = self._file.get(name)
            marker = group.attrs.get("activations", "all") if isinstance(group, h5py.Group) else "all"
            if marker not in ("all", "hook_pattern"):
                raise self._fail(f"has /{name} with an invalid activations attribute {marker!r}")
            full = marker == "all" and not self.patterns_only
            activations = [*ATTENTION_HOOKS, self.resid_hook, *extra] if full else ["hook_pattern"]
            self._validate_set(name, [*SMALL_DATASETS, *activations])

    def _validate_set(self, name: str, required: list[str]) -> None:
        group = self._file.get(name)
        if not isinstance(group, h5py.Group):
            raise self._fail(f"lacks the group /{name} listed in its prompt_sets attribute")
        missing = [key for key in required if not isinstance(group.get(key), h5py.Dataset)]
        if missing:
            raise self._fail(f"lacks the datasets {', '.join('/' + name + '/' + key for key in missing)}")
        n_prompts, n_pos = group["tokens"].shape
        offsets = self._offsets[name] = self._read(name, "pattern_offsets", ())
        offsets.setflags(write=False)
        if group["lengths"].shape == (n_prompts,) and not np.array_equal(
            offsets, lower_triangle_offsets(self._read(name, "lengths", ()))
        ):
            raise self._fail(
                f"has /{name}/pattern_offsets that do not match its lengths (packed hook_pattern is unreadable)"
            )
        self._patterns[name] = with_chunk_cache(group, "hook_pattern", n_chunks=self.n_layers + 2)
        n_layers, n_heads, d_model = self.n_layers, self.n_heads, int(self.attrs["d_model"])
        expected = {
            "lengths": (n_prompts,),
            "prompts": (n_prompts,),
            "pattern_offsets": (n_prompts + 1,),
            "hook_pattern": (n_layers, n_heads, int(offsets[-1]) if offsets.size else 0),
            "hook_z": (n_layers, n_prompts, n_pos, n_heads, int(self.attrs["d_head"])),
            **{hook: (n_layers, n_prompts, n_pos, d_model) for hook in RESID_HOOKS if hook in group},
        }
        for key, shape in expected.items():
            if key in group and group[key].shape != shape:
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
    def patterns_only(self) -> bool:
        """Whether the cache holds hook_pattern alone (written with patterns_only, e.g. a training snapshot's)."""
        return self.attrs.get("patterns_only") is True

    @property
    def resid_hook(self) -> str:
        """The residual hook always stored: `hook_resid_mid`, or `hook_resid_post` for attention-only models."""
        return str(self.attrs["resid_hook"])

    def stores_activations(self, promptset: str) -> bool:
        """Whether prompt set `promptset` holds hook_z and the residual hooks (else hook_pattern alone: a
        patterns-only cache, or a set left out of cache.activation_sets)."""
        marker = self._group(promptset).attrs.get("activations", "all")
        return not self.patterns_only and marker == "all"

    def resid_hooks(self) -> list[str]:
        """Residual hooks `resid` hands out (RESID_HOOKS order); an attention-only model's
        `hook_resid_post` also serves `hook_resid_mid`."""
        if self.patterns_only:
            return []
        stored = {self.resid_hook, *self.attrs.get("extra_resid_hooks", [])}
        served = stored | (
            {"hook_resid_mid"} if "hook_resid_post" in stored and self.resid_hook == "hook_resid_post" else set()
        )
        return [hook for hook in RESID_HOOKS if hook in served]

    def group_attrs(self, promptset: str) -> dict[str, Any]:
        return {key: decode_attr(value) for key, value in self._group(promptset).attrs.items()}

    def shapes(self, promptset: str) -> dict[str, tuple[int, ...]]:
        """Shape of every dataset of one prompt set, in contract order (the small ones first)."""
        group = self._group(promptset)
        return {
            key: tuple(group[key].shape) for key in (*SMALL_DATASETS, *ATTENTION_HOOKS, *RESID_HOOKS) if key in group
        }

    def _group(self, promptset: str) -> h5py.Group:
        if promptset not in self.attrs["prompt_sets"]:
            raise KeyError(
                f"activation cache {self.path} has no prompt set '{promptset}'; it holds "
                f"{', '.join(self.attrs['prompt_sets'])} (add the set under prompt_sets in the config and rebuild)"
            )
        return self._file[promptset]

    def _read(self, promptset: str, key: str, selection: tuple[Any, ...], out: np.ndarray | None = None) -> np.ndarray:
        """dataset[selection] (into `out` when given); a failed checksum or read becomes CacheError."""
        dataset = self._patterns[promptset] if key == "hook_pattern" else self._group(promptset)[key]
        try:
            if out is None:
                return dataset[selection]
            dataset.read_direct(out, selection)
            return out
        except OSError as err:  # a damaged chunk surfaces only when read
            if is_filter_failure(err):
                raise CacheChecksumError(
                    f"activation cache {self.path}: dataset /{promptset}/{key} is corrupt (checksum mismatch; HDF5: "
                    f"{err}); " + fix_hint(self.path)
                ) from err
            raise self._fail(f"could not read /{promptset}/{key} ({err})") from err

    def verify(self) -> None:
        """Read every dataset of every prompt set in full, chunk by chunk, which checks every checksum;
        raises CacheChecksumError naming the first corrupt dataset."""
        for promptset in self.prompt_sets():
            for key, dataset in self._group(promptset).items():
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
        return [
            text.decode("utf-8") if isinstance(text, bytes) else str(text)
            for text in self._read(promptset, "prompts", ())
        ]

    def pattern_offsets(self, promptset: str) -> np.ndarray:
        """int64 [prompt + 1], read-only: prompt p's packed triangle is hook_pattern_lower(...)[..., o[p]:o[p + 1]]."""
        self._group(promptset)  # a clear KeyError for an unknown set
        return self._offsets[promptset]

    def _check_layer(self, layer: int | None) -> Any:
        if layer is not None and not 0 <= layer < self.n_layers:
            raise IndexError(f"layer {layer} out of range for {self.path} ({self.n_layers} layers)")
        return slice(None) if layer is None else int(layer)

    def _per_token(self, promptset: str, key: str, layer: int | None, prompts: slice | None) -> np.ndarray:
        selection = (self._check_layer(layer), slice(None) if prompts is None else prompts)
        return self._read(promptset, key, selection).astype(np.float32, copy=False)

    def hook_pattern(
        self, promptset: str, layer: int | None = None, prompts: slice | Sequence[int] | None = None
    ) -> np.ndarray:
        """`hook_pattern` unpacked to float32 [layer, prompt, head, query_pos, key_pos] ([prompt, head,
        query_pos, key_pos] with `layer`, which reads that layer alone); exactly zero above the
        diagonal and outside each prompt's length x length block."""
        lengths, offsets = self.lengths(promptset), self.pattern_offsets(promptset)
        n_pos = self._group(promptset)["tokens"].shape[1]
        wanted = np.arange(lengths.size)[slice(None) if prompts is None else prompts]
        first, last = (int(wanted.min()), int(wanted.max())) if wanted.size else (0, -1)
        packed = self.hook_pattern_lower(
            promptset, layer=layer, prompts=slice(first, last + 1)
        )  # [(layer,) head, entry]
        base = offsets[first]
        segments = [packed[..., offsets[p] - base : offsets[p + 1] - base] for p in wanted]
        segments = np.concatenate(segments, axis=-1) if segments else packed[..., :0]
        unpacked = unpack_lower_triangles(segments, lengths[wanted], lower_triangle_offsets(lengths[wanted]), n_pos)
        return np.ascontiguousarray(
            np.swapaxes(unpacked, -4, -3)
        )  # [(layer,) head, prompt, ...] -> [(layer,) prompt, head, ...]

    def hook_pattern_lower(
        self, promptset: str, layer: int | None = None, prompts: slice | None = None, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Packed lower triangles as stored, float32 [layer, head, lower_entry] ([head, lower_entry] with
        `layer`); `prompts` a contiguous slice (their entries are contiguous). `out`: a C-contiguous
        float32 array of the result's shape to read into, without an intermediate copy."""
        offsets = self.pattern_offsets(promptset)
        selected = np.arange(offsets.size - 1)[slice(None) if prompts is None else prompts]
        if selected.size and np.any(np.diff(selected) != 1):
            raise ValueError(f"prompts must be a contiguous slice of prompts (step 1); got {prompts}")
        start, stop = (int(offsets[selected[0]]), int(offsets[selected[-1] + 1])) if selected.size else (0, 0)
        selection = (self._check_layer(layer), slice(None), slice(start, stop))
        if out is None:
            return self._read(promptset, "hook_pattern", selection).astype(np.float32, copy=False)
        expected = ((self.n_layers,) if layer is None else ()) + (self.n_heads, stop - start)
        if out.shape != expected or out.dtype != np.float32 or not out.flags.c_contiguous:
            raise ValueError(
                f"out must be a C-contiguous float32 array of shape {expected}; got {out.dtype} {out.shape}"
            )
        if self._patterns[promptset].dtype == np.float32:
            return self._read(promptset, "hook_pattern", selection, out=out)
        out[...] = self._read(promptset, "hook_pattern", selection)
        return out

    def hook_z(self, promptset: str, layer: int | None = None, prompts: slice | None = None) -> np.ndarray:
        """Per-head attention outputs `attn.hook_z`, float32 [layer, prompt, pos, head, d_head] ([prompt,
        pos, head, d_head] with `layer`), zero-padded."""
        self._require_activations(promptset, "hook_z")
        return self._per_token(promptset, "hook_z", layer, prompts)

    def _require_activations(self, promptset: str, hook: str) -> None:
        """CacheError when the cache, or this prompt set of it, stores hook_pattern alone and `hook` is asked for."""
        if not self.patterns_only and not self.stores_activations(promptset):
            raise CacheError(activation_sets_message(self.path, promptset, hook, self.attrs.get("activation_sets")))
        if self.patterns_only:
            self._group(promptset)  # a clear KeyError for an unknown set
            raise CacheError(
                f"activation cache {self.path} holds hook_pattern only (patterns_only, as a training "
                f"snapshot's), so no /{promptset}/{hook}; read it from a refit's full cache (rule "
                "cache_activations)"
            )

    def resid(self, promptset: str, hook: str, layer: int | None = None, prompts: slice | None = None) -> np.ndarray:
        """Residual stream at `hook` (hook_resid_pre, hook_resid_mid or hook_resid_post), float32 [layer,
        prompt, pos, d_model] ([prompt, pos, d_model] with `layer`), zero-padded.

        An attention-only model stores `hook_resid_post` and hands it out for `hook_resid_mid` too
        (without an MLP they are the same tensor). Hooks other than the always-stored one need the
        cache to have been written with them (config key analysis.cka_hook), else CacheError names the
        file, the missing dataset and how to rebuild.
        """
        check_resid_hook(hook)
        self._require_activations(promptset, hook)
        group = self._group(promptset)
        key = "hook_resid_post" if hook == "hook_resid_mid" and self.resid_hook == "hook_resid_post" else hook
        if key not in group:
            raise CacheError(
                f"activation cache {self.path} has no dataset /{promptset}/{key} (it was written with residual hooks "
                f"{', '.join(self.resid_hooks())} only); " + forcerun_hint(self.path, hook)
            )
        return self._per_token(promptset, key, layer, prompts)


def open_cache(path: str | Path) -> CacheReader:
    """Open and validate an activation cache; the only way analyses should read one."""
    return CacheReader(path)


def check_consistent_shapes(paths: Sequence[str | Path]) -> dict[str, dict[str, tuple[int, ...]]]:
    """Check that caches of one architecture agree in prompt sets, shapes and prompt lengths.

    Returns {prompt set: {dataset: shape}} of the first file; raises CacheError naming both files.
    An optional residual hook is compared only where both files hold it.
    """
    if not paths:
        raise ValueError("check_consistent_shapes needs at least one cache path")
    first = Path(paths[0])
    with open_cache(first) as cache:
        reference = {name: cache.shapes(name) for name in cache.prompt_sets()}
        reference_lengths = {name: cache.lengths(name) for name in reference}
    for path in paths[1:]:
        stale = f"rebuild the stale one with `{rebuild_command(path)}`"
        with open_cache(path) as cache:
            if cache.prompt_sets() != list(reference):
                raise CacheError(
                    f"activation caches {first} and {path} hold different prompt sets "
                    f"({list(reference)} vs {cache.prompt_sets()}); {stale}"
                )
            for name, shapes in reference.items():
                found = cache.shapes(name)
                for key, shape in shapes.items():
                    if key in found and found[key] != shape:
                        raise CacheError(
                            f"activation caches {first} and {path} disagree on /{name}/{key}: {shape} vs {found[key]}; "
                            f"caches of one architecture must share layers, heads, prompts and positions; {stale}"
                        )
                if not np.array_equal(cache.lengths(name), reference_lengths[name]):
                    raise CacheError(
                        f"activation caches {first} and {path} disagree on /{name}/lengths (different "
                        f"tokenizer or prompts); {stale}"
                    )
    return reference
