"""Same-layer head similarity per group of prompts, observed and under the prompt-permutation null.

The bootstrap (`headstab.statistics.bootstrap`) resamples prompts; the pair-similarity tensor has
already averaged them away. Here the prompts of a set are split at random (seeded) into groups and
the same-layer similarity S_g[a, b, l, i, j] (mean cosine of the lower-triangular patterns over the
group's prompts, Eq. 1-2) is kept per group: a group-weighted mean over groups gives back the
pair-similarity tensor's same-layer blocks, and resampling groups resamples prompts.

The null compares head (l, i) of refit a on prompt p with head (l, j) of refit b on the prompt's
partner q != p of the same token length (or the nearest length, both truncated to the shorter: the
first T query rows of a causal pattern only see the first T keys). It is the metric's value for
unrelated patterns of these lengths; the same mean -> max -> mean turns it into a null stability.

The same pass gives each head's sharpness (`headstab.sharpness.packed_row_entropy`, mean over prompts)
and, for the prompt sets asked for, the content variant: the observed and null similarity of the
patterns less each head's position-only template, which leaves out the prompt and its partner
(`headstab.sharpness.content_remainders`), and each head's content share.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headstab.activations.packing import n_lower_entries
from headstab.activations.reader import is_filter_failure, open_cache
from headstab.fileio import atomic_path
from headstab.plan.formats import GROUPED_FORMAT, GROUPED_FORMAT_VERSION
from headstab.sharpness import content_remainders, content_share, packed_row_entropy
from headstab.similarity.pairs import (
    finish_result_file,
    normalize_lower_features,
    open_result_file,
    promptset_pattern_shape,
    rebuild_hint,
)

__all__ = [
    "GroupedSimilarity",
    "GroupedSimilarityError",
    "check_partners",
    "check_matches_pair_tensor",
    "group_mean",
    "grouped_arrays_from_caches",
    "grouped_similarity_from_caches",
    "layer_group_similarity",
    "null_partners",
    "prompt_features",
    "prompt_groups",
    "read_grouped_similarity",
    "write_grouped_similarity",
]

CONTENT = ("content_observed", "content_null")
HEAD_ARRAYS = ("entropy", "content_share")  # float64 [seed, layer, head]


def prompt_groups(n_prompts: int, n_groups: int, seed: int) -> list[np.ndarray]:
    """Split prompts 0..n_prompts-1 at random into min(n_groups, n_prompts) groups of near-equal size
    (sizes differ by at most one); each group's indices sorted. The same seed gives the same groups."""
    if n_prompts < 1:
        raise ValueError(f"a prompt set needs at least one prompt to group; got {n_prompts}")
    if n_groups < 1:
        raise ValueError(f"config key 'statistics.prompt_groups' must be >= 1; got {n_groups}")
    order = np.random.default_rng(seed).permutation(n_prompts)
    return [np.sort(part) for part in np.array_split(order, min(n_groups, n_prompts))]


def null_partners(lengths: Sequence[int], seed: int) -> np.ndarray:
    """For every prompt p, another prompt q != p to compare it with under the null.

    Prompts of equal token length form runs (in a seeded random order); within a run of two or more,
    each prompt's partner is the next one (the last's is the first): every prompt of the run is a
    candidate exactly once. A prompt alone at its length takes the prompt of the nearest other length
    (the shorter on a tie). Returns int64 [prompt].
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    if n < 2:
        raise ValueError(f"the prompt-permutation null needs at least 2 prompts; got {n}")
    shuffled = np.random.default_rng(seed).permutation(n)
    order = shuffled[np.argsort(lengths[shuffled], kind="stable")]
    partners = np.empty(n, dtype=np.int64)
    run_starts = np.flatnonzero(np.r_[True, np.diff(lengths[order]) != 0])
    run_stops = np.r_[run_starts[1:], n]
    for start, stop in zip(run_starts, run_stops):
        run = order[start:stop]
        if run.size > 1:
            partners[run] = np.roll(run, -1)
            continue
        before = order[start - 1] if start > 0 else None
        after = order[stop] if stop < n else None
        if after is None or (
            before is not None and lengths[run[0]] - lengths[before] <= lengths[after] - lengths[run[0]]
        ):
            partners[run[0]] = before
        else:
            partners[run[0]] = after
    return partners


def prompt_features(
    block: np.ndarray, offsets: np.ndarray, prompts: np.ndarray, lengths: np.ndarray, keep: np.ndarray | None = None
) -> np.ndarray:
    """Segments of `prompts` gathered from block [row, entry], each of norm 1/sqrt(len(prompts)); keep[k]: keep only the first
    keep[k] query rows of prompt k's pattern (its leading n_lower_entries(keep[k]) entries). float32 [row, feature]:
    the dot product of two rows is the mean over the prompts of their cosines."""
    widths = [n_lower_entries(int(lengths[p] if keep is None else keep[k])) for k, p in enumerate(prompts)]
    starts = np.r_[0, np.cumsum(widths)].astype(np.int64)
    features = np.empty((block.shape[0], int(starts[-1])), dtype=np.float32)
    for k, (p, width) in enumerate(zip(prompts, widths)):  # slices copy rows of contiguous memory, unlike a gather
        features[:, starts[k] : starts[k] + width] = block[:, offsets[p] : offsets[p] + width]
    return normalize_lower_features(features, starts, len(widths))  # dot products: means


def _gram(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    import torch

    return (torch.from_numpy(left) @ torch.from_numpy(right).T).numpy()


def layer_group_similarity(
    block: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    groups: Sequence[np.ndarray],
    partners: np.ndarray,
    n_seeds: int,
    candidates: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Observed and null similarity per group of one layer's heads.

    block: float32 [seed * head, entry] packed lower triangles (rows ordered seed, head; prompt p's
    entries at offsets[p]:offsets[p + 1]), not normalised. candidates: the null's candidate patterns in
    block's layout, prompt p's partner's first rows at p's entries (`headstab.sharpness.content_remainders`);
    default: block at the partner's entries. Returns float32 (observed, null), each
    [group, seed_a, seed_b, head_a, head_b].
    """
    n_heads = block.shape[0] // n_seeds
    shape = (len(groups), n_seeds, n_seeds, n_heads, n_heads)
    observed, null = np.empty(shape, dtype=np.float32), np.empty(shape, dtype=np.float32)
    for g, prompts in enumerate(groups):
        prompts = np.asarray(prompts, dtype=np.int64)
        same = prompt_features(block, offsets, prompts, lengths)
        keep = np.minimum(lengths[prompts], lengths[partners[prompts]])
        anchor = prompt_features(block, offsets, prompts, lengths, keep)
        if candidates is None:
            candidate = prompt_features(block, offsets, partners[prompts], lengths, keep)
        else:
            candidate = prompt_features(candidates, offsets, prompts, lengths, keep)
        for out, gram in ((observed, _gram(same, same)), (null, _gram(anchor, candidate))):
            out[g] = gram.reshape(n_seeds, n_heads, n_seeds, n_heads).transpose(0, 2, 1, 3)
    return observed, null


def grouped_similarity_from_caches(
    cache_paths: Sequence[str | Path],
    promptset: str,
    groups: Sequence[np.ndarray],
    partners: np.ndarray,
    progress: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Observed and null same-layer similarity per prompt group (`grouped_arrays_from_caches`'s first two)."""
    arrays = grouped_arrays_from_caches(cache_paths, promptset, groups, partners, progress=progress)
    return arrays["observed"], arrays["null"]


def grouped_arrays_from_caches(
    cache_paths: Sequence[str | Path],
    promptset: str,
    groups: Sequence[np.ndarray],
    partners: np.ndarray,
    progress: bool = True,
    content: bool = False,
) -> dict[str, np.ndarray]:
    """Per prompt group, the observed and null same-layer similarity (and of the content variant), and
    every head's entropy, streamed one layer at a time.

    cache_paths: one cache per refit, in seed order. groups: prompt indices per group (`prompt_groups`);
    partners: [prompt] the null's partner of each prompt (`null_partners`).
    Returns "observed" and "null", float32 [group, seed_a, seed_b, layer, head_a, head_b]: the mean over
    the group's prompts p of cos(pattern_{a,l,i}(p), pattern_{b,l,j}(p)) and of
    cos(pattern_{a,l,i}(p), pattern_{b,l,j}(partner(p))) (both truncated to the shorter prompt);
    "entropy", float64 [seed, layer, head]: the mean over prompts of the normalised row entropy; with
    content, "content_observed" and "content_null": the same as observed and null for the patterns less
    each head's position-only template (`headstab.sharpness.content_remainders`), and "content_share",
    float64 [seed, layer, head]: the mean over prompts of ||pattern - template|| / ||pattern||. Memory: one layer's
    patterns of all refits, twice (four times with content).
    """
    from tqdm.auto import tqdm

    n_seeds, n_layers, n_heads = promptset_pattern_shape(cache_paths, promptset)
    readers = [open_cache(path) for path in cache_paths]
    try:
        offsets, lengths = readers[0].pattern_offsets(promptset), readers[0].lengths(promptset)
        _check_groups(groups, partners, lengths.size)
        shape = (len(groups), n_seeds, n_seeds, n_layers, n_heads, n_heads)
        names = ("observed", "null", *(CONTENT if content else ()))
        out = {name: np.empty(shape, dtype=np.float32) for name in names}
        out["entropy"] = np.empty((n_seeds, n_layers, n_heads))
        if content:
            out["content_share"] = np.empty((n_seeds, n_layers, n_heads))
        block = np.empty((n_seeds * n_heads, int(offsets[-1])), dtype=np.float32)
        for layer in tqdm(range(n_layers), desc=f"prompt groups {promptset}", unit="layer", disable=not progress):
            for refit, reader in enumerate(readers):
                part = block[refit * n_heads : (refit + 1) * n_heads]
                reader.hook_pattern_lower(promptset, layer=layer, out=part)
            _layer_arrays(out, layer, block, offsets, lengths, groups, partners, n_seeds, content)
    finally:
        for reader in readers:
            reader.close()
    return out


def _layer_arrays(out, layer, block, offsets, lengths, groups, partners, n_seeds: int, content: bool) -> None:
    """Fill one layer of `grouped_arrays_from_caches`'s arrays from its block [seed * head, entry]."""
    observed, null = layer_group_similarity(block, offsets, lengths, groups, partners, n_seeds)
    out["observed"][:, :, :, layer], out["null"][:, :, :, layer] = observed, null
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a set of one-token prompts has no entropy: NaN
        entropy = np.nanmean(packed_row_entropy(block, lengths, offsets), axis=1)
    out["entropy"][:, layer] = entropy.reshape(n_seeds, -1)
    if content:
        own, partner = content_remainders(block, lengths, offsets, partners)
        observed, null = layer_group_similarity(own, offsets, lengths, groups, partners, n_seeds, candidates=partner)
        out["content_observed"][:, :, :, layer], out["content_null"][:, :, :, layer] = observed, null
        out["content_share"][:, layer] = np.nanmean(content_share(block, own, offsets), axis=1).reshape(n_seeds, -1)


def _check_groups(groups: Sequence[np.ndarray], partners: np.ndarray, n_prompts: int) -> None:
    flat = np.concatenate([np.asarray(g, dtype=np.int64) for g in groups]) if len(groups) else np.array([], int)
    if flat.size != n_prompts or not np.array_equal(np.sort(flat), np.arange(n_prompts)):
        raise ValueError(f"groups must partition the {n_prompts} prompts; got {flat.size} indices")
    check_partners(partners, n_prompts)


def check_partners(partners: np.ndarray, n_prompts: int) -> None:
    """The null's partners must give each of the n_prompts prompts another prompt of the set."""
    partners = np.asarray(partners)
    if (
        partners.shape != (n_prompts,)
        or np.any(partners == np.arange(n_prompts))
        or np.any(partners < 0)
        or np.any(partners >= n_prompts)
    ):
        raise ValueError(f"partners must give each of the {n_prompts} prompts another prompt; got {partners}")


def group_mean(grouped: np.ndarray, group_sizes: np.ndarray) -> np.ndarray:
    """The mean over every prompt of per-group means [group, ...] (groups weighted by their sizes): float64 [...]."""
    sizes = np.asarray(group_sizes, dtype=np.float64)
    return np.tensordot(sizes / sizes.sum(), np.asarray(grouped, dtype=np.float64), axes=1)


@dataclass(frozen=True)
class GroupedSimilarity:
    """Contents of a prompt-group similarity file (arrays as `grouped_arrays_from_caches` returns)."""

    observed: np.ndarray  # float32 [group, seed_a, seed_b, layer, head_a, head_b]
    null: np.ndarray  # float32, same shape
    group_sizes: np.ndarray  # int64 [group]: prompts per group
    seeds: list[int]
    partners: np.ndarray  # int64 [prompt]
    lengths: np.ndarray  # int64 [prompt]: token lengths
    entropy: np.ndarray | None = None  # float64 [seed, layer, head]: mean normalised row entropy over prompts
    content_observed: np.ndarray | None = None  # float32 like observed: patterns less their position template
    content_null: np.ndarray | None = None  # float32, same shape
    content_share: np.ndarray | None = None  # float64 [seed, layer, head]: ||pattern - template|| / ||pattern||

    def mean(self, which: str = "observed") -> np.ndarray:
        """Mean over all prompts (groups weighted by size): float64 [seed_a, seed_b, layer, head_a, head_b]."""
        return group_mean(getattr(self, which), self.group_sizes)

    @property
    def has_content(self) -> bool:
        return self.content_observed is not None and self.content_null is not None


class GroupedSimilarityError(ValueError):
    """A prompt-group similarity file is missing, incomplete, corrupt or not ours; the message names it and the fix."""


def write_grouped_similarity(path: str | Path, grouped: GroupedSimilarity, attrs: dict | None = None) -> None:
    """Write `grouped` (fletcher32 checksums, one chunk per group) through a temporary file and a rename;
    the entropy and content arrays only when present."""
    import h5py

    with atomic_path(path) as tmp, h5py.File(tmp, "w") as handle:
        for name in ("observed", "null", *CONTENT):
            values = getattr(grouped, name)
            if values is None:
                continue
            handle.create_dataset(name, data=values, chunks=(1, *values.shape[1:]), fletcher32=True)
            handle[name].attrs["dims"] = "group,seed_a,seed_b,layer,head_a,head_b"
        for name in ("group_sizes", "partners", "lengths"):
            handle.create_dataset(name, data=np.asarray(getattr(grouped, name), dtype=np.int64), fletcher32=True)
        for name in HEAD_ARRAYS:
            if getattr(grouped, name) is not None:
                handle.create_dataset(name, data=np.asarray(getattr(grouped, name), dtype=np.float64), fletcher32=True)
                handle[name].attrs["dims"] = "seed,layer,head"
        finish_result_file(handle, GROUPED_FORMAT, GROUPED_FORMAT_VERSION, grouped.seeds, attrs)


def read_grouped_similarity(path: str | Path) -> GroupedSimilarity:
    """Read a prompt-group similarity file, failing with the file's name and the rebuild command."""
    path = Path(path)
    names = ("observed", "null", "group_sizes", "partners", "lengths")
    handle = open_result_file(
        path,
        GROUPED_FORMAT,
        GROUPED_FORMAT_VERSION,
        names,
        "prompt-group similarity",
        GroupedSimilarityError,
        "prompt_group_similarity",
    )
    with handle:  # open_result_file refused any other format version
        try:
            arrays = {name: handle[name][()] for name in (*names, *HEAD_ARRAYS, *CONTENT) if name in handle}
        except OSError as err:
            kind = "corrupt (checksum mismatch)" if is_filter_failure(err) else "damaged"
            raise GroupedSimilarityError(
                f"prompt-group similarity file {path} is {kind} ({err}); {rebuild_hint(path, 'prompt_group_similarity')}"
            ) from err
        seeds = [int(s) for s in handle.attrs["seeds"]]
    grouped = GroupedSimilarity(seeds=seeds, **arrays)
    _check_shapes(path, grouped)
    return grouped


def _check_shapes(path: Path, grouped: GroupedSimilarity) -> None:
    expected = grouped.observed.shape
    shapes_agree = grouped.null.shape == expected and all(
        getattr(grouped, name) is None or getattr(grouped, name).shape == expected for name in CONTENT
    )
    for name in HEAD_ARRAYS:
        if getattr(grouped, name) is not None:
            shapes_agree = shapes_agree and getattr(grouped, name).shape == (expected[1], *expected[3:5])
    if not shapes_agree or expected[:3] != (len(grouped.group_sizes), len(grouped.seeds), len(grouped.seeds)):
        raise GroupedSimilarityError(
            f"{path}: shapes {expected} do not match its groups and seeds; "
            f"{rebuild_hint(path, 'prompt_group_similarity')}"
        )


def check_matches_pair_tensor(
    pair_best: np.ndarray, similarity: np.ndarray, lengths: np.ndarray, promptset: str
) -> None:
    """The prompt groups' full-data best matches pair_best [seed_a, seed_b, layer, head] must be the same-layer
    best matches of the pair-similarity tensor [seed_a, seed_b, layer_a, head_a, layer_b, head_b] (the same caches);
    raises ValueError naming the prompt set and the rebuild otherwise."""
    same_layer_blocks = np.moveaxis(np.diagonal(similarity, axis1=2, axis2=4), -1, 2)
    expected = same_layer_blocks.max(axis=-1).astype(np.float64)
    # Both are float32 dot products of unit vectors over a prompt's lower-triangle entries: rounding
    # grows like sqrt(entries) ulps.
    entries = int(np.max(lengths * (lengths + 1) // 2))
    tolerance = 16 * np.finfo(np.float32).eps * (np.sqrt(entries) + 4)
    if not np.allclose(pair_best, expected, rtol=0, atol=tolerance):
        worst = float(np.max(np.abs(pair_best - expected)))
        raise ValueError(
            f"prompt set {promptset!r}: the prompt-group similarity and the pair-similarity tensor disagree "
            f"(best matches differ by up to {worst:.3g}); they were built from different caches. Rebuild both "
            "(snakemake --forcerun pair_similarity prompt_group_similarity)"
        )
