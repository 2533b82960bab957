"""Attention-pattern similarity between heads of refits (paper Eq. 1-2, §3.2-3.3, §A.6).

The paper compares head (l, i) of refit a with head (l', j) of refit b by the cosine similarity of
their flattened lower-triangular (causal, diagonal included) post-softmax attention patterns on one
prompt, averaged over prompts (Eq. 1-2). Every such comparison is a dot product of unit vectors, so
we normalise each head's pattern once per prompt, scale it by 1/sqrt(n_prompts) and concatenate the
prompts along the feature axis: one dot product of two concatenated vectors is then exactly the mean
over prompts of the per-prompt cosine, and all heads of all refits are compared at once by a single
Gram matrix `X @ X.T` (symmetric: the off-diagonal half-blocks are computed once and mirrored).

Three routes to the same numbers:
- `pair_similarity_from_caches` (the workflow): the activation caches store each head's patterns as
  packed lower triangles (docs/caches.md), so a layer of every refit is read straight into X (h5py
  verifies each chunk's checksum), each (head, prompt) segment is normalised in place
  (`normalize_lower_features`), then the Gram product runs.
- `causal_pattern_features` + `pair_similarity` / `same_layer_pair_similarity`: the same from padded
  `[layer, prompt, head, query_pos, key_pos]` patterns in memory (gathers the lower triangles).
- `anchor_pair_similarity`: one anchor against every refit from patterns in memory, masking instead of
  gathering, for the case where reading the patterns, not arithmetic, is the cost.

Numerics and speed: each block's Gram is float32 matrix products (recursive halving, see
GRAM_BLOCK_ROWS), summed in a float64
accumulator (the running sum keeps the error from growing with the number of streamed chunks). The
product goes through torch (MKL): on this 2-core machine numpy/OpenBLAS's `syrk` for `X @ X.T` ran at
10-25 useful GFLOP/s against MKL's 45-90 under load (benchmarks/, `make bench`). Per-(head, prompt)
norms are float32 BLAS dot products: measured within 2e-7 (relative) of float64 norms for 64- and
96-token prompts, at 1/10 of the float64 cost.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from headstab.activations.packing import lower_triangle_index
from headstab.activations.reader import is_filter_failure

__all__ = [
    "GramAccumulator",
    "anchor_pair_similarity",
    "causal_length_mask",
    "causal_pattern_features",
    "gram_to_pair_similarity",
    "n_lower_entries",
    "pair_similarity",
    "pair_similarity_from_caches",
    "read_pair_similarity",
    "write_pair_similarity",
    "same_layer_pair_similarity",
    "normalize_lower_features",
    "SIMILARITY_SCOPES",
]


def n_lower_entries(n_pos: int) -> int:
    """Number of entries in the lower triangle (diagonal included) of an n_pos x n_pos pattern."""
    return n_pos * (n_pos + 1) // 2


# A symmetric product `x @ x.T` is split in halves recursively: the off-diagonal half-block is
# computed once and mirrored, the diagonal halves recurse until they have fewer than
# 2 * GRAM_BLOCK_ROWS rows. Measured for 800 rows (50 refits x 16 heads) x 465,600 features on 2 cores,
# medians of 4 alternating runs: one plain product 2.36 s, two uniform row blocks (3 of 4 products)
# 1.92 s, halving down to 200 rows 1.78 s, down to 100 rows 1.80 s (smaller blocks lose GEMM speed).
GRAM_BLOCK_ROWS = 200


def _symmetric_product(x):  # torch [row, feature] -> [row, row], exactly symmetric
    n_rows = x.shape[0]
    if n_rows < 2 * GRAM_BLOCK_ROWS:
        leaf = x @ x.T
        return (leaf + leaf.T) * 0.5  # one GEMM's diagonal block need not be bit-symmetric
    half = n_rows // 2
    out = x.new_empty((n_rows, n_rows))
    out[:half, :half] = _symmetric_product(x[:half])
    out[half:, half:] = _symmetric_product(x[half:])
    corner = x[:half] @ x[half:].T
    out[:half, half:] = corner
    out[half:, :half] = corner.T
    return out


def _product(left: np.ndarray, right: np.ndarray | None = None) -> np.ndarray:
    """float32 `left @ right.T` ([row, feature] x [col, feature] -> [row, col]); `right` None: the
    symmetric `left @ left.T`, computed by recursive halving (see GRAM_BLOCK_ROWS), exactly symmetric.

    Uses torch (MKL) when it is installed, numpy otherwise.
    """
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency; numpy is the fallback
        return left @ (left if right is None else right).T
    lhs = torch.from_numpy(left)
    if right is not None:
        return (lhs @ torch.from_numpy(right).T).numpy()
    return _symmetric_product(lhs).numpy()


def _batched_product(left: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """float32 `left @ blocks[k].T` for every k: [row, feature] x [block, col, feature] -> [block, row, col]."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return np.matmul(left[None], np.swapaxes(blocks, -1, -2))
    rhs = torch.from_numpy(np.asarray(blocks, dtype=np.float32))
    return torch.matmul(torch.from_numpy(left), rhs.transpose(-1, -2)).numpy()


def causal_pattern_features(
    attn_pattern: np.ndarray,
    lengths: np.ndarray,
    n_prompts_total: int | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Unit-normalised lower-triangular attention patterns, ready for dot products (Eq. 1).

    attn_pattern: [layer, prompt, head, query_pos, key_pos] post-softmax patterns
        (`blocks.{l}.attn.hook_pattern`), right-padded to a common query_pos = key_pos size.
    lengths: [prompt] number of real tokens of each prompt (1 <= length <= query_pos).
    n_prompts_total: number of prompts the mean runs over; defaults to this call's prompt count.
        Pass the full count when streaming prompt chunks, so chunk Grams add up to the mean.
    out: optional C-contiguous float32 [layer, head, prompt, n_lower] array to write into (e.g. one
        refit's slice of a stacked [seed, ...] array, which saves stacking copies); returned.

    Returns float32 [layer, head, prompt, n_lower], n_lower = Q(Q+1)/2 for the padded size Q, in
    row-major lower-triangle order (query 0 key 0, query 1 keys 0-1, ...). Each (layer, head, prompt)
    vector has unit norm times 1/sqrt(n_prompts_total), so the dot product of two heads' vectors
    concatenated over prompts is the mean over prompts of their cosine similarity (Eq. 2).

    Entries of query rows at or beyond a prompt's length are set to zero, so padding (and any
    pattern written for pad queries) adds nothing: the same prompt padded more gives the same dot
    products. A vector that is all zero (impossible for a real softmax row) stays zero.
    """
    attn_pattern = np.asarray(attn_pattern)
    lengths = np.asarray(lengths)
    if attn_pattern.ndim != 5:
        raise ValueError(
            "attn_pattern must be [layer, prompt, head, query_pos, key_pos] (5 axes); "
            f"got shape {attn_pattern.shape}"
        )
    n_layers, n_prompts, n_heads, n_query, n_key = attn_pattern.shape
    if n_query != n_key:
        raise ValueError(f"attn_pattern query_pos ({n_query}) and key_pos ({n_key}) must match")
    if lengths.shape != (n_prompts,):
        raise ValueError(f"lengths must be [prompt] = ({n_prompts},); got shape {lengths.shape}")
    if n_prompts and (lengths.min() < 1 or lengths.max() > n_query):
        raise ValueError(
            f"lengths must lie in 1..{n_query} (the padded size); got {lengths.min()}..{lengths.max()}"
        )
    total = n_prompts if n_prompts_total is None else int(n_prompts_total)
    if total < n_prompts or total < 1:
        raise ValueError(f"n_prompts_total ({total}) must be >= this chunk's prompt count ({n_prompts})")

    flat_index = lower_triangle_index(n_query)
    shape = (n_layers, n_heads, n_prompts, flat_index.size)
    if out is None:
        features = np.empty(shape, dtype=np.float32)
    elif out.shape != shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of shape {shape}; got {out.dtype} {out.shape}")
    else:
        features = out
    # Gather on the contiguous [layer, prompt, head, Q*Q] view (faster than gathering from a
    # transposed view), then put heads before prompts in one copy.
    flat = attn_pattern.reshape(n_layers, n_prompts, n_heads, n_query * n_query)
    np.copyto(features, np.take(flat, flat_index, axis=-1).transpose(0, 2, 1, 3), casting="same_kind")

    # Row-major order puts query rows < length first: exactly the first length(length+1)/2 entries.
    # Zero the rest of each shorter prompt (padding, and anything written for pad queries).
    n_kept = lengths.astype(np.int64) * (lengths.astype(np.int64) + 1) // 2
    for prompt in np.flatnonzero(n_kept < flat_index.size):
        features[:, :, prompt, n_kept[prompt] :] = 0.0

    # vecdot (BLAS dot) keeps float32 sums of squares within ~2e-7 of float64 at 1/10 of its cost;
    # einsum's float32 loop drifted to ~1e-6 (measured on 64- and 96-token patterns).
    norms = np.sqrt(np.vecdot(features, features), dtype=np.float64)
    scale = np.divide(1.0, norms * np.sqrt(total), out=np.zeros_like(norms), where=norms > 0)
    features *= scale[..., None].astype(np.float32)
    return features


class GramAccumulator:
    """Running Gram matrix `sum over chunks of chunk @ other.T`, for streaming prompt chunks.

    GramAccumulator(n_rows) accumulates the symmetric [n_rows, n_rows] Gram of one set of rows;
    GramAccumulator(n_rows, n_cols) accumulates a rectangular block between two sets of rows
    (e.g. two blocks of refits in separate jobs). Each chunk's product is float32 GEMMs (symmetric:
    recursive halving, see `_product`); the running sum is float64.
    """

    def __init__(self, n_rows: int, n_cols: int | None = None) -> None:
        self.symmetric = n_cols is None
        self.gram = np.zeros((n_rows, n_rows if n_cols is None else n_cols), dtype=np.float64)
        self.n_chunks = 0

    def add(self, chunk: np.ndarray, other: np.ndarray | None = None) -> None:
        """Add chunk @ chunk.T (or chunk @ other.T for a rectangular accumulator).

        chunk: [row, feature]; other: [col, feature] with the same features (same prompts, same order).
        """
        chunk = np.ascontiguousarray(chunk, dtype=np.float32)
        if chunk.ndim != 2 or chunk.shape[0] != self.gram.shape[0]:
            raise ValueError(f"chunk must be [{self.gram.shape[0]}, feature]; got shape {chunk.shape}")
        if self.symmetric:
            if other is not None:
                raise ValueError("a symmetric GramAccumulator(n_rows) takes no `other`")
            product = _product(chunk)
        else:
            if other is None:
                raise ValueError("a rectangular GramAccumulator(n_rows, n_cols) needs `other`")
            other = np.ascontiguousarray(other, dtype=np.float32)
            if other.shape != (self.gram.shape[1], chunk.shape[1]):
                raise ValueError(
                    f"other must be [{self.gram.shape[1]}, {chunk.shape[1]}]; got shape {other.shape}"
                )
            product = _product(chunk, other)
        self.gram += product
        self.n_chunks += 1


def gram_to_pair_similarity(
    gram: np.ndarray, n_seeds: int, n_layers: int, n_heads: int
) -> np.ndarray:
    """Reshape a Gram over (seed, layer, head) rows into the pair-similarity tensor.

    gram: [seed * layer * head, seed * layer * head], rows and columns ordered seed, layer, head.
    Returns float32 S [seed_a, seed_b, layer_a, head_a, layer_b, head_b] (Eq. 2).
    """
    n_rows = n_seeds * n_layers * n_heads
    if gram.shape != (n_rows, n_rows):
        raise ValueError(
            f"gram must be [{n_rows}, {n_rows}] for {n_seeds} seeds x {n_layers} layers x "
            f"{n_heads} heads; got shape {gram.shape}"
        )
    blocks = gram.reshape(n_seeds, n_layers, n_heads, n_seeds, n_layers, n_heads)
    return np.ascontiguousarray(blocks.transpose(0, 3, 1, 2, 4, 5), dtype=np.float32)


def _as_rows(features: np.ndarray) -> tuple[np.ndarray, tuple[int, int, int]]:
    """[seed, layer, head, (prompt, n_lower | feature)] -> ([seed * layer * head, feature], shape)."""
    features = np.asarray(features)
    if features.ndim not in (4, 5):
        raise ValueError(
            "features must be [seed, layer, head, prompt, n_lower] or [seed, layer, head, feature]; "
            f"got shape {features.shape}"
        )
    n_seeds, n_layers, n_heads = features.shape[:3]
    return features.reshape(n_seeds * n_layers * n_heads, -1), (n_seeds, n_layers, n_heads)


def pair_similarity(features: np.ndarray) -> np.ndarray:
    """Mean-over-prompts cosine similarity of every head of every refit with every other (Eq. 2).

    features: [seed, layer, head, prompt, n_lower] (from `causal_pattern_features`, stacked over
        seeds) or pre-flattened [seed, layer, head, feature].
    Returns float32 S [seed_a, seed_b, layer_a, head_a, layer_b, head_b]; S[a, a] holds the
    within-refit similarities used for commonness (§A.6). Computed as one Gram matrix product.
    """
    rows, (n_seeds, n_layers, n_heads) = _as_rows(features)
    accumulator = GramAccumulator(rows.shape[0])
    accumulator.add(rows)
    return gram_to_pair_similarity(accumulator.gram, n_seeds, n_layers, n_heads)


def same_layer_pair_similarity(features: np.ndarray, anchors: Sequence[int] | None = None) -> np.ndarray:
    """Only the same-layer blocks of `pair_similarity` (§3.2), one Gram per layer: L times less work.

    features: as for `pair_similarity`.
    anchors: seed indices (positions on the seed axis) to compare with every refit; None: all, which
        gives the symmetric Gram per layer. A single anchor (the paper's single-anchor view) costs
        1/n_seeds of the all-anchor product.
    Returns float32 S [seed_a, seed_b, layer, head_a, head_b], seed_a running over `anchors`.
    """
    rows, (n_seeds, n_layers, n_heads) = _as_rows(features)
    by_layer = rows.reshape(n_seeds, n_layers, n_heads, -1)
    anchor_index = None if anchors is None else np.asarray(anchors, dtype=np.int64).reshape(-1)
    if anchor_index is not None and (anchor_index.size == 0 or anchor_index.min() < 0 or anchor_index.max() >= n_seeds):
        raise ValueError(f"anchors must be seed indices in 0..{n_seeds - 1}; got {list(anchors or [])}")
    n_anchors = n_seeds if anchor_index is None else anchor_index.size
    out = np.empty((n_anchors, n_seeds, n_layers, n_heads, n_heads), dtype=np.float32)
    for layer in range(n_layers):
        if anchor_index is None:
            accumulator = GramAccumulator(n_seeds * n_heads)
            accumulator.add(by_layer[:, layer].reshape(n_seeds * n_heads, -1))
            gram = accumulator.gram.reshape(n_anchors, n_heads, n_seeds, n_heads)
        else:
            # Anchor rows against every seed's [head, feature] block as one batched product over
            # the strided seed axis: no copy of all rows.
            anchor_rows = np.ascontiguousarray(by_layer[anchor_index, layer], dtype=np.float32).reshape(n_anchors * n_heads, -1)
            gram = _batched_product(anchor_rows, by_layer[:, layer]).transpose(1, 0, 2)
            gram = gram.reshape(n_anchors, n_heads, n_seeds, n_heads)
        out[:, :, layer] = gram.transpose(0, 2, 1, 3)
    return out


def causal_length_mask(lengths: np.ndarray, n_pos: int) -> np.ndarray:
    """float32 [prompt, n_pos * n_pos]: 1 on each prompt's lower triangle (diagonal included) inside
    its length x length block, 0 elsewhere (the entries Eq. 1 compares), flattened row-major."""
    lengths = np.asarray(lengths)
    position = np.arange(n_pos)
    query, key = position[:, None], position[None, :]
    mask = (key <= query)[None] & (query[None] < lengths[:, None, None])
    return mask.reshape(lengths.size, n_pos * n_pos).astype(np.float32)


def anchor_pair_similarity(
    patterns: Sequence[np.ndarray], lengths: np.ndarray, anchor: int = 0, workers: int | None = None
) -> np.ndarray:
    """Same-layer similarity of one anchor refit's heads with every refit's heads, from patterns in memory.

    patterns: one [layer, prompt, head, query_pos, key_pos] array per refit (e.g. from `run_with_cache`),
        right-padded to a common size; lengths: [prompt] real tokens per prompt.
    workers: threads, each taking every `workers`-th refit (default: the CPUs this process may use).
    Returns float32 [refit, layer, anchor head, candidate head]: the mean over prompts of the cosine of
    the two heads' lower-triangular patterns within the prompt's length (Eq. 1-2); row `anchor` is
    the anchor with itself. Equal to `same_layer_pair_similarity(features, anchors=[anchor])[0]`.

    Why a second route: one anchor needs 1/n_refits of the all-pairs product, so the cost is reading
    the patterns, not arithmetic. Instead of gathering each lower triangle into a feature copy, each
    (refit, layer) block is multiplied once by the causal-and-length mask into a buffer that stays in
    cache, and the dot products and norms are taken on it: one read of the patterns from memory.
    Measured (benchmarks/, 10 refits of l8_h16, 20 prompts of 64 tokens, 2 cores): 0.17 s with one
    thread, 0.12 s with two.
    """
    import os
    from concurrent.futures import ThreadPoolExecutor

    import torch

    if not patterns:
        raise ValueError("patterns must hold at least one refit's [layer, prompt, head, query_pos, key_pos] array")
    shape = np.shape(patterns[0])
    if len(shape) != 5 or shape[3] != shape[4]:
        raise ValueError(f"each pattern must be [layer, prompt, head, query_pos, key_pos] with query_pos == key_pos; got {shape}")
    for index, pattern in enumerate(patterns):
        if np.shape(pattern) != shape:
            raise ValueError(f"pattern {index} has shape {np.shape(pattern)}, pattern 0 has {shape}; all refits need the same shape")
    n_layers, n_prompts, n_heads, n_pos, _ = shape
    lengths = np.asarray(lengths)
    if lengths.shape != (n_prompts,) or (n_prompts and (lengths.min() < 1 or lengths.max() > n_pos)):
        raise ValueError(f"lengths must be [prompt] = ({n_prompts},) with values in 1..{n_pos}; got {lengths}")
    if not 0 <= anchor < len(patterns):
        raise ValueError(f"anchor must be a refit index in 0..{len(patterns) - 1}; got {anchor}")
    # The CPUs this process may use (a Slurm job's share, not the node's count).
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = max(1, min(len(patterns), workers or available))
    mask = causal_length_mask(lengths, n_pos)[:, None, :]  # [prompt, 1, Q*Q]

    def masked_layer(pattern: np.ndarray, layer: int, block: np.ndarray) -> np.ndarray:
        np.multiply(np.asarray(pattern[layer], dtype=np.float32).reshape(n_prompts, n_heads, -1), mask, out=block)
        return np.sqrt(np.vecdot(block, block), dtype=np.float64)  # [prompt, head]; float32 BLAS dot, see module doc

    anchor_blocks, anchor_norms = [], []
    for layer in range(n_layers):
        block = np.empty((n_prompts, n_heads, n_pos * n_pos), dtype=np.float32)
        anchor_norms.append(masked_layer(patterns[anchor], layer, block))
        anchor_blocks.append(torch.from_numpy(block))
    out = np.empty((len(patterns), n_layers, n_heads, n_heads), dtype=np.float32)

    def compare(refits: list[int]) -> None:
        block = np.empty((n_prompts, n_heads, n_pos * n_pos), dtype=np.float32)  # one per thread, reused
        block_t = torch.from_numpy(block)
        for refit in refits:
            for layer in range(n_layers):
                norms = masked_layer(patterns[refit], layer, block)
                dots = torch.bmm(anchor_blocks[layer], block_t.transpose(1, 2)).numpy()  # [prompt, head_a, head_b]
                denominator = anchor_norms[layer][:, :, None] * norms[:, None, :]
                cosine = np.divide(dots, denominator, out=np.zeros(dots.shape), where=denominator > 0)
                out[refit, layer] = cosine.mean(axis=0)

    shares = [list(range(len(patterns)))[start::workers] for start in range(workers)]
    if workers == 1:
        compare(shares[0])
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(compare, shares))  # list(): re-raises a thread's exception here
    return out


# ---------------------------------------------------------------- from caches, to files
SIMILARITY_FORMAT = "headstab-pair-similarity"
# Version 2 adds a fletcher32 checksum to `pair_similarity`; version 1 files (none) are read alike.
SIMILARITY_FORMAT_VERSION = 2


class SimilarityFileError(ValueError):
    """A pair-similarity file is missing, incomplete, corrupt or not ours; the message names it and the fix."""


class SimilarityChecksumError(SimilarityFileError):
    """A pair-similarity file's data fails its fletcher32 checksum: the file is corrupt."""


def _rebuild_hint(path: Path) -> str:
    quoted = shlex.quote(str(path))
    return f"rebuild it with `rm -f {quoted} && snakemake {quoted}` (or `snakemake {quoted} --forcerun pair_similarity`)"


SIMILARITY_SCOPES = ("cross_layer", "same_layer")


def normalize_lower_features(features: np.ndarray, offsets: np.ndarray, n_prompts_total: int) -> np.ndarray:
    """Scale packed lower triangles in place so dot products give the mean-over-prompts cosine (Eq. 1-2).

    features: C-contiguous float32 [row, entry], each row one head's packed lower triangles of
        consecutive prompts (the cache's `hook_pattern` layout); offsets: [k + 1] where each of the k
        prompts starts, relative to column 0 (offsets[-1] == entries).
    Each (row, prompt) segment gets unit norm times 1/sqrt(n_prompts_total); an all-zero segment
    stays zero. Returns `features`.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    if features.ndim != 2 or features.dtype != np.float32 or not features.flags.c_contiguous:
        raise ValueError(f"features must be a C-contiguous float32 [row, entry] array; got {features.dtype} {features.shape}")
    if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or offsets[-1] != features.shape[1] or np.any(np.diff(offsets) < 0):
        raise ValueError(f"offsets must rise from 0 to the number of entries ({features.shape[1]}); got {offsets[:3]}...{offsets[-2:]}")
    if n_prompts_total < offsets.size - 1:
        raise ValueError(f"n_prompts_total ({n_prompts_total}) must be >= the number of prompts here ({offsets.size - 1})")
    root = np.sqrt(float(n_prompts_total))
    for start, stop in zip(offsets[:-1], offsets[1:]):
        segment = features[:, start:stop]
        # float32 BLAS dot, as in causal_pattern_features (within ~2e-7 of float64 here).
        norms = np.sqrt(np.vecdot(segment, segment), dtype=np.float64)
        scale = np.divide(1.0, norms * root, out=np.zeros_like(norms), where=norms > 0)
        segment *= scale[:, None].astype(np.float32)
    return features


def pair_similarity_from_caches(
    cache_paths: Sequence[str | Path],
    promptset: str,
    prompt_chunk: int = 10,
    progress: bool = True,
    scope: str = "cross_layer",
) -> np.ndarray:
    """Stream the caches of one architecture's refits into the pair-similarity tensor (Eq. 2).

    cache_paths: one activation cache per refit, in seed order (checked for matching shapes).
    The caches store each head's patterns as packed lower triangles, exactly the entries Eq. 1
    compares, so a block of features is read straight into place (every read verifies the caches'
    checksums) and normalised; no padding, no gather.
    scope "cross_layer": all layers at once, `prompt_chunk` consecutive prompts of every refit at a
        time (memory: one such block); returns float32 S [seed_a, seed_b, layer_a, head_a, layer_b,
        head_b] (§3.3; its same-layer blocks serve §3.2).
    scope "same_layer": one layer at a time, all prompts (memory: one layer's features of all refits,
        n_refits * n_heads * sum of the prompts' lower triangles floats); n_layers times less work;
        returns float32 S [seed_a, seed_b, layer, head_a, head_b], equal to `same_layer_pair_similarity`.
    A corrupt cache raises CacheError naming the file, the dataset and the rebuild command.
    """
    from tqdm.auto import tqdm

    from headstab.activations.reader import check_consistent_shapes, open_cache

    if prompt_chunk < 1:
        raise ValueError(f"prompt_chunk must be >= 1, got {prompt_chunk}")
    if scope not in SIMILARITY_SCOPES:
        raise ValueError(f"scope must be one of {list(SIMILARITY_SCOPES)}; got {scope!r}")
    shapes = check_consistent_shapes(cache_paths)
    if promptset not in shapes:
        raise KeyError(f"prompt set '{promptset}' is not in the caches ({', '.join(shapes)})")
    n_layers, n_heads = shapes[promptset]["hook_pattern"][:2]
    n_seeds = len(cache_paths)
    readers = [open_cache(path) for path in cache_paths]
    try:
        offsets = readers[0].pattern_offsets(promptset)
        n_prompts = offsets.size - 1
        if n_prompts == 0:
            raise ValueError(f"prompt set '{promptset}' of {cache_paths[0]} has no prompts; there is nothing to compare")
        # Units of work: (layer, consecutive prompts). same_layer: a layer and all prompts;
        # cross_layer: all layers (None) and one chunk of prompts.
        if scope == "same_layer":
            units = [(layer, slice(0, n_prompts)) for layer in range(n_layers)]
            refit_shape: tuple[int, ...] = (n_heads,)
        else:
            units = [(None, slice(start, min(start + prompt_chunk, n_prompts))) for start in range(0, n_prompts, prompt_chunk)]
            refit_shape = (n_layers, n_heads)
        rows_per_refit = int(np.prod(refit_shape))
        widest = max(int(offsets[unit.stop] - offsets[unit.start]) for _, unit in units)
        buffer = np.empty(n_seeds * rows_per_refit * widest, dtype=np.float32)  # reused: fresh pages cost time
        grams = []
        accumulator = None
        for layer, prompts in tqdm(units, desc=f"similarity {promptset} ({scope})", unit="block", disable=not progress):
            width = int(offsets[prompts.stop] - offsets[prompts.start])
            block = buffer[: n_seeds * rows_per_refit * width].reshape(n_seeds * rows_per_refit, width)
            for refit, reader in enumerate(readers):
                rows = block[refit * rows_per_refit : (refit + 1) * rows_per_refit]
                reader.hook_pattern_lower(promptset, layer=layer, prompts=prompts, out=rows.reshape(*refit_shape, width))
                normalize_lower_features(rows, offsets[prompts.start : prompts.stop + 1] - offsets[prompts.start], n_prompts)
            if accumulator is None:
                accumulator = GramAccumulator(block.shape[0])
            accumulator.add(block)
            if scope == "same_layer":
                grams.append(accumulator.gram)
                accumulator = None
        if scope == "cross_layer":
            grams.append(accumulator.gram)
    finally:
        for reader in readers:
            reader.close()
    if scope == "cross_layer":
        return gram_to_pair_similarity(grams[0], n_seeds, n_layers, n_heads)
    out = np.empty((n_seeds, n_seeds, n_layers, n_heads, n_heads), dtype=np.float32)
    for layer, gram in enumerate(grams):
        out[:, :, layer] = gram.reshape(n_seeds, n_heads, n_seeds, n_heads).transpose(0, 2, 1, 3)
    return out


def write_pair_similarity(
    path: str | Path, similarity: np.ndarray, seeds: Sequence[int], attrs: dict | None = None
) -> None:
    """Write S [seed_a, seed_b, layer_a, head_a, layer_b, head_b] as dataset `pair_similarity`
    (attribute `seeds`, a fletcher32 checksum per chunk), through a temporary file and a rename so no
    half-written file survives."""
    import json

    import h5py

    from headstab.fileio import atomic_path

    path = Path(path)
    if similarity.ndim != 6 or similarity.shape[:2] != (len(seeds), len(seeds)):
        raise ValueError(f"similarity must be [seed, seed, layer, head, layer, head] for {len(seeds)} seeds; got {similarity.shape}")
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as handle:
        n_seeds, _, n_layers, n_heads = similarity.shape[:4]
        handle.create_dataset(
            "pair_similarity",
            data=similarity.astype(np.float32),
            chunks=(1, n_seeds, n_layers, n_heads, n_layers, n_heads),
            fletcher32=True,
        )
        handle["pair_similarity"].attrs["dims"] = "seed_a,seed_b,layer_a,head_a,layer_b,head_b"
        handle.attrs["seeds"] = np.asarray(seeds, dtype=np.int64)
        handle.attrs["format"] = SIMILARITY_FORMAT
        handle.attrs["format_version"] = SIMILARITY_FORMAT_VERSION
        for key, value in (attrs or {}).items():
            handle.attrs[key] = value if isinstance(value, (int, float, str)) else json.dumps(value, default=str)
        handle.attrs["complete"] = True


def read_pair_similarity(path: str | Path) -> tuple[np.ndarray, list[int]]:
    """Read (S, seeds) from a pair-similarity file, failing with the file's name and the rebuild command."""
    import h5py

    path = Path(path)
    if not path.is_file():
        raise SimilarityFileError(
            f"pair-similarity file {path} does not exist; build it with `snakemake {shlex.quote(str(path))}`"
        )
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise SimilarityFileError(f"pair-similarity file {path} is not a readable HDF5 file ({err}); {_rebuild_hint(path)}") from err
    with handle:
        if handle.attrs.get("format") != SIMILARITY_FORMAT or "pair_similarity" not in handle:
            raise SimilarityFileError(f"{path} is not a headstab pair-similarity file; {_rebuild_hint(path)}")
        if not bool(handle.attrs.get("complete", False)):
            raise SimilarityFileError(f"pair-similarity file {path} is incomplete (interrupted write); {_rebuild_hint(path)}")
        seeds = [int(s) for s in handle.attrs["seeds"]]
        try:
            similarity = handle["pair_similarity"][()]
        except OSError as err:  # HDF5 reports a fletcher32 mismatch as "filter returned failure"
            if is_filter_failure(err):
                raise SimilarityChecksumError(
                    f"pair-similarity file {path} is corrupt (checksum mismatch; HDF5: {err}); {_rebuild_hint(path)}"
                ) from err
            raise SimilarityFileError(f"pair-similarity file {path} is damaged ({err}); {_rebuild_hint(path)}") from err
    if similarity.shape[:2] != (len(seeds), len(seeds)):
        raise SimilarityFileError(f"pair-similarity file {path}: shape {similarity.shape} does not match seeds {seeds}; {_rebuild_hint(path)}")
    return similarity, seeds
