"""Reference implementations of paper Eq. 1-2 (head-pair similarity), the oracles that tests and
benchmarks compare headstab.similarity.pairs's engine with. Written for clarity, not speed: patterns in
memory, float64 arithmetic.

- `loop_pair_similarity`: the paper's method as a plain loop (per prompt: lower triangles, cosine;
  then the mean over prompts); `loop_null_pair_similarity`: the same with the candidates on each prompt's
  null partner, both cut to the shorter prompt.
- `causal_pattern_features` + `pair_similarity` / `same_layer_pair_similarity`: the same through
  unit-normalised lower-triangle features and one Gram matrix.
- `anchor_pair_similarity`: one anchor refit against every refit by masking padded squares instead
  of gathering lower triangles.
- `pack_lower_triangle`, `valid_positions`: the packing of one prompt's pattern, and which positions
  hold real tokens, written out for the cache tests.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from headstab.activations.packing import lower_triangle_index


def valid_positions(lengths: np.ndarray, n_pos: int) -> np.ndarray:
    """[prompt, pos] True where the position holds a real token."""
    return np.arange(n_pos)[None, :] < np.asarray(lengths)[:, None]


def pack_lower_triangle(pattern: np.ndarray, length: int) -> np.ndarray:
    """[..., query_pos, key_pos] -> [..., length (length + 1) / 2]: the row-major lower triangle
    (diagonal included) of the leading length x length block."""
    pattern = np.asarray(pattern)
    n_pos = pattern.shape[-1]
    return pattern.reshape(*pattern.shape[:-2], n_pos * n_pos)[..., lower_triangle_index(length, n_pos)]


def loop_pair_similarity(
    patterns: Sequence[np.ndarray], lengths: np.ndarray, anchors: Sequence[int] | None = None, same_layer: bool = False
) -> np.ndarray:
    """S straight from Eq. 1-2, one cosine at a time.

    patterns: one [layer, prompt, head, query_pos, key_pos] array per refit; lengths: [prompt].
    anchors: refit indices of the first axis (default: all); same_layer: only layer_a == layer_b
    (the other entries stay NaN).
    Returns float64 S [anchor, refit_b, layer_a, head_a, layer_b, head_b].
    """
    anchors = list(range(len(patterns))) if anchors is None else list(anchors)
    n_layers, n_prompts, n_heads = patterns[0].shape[:3]
    sums = np.zeros((len(anchors), len(patterns), n_layers, n_heads, n_layers, n_heads))
    for prompt in range(n_prompts):
        n = int(lengths[prompt])
        rows, cols = np.tril_indices(n)
        for slot, a in enumerate(anchors):
            for b, other in enumerate(patterns):
                for la in range(n_layers):
                    for i in range(n_heads):
                        x = patterns[a][la, prompt, i, :n, :n][rows, cols].astype(np.float64)
                        for lb in [la] if same_layer else range(n_layers):
                            for j in range(n_heads):
                                y = other[lb, prompt, j, :n, :n][rows, cols].astype(np.float64)
                                sums[slot, b, la, i, lb, j] += x @ y / (np.linalg.norm(x) * np.linalg.norm(y))
    out = sums / n_prompts
    if same_layer:
        for la in range(n_layers):
            out[:, :, la, :, [lb for lb in range(n_layers) if lb != la], :] = np.nan
    return out


def loop_null_pair_similarity(patterns: Sequence[np.ndarray], lengths: np.ndarray, partners: np.ndarray) -> np.ndarray:
    """S0 straight from its definition: the cosine of head (la, i) of refit a on prompt p and head (lb, j) of
    refit b on partners[p], both cut to the first min(T_p, T_q) rows, averaged over prompts.

    patterns: one [layer, prompt, head, query_pos, key_pos] array per refit. Returns float64 S0 [seed_a, seed_b,
    layer_a, head_a, layer_b, head_b].
    """
    n_layers, n_prompts, n_heads = patterns[0].shape[:3]
    n = len(patterns)
    sums = np.zeros((n, n, n_layers, n_heads, n_layers, n_heads))
    for p in range(n_prompts):
        q = int(partners[p])
        t = int(min(lengths[p], lengths[q]))
        rows, cols = np.tril_indices(t)
        for a, b, la, i, lb, j in np.ndindex(n, n, n_layers, n_heads, n_layers, n_heads):
            x = patterns[a][la, p, i, :t, :t][rows, cols].astype(np.float64)
            y = patterns[b][lb, q, j, :t, :t][rows, cols].astype(np.float64)
            sums[a, b, la, i, lb, j] += x @ y / np.sqrt((x @ x) * (y @ y))
    return sums / n_prompts


def causal_pattern_features(
    pattern: np.ndarray, lengths: np.ndarray, n_prompts_total: int | None = None, out: np.ndarray | None = None
) -> np.ndarray:
    """Unit-normalised lower-triangular attention patterns, ready for dot products (Eq. 1).

    pattern: [layer, prompt, head, query_pos, key_pos] post-softmax patterns, right-padded to a
        common size Q; lengths: [prompt] real tokens per prompt (1 <= length <= Q).
    n_prompts_total: the number of prompts the mean runs over (default: this call's), so that chunks
        of prompts add up to the mean.
    out: an optional C-contiguous float32 [layer, head, prompt, Q(Q+1)/2] array to write into.
    Returns float32 [layer, head, prompt, Q(Q+1)/2] in row-major lower-triangle order; each vector has
    norm 1/sqrt(n_prompts_total), zero beyond the prompt's length (an all-zero vector stays zero).
    """
    pattern, lengths = np.asarray(pattern), np.asarray(lengths)
    if pattern.ndim != 5:
        raise ValueError(
            f"pattern must be [layer, prompt, head, query_pos, key_pos] (5 axes); got shape {pattern.shape}"
        )
    n_layers, n_prompts, n_heads, n_query, n_key = pattern.shape
    if n_query != n_key:
        raise ValueError(f"pattern query_pos ({n_query}) and key_pos ({n_key}) must match")
    if lengths.shape != (n_prompts,):
        raise ValueError(f"lengths must be [prompt] = ({n_prompts},); got shape {lengths.shape}")
    if n_prompts and (lengths.min() < 1 or lengths.max() > n_query):
        raise ValueError(f"lengths must lie in 1..{n_query} (the padded size); got {lengths.min()}..{lengths.max()}")
    total = n_prompts if n_prompts_total is None else int(n_prompts_total)
    if total < n_prompts or total < 1:
        raise ValueError(f"n_prompts_total ({total}) must be >= this chunk's prompt count ({n_prompts})")
    flat_index = lower_triangle_index(n_query)
    shape = (n_layers, n_heads, n_prompts, flat_index.size)
    if out is not None and (out.shape != shape or out.dtype != np.float32 or not out.flags.c_contiguous):
        raise ValueError(f"out must be a C-contiguous float32 array of shape {shape}; got {out.dtype} {out.shape}")
    features = np.empty(shape, dtype=np.float32) if out is None else out
    flat = pattern.reshape(n_layers, n_prompts, n_heads, n_query * n_query)
    np.copyto(features, np.take(flat, flat_index, axis=-1).transpose(0, 2, 1, 3), casting="same_kind")
    # Row-major order puts query rows < length first: exactly the first length(length+1)/2 entries.
    n_kept = lengths.astype(np.int64) * (lengths.astype(np.int64) + 1) // 2
    for prompt in np.flatnonzero(n_kept < flat_index.size):
        features[:, :, prompt, n_kept[prompt] :] = 0.0
    norms = np.linalg.norm(features.astype(np.float64), axis=-1)
    scale = np.divide(1.0, norms * np.sqrt(total), out=np.zeros_like(norms), where=norms > 0)
    features *= scale[..., None].astype(np.float32)
    return features


def _rows(features: np.ndarray) -> tuple[np.ndarray, tuple[int, int, int]]:
    """[seed, layer, head, (prompt, n_lower | feature)] -> (float64 [seed * layer * head, feature], shape)."""
    features = np.asarray(features)
    if features.ndim not in (4, 5):
        raise ValueError(
            f"features must be [seed, layer, head, prompt, n_lower] or [seed, layer, head, feature]; got shape {features.shape}"
        )
    n_seeds, n_layers, n_heads = features.shape[:3]
    return features.reshape(n_seeds * n_layers * n_heads, -1).astype(np.float64), (n_seeds, n_layers, n_heads)


def pair_similarity(features: np.ndarray) -> np.ndarray:
    """Every head of every refit against every other (Eq. 2), one float64 Gram matrix.

    features: [seed, layer, head, prompt, n_lower] (causal_pattern_features, stacked over seeds).
    Returns float32 S [seed_a, seed_b, layer_a, head_a, layer_b, head_b].
    """
    rows, (n_seeds, n_layers, n_heads) = _rows(features)
    gram = rows @ rows.T
    gram = (gram + gram.T) / 2
    blocks = gram.reshape(n_seeds, n_layers, n_heads, n_seeds, n_layers, n_heads)
    return np.ascontiguousarray(blocks.transpose(0, 3, 1, 2, 4, 5), dtype=np.float32)


def same_layer_pair_similarity(features: np.ndarray, anchors: Sequence[int] | None = None) -> np.ndarray:
    """Only the same-layer blocks (§3.2), one Gram per layer; `anchors`: seed indices of the first axis
    (default: all). Returns float32 S [seed_a, seed_b, layer, head_a, head_b]."""
    rows, (n_seeds, n_layers, n_heads) = _rows(features)
    by_layer = rows.reshape(n_seeds, n_layers, n_heads, -1)
    chosen = np.arange(n_seeds) if anchors is None else np.asarray(anchors, dtype=np.int64).reshape(-1)
    if chosen.size == 0 or chosen.min() < 0 or chosen.max() >= n_seeds:
        raise ValueError(f"anchors must be seed indices in 0..{n_seeds - 1}; got {list(anchors or [])}")
    out = np.empty((chosen.size, n_seeds, n_layers, n_heads, n_heads), dtype=np.float32)
    for layer in range(n_layers):
        # [anchor, head_a, feature] x [seed, head_b, feature] -> [anchor, seed, head_a, head_b]
        out[:, :, layer] = np.einsum("aif,bjf->abij", by_layer[chosen, layer], by_layer[:, layer])
    return out


def causal_length_mask(lengths: np.ndarray, n_pos: int) -> np.ndarray:
    """float32 [prompt, n_pos * n_pos]: 1 on each prompt's lower triangle (diagonal included) inside its
    length x length block, 0 elsewhere (the entries Eq. 1 compares), flattened row-major."""
    lengths = np.asarray(lengths)
    query, key = np.arange(n_pos)[:, None], np.arange(n_pos)[None, :]
    mask = (key <= query)[None] & (query[None] < lengths[:, None, None])
    return mask.reshape(lengths.size, n_pos * n_pos).astype(np.float32)


def anchor_pair_similarity(patterns: Sequence[np.ndarray], lengths: np.ndarray, anchor: int = 0) -> np.ndarray:
    """Same-layer similarity of one anchor refit's heads with every refit's heads, masking the padded
    squares (causal_length_mask) instead of gathering lower triangles.

    patterns: one [layer, prompt, head, query_pos, key_pos] array per refit, all of one shape.
    Returns float32 [refit, layer, anchor head, candidate head]; row `anchor` is the anchor with itself.
    """
    if not patterns:
        raise ValueError("patterns must hold at least one refit's [layer, prompt, head, query_pos, key_pos] array")
    shape = np.shape(patterns[0])
    if len(shape) != 5 or shape[3] != shape[4]:
        raise ValueError(
            f"each pattern must be [layer, prompt, head, query_pos, key_pos] with query_pos == key_pos; got {shape}"
        )
    for index, pattern in enumerate(patterns):
        if np.shape(pattern) != shape:
            raise ValueError(
                f"pattern {index} has shape {np.shape(pattern)}, pattern 0 has {shape}; all refits need the same shape"
            )
    n_layers, n_prompts, n_heads, n_pos, _ = shape
    lengths = np.asarray(lengths)
    if lengths.shape != (n_prompts,) or (n_prompts and (lengths.min() < 1 or lengths.max() > n_pos)):
        raise ValueError(f"lengths must be [prompt] = ({n_prompts},) with values in 1..{n_pos}; got {lengths}")
    if not 0 <= anchor < len(patterns):
        raise ValueError(f"anchor must be a refit index in 0..{len(patterns) - 1}; got {anchor}")
    mask = causal_length_mask(lengths, n_pos).astype(np.float64)[:, None, :]  # [prompt, 1, Q*Q]

    def unit(pattern: np.ndarray, layer: int) -> np.ndarray:  # [prompt, head, Q*Q], unit rows (zero stays zero)
        masked = np.asarray(pattern[layer], dtype=np.float64).reshape(n_prompts, n_heads, -1) * mask
        norms = np.linalg.norm(masked, axis=-1, keepdims=True)
        return np.divide(masked, norms, out=np.zeros_like(masked), where=norms > 0)

    out = np.empty((len(patterns), n_layers, n_heads, n_heads), dtype=np.float32)
    for layer in range(n_layers):
        anchor_rows = unit(patterns[anchor], layer)
        for refit, pattern in enumerate(patterns):
            out[refit, layer] = np.einsum("pif,pjf->ij", anchor_rows, unit(pattern, layer)) / n_prompts
    return out
