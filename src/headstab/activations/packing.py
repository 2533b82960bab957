"""Lower-triangle packing of causal attention patterns (the entries paper Eq. 1 compares).

A prompt of `length` tokens keeps the row-major lower triangle, diagonal included, of its
length x length block (query 0 key 0, query 1 keys 0-1, ...): length (length + 1) / 2 entries.
The prompts of a set are packed one after another, prompt p at offsets[p]:offsets[p + 1].
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = [
    "lower_triangle_index",
    "lower_triangle_offsets",
    "n_lower_entries",
    "unpack_lower_triangles",
]


def n_lower_entries(n_pos: int) -> int:
    """Number of entries in the lower triangle (diagonal included) of an n_pos x n_pos pattern."""
    return n_pos * (n_pos + 1) // 2


def lower_triangle_offsets(lengths: np.ndarray) -> np.ndarray:
    """int64 [prompt + 1]: where each prompt's packed lower triangle starts (last: the total)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(lengths * (lengths + 1) // 2)]).astype(np.int64)


@functools.lru_cache(maxsize=256)
def lower_triangle_index(length: int, n_pos: int | None = None) -> np.ndarray:
    """Read-only flat row-major indices into an n_pos x n_pos square (default: length x length) of
    the lower triangle, diagonal included, of its leading length x length block."""
    rows, cols = np.tril_indices(length)
    index = rows * (length if n_pos is None else n_pos) + cols
    index.setflags(write=False)
    return index


def unpack_lower_triangles(packed: np.ndarray, lengths: np.ndarray, offsets: np.ndarray, n_pos: int) -> np.ndarray:
    """Inverse of packing: [..., lower_entry] (segments at `offsets`) -> float32 [..., prompt, query_pos,
    key_pos], zero outside each prompt's lower triangle; the prompt axis goes before the position axes."""
    lead = packed.shape[:-1]
    out = np.zeros((*lead, len(lengths), n_pos * n_pos), dtype=np.float32)
    for prompt, length in enumerate(np.asarray(lengths, dtype=np.int64)):
        out[..., prompt, lower_triangle_index(int(length), n_pos)] = packed[..., offsets[prompt] : offsets[prompt + 1]]
    return out.reshape(*lead, len(lengths), n_pos, n_pos)
