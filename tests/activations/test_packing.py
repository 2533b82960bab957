"""Lower-triangle packing: the layout of hook_pattern (docs/caches.md)."""

from __future__ import annotations

import numpy as np
from helpers.reference import pack_lower_triangle, valid_positions

from headstab.activations.packing import (
    lower_triangle_index,
    lower_triangle_offsets,
    n_lower_entries,
    unpack_lower_triangles,
)


def test_n_lower_entries_counts_the_triangle_with_diagonal():
    assert n_lower_entries(1) == 1
    assert n_lower_entries(4) == 10
    assert n_lower_entries(96) == 96 * 97 // 2


def test_packing_by_hand_and_back():
    # A 3-token prompt keeps q0k0, q1k0, q1k1, q2k0, q2k1, q2k2.
    square = np.arange(16, dtype=np.float32).reshape(4, 4)
    assert pack_lower_triangle(square, 3).tolist() == [0, 4, 5, 8, 9, 10]
    unpacked = unpack_lower_triangles(
        np.array([0, 4, 5, 8, 9, 10, 7], dtype=np.float32),
        np.array([3, 1]),
        lower_triangle_offsets(np.array([3, 1])),
        4,
    )
    np.testing.assert_array_equal(unpacked[0], np.tril(square * (np.arange(4) < 3)[:, None] * (np.arange(4) < 3)))
    assert unpacked[1, 0, 0] == 7 and unpacked[1].sum() == 7


def test_offsets_index_and_valid_positions():
    assert lower_triangle_offsets(np.array([4, 1, 3])).tolist() == [0, 10, 11, 17]
    index = lower_triangle_index(3, 5)
    assert index.tolist() == [0, 5, 6, 10, 11, 12] and not index.flags.writeable
    np.testing.assert_array_equal(valid_positions(np.array([2, 0]), 3), [[True, True, False], [False, False, False]])


def test_pack_then_unpack_round_trips_many_prompts():
    rng = np.random.default_rng(0)
    lengths = np.array([5, 1, 3, 5])
    squares = np.tril(rng.random((2, 4, 3, 5, 5)).astype(np.float32))  # [layer, prompt, head, q, k]
    squares *= valid_positions(lengths, 5)[None, :, None, :, None] & valid_positions(lengths, 5)[None, :, None, None, :]
    packed = np.concatenate([pack_lower_triangle(squares[:, p], int(n)) for p, n in enumerate(lengths)], axis=-1)
    assert packed.shape == (2, 3, int(lower_triangle_offsets(lengths)[-1]))
    unpacked = unpack_lower_triangles(
        packed, lengths, lower_triangle_offsets(lengths), 5
    )  # [layer, head, prompt, q, k]
    np.testing.assert_array_equal(np.swapaxes(unpacked, 1, 2), squares)
