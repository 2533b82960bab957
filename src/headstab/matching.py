"""One-to-one (Hungarian) matching of heads between two refits, beside the paper's best match.

The paper's best match (Eq. 3) lets many heads of the anchor take the same head of the pair refit, so a
layer of redundant heads scores high even when the pair refit has only one head of that kind. The
standard of convergent-learning work (Li et al. 2015; the ReSi benchmark's hard correlation match;
netrep's permutation metric) is a one-to-one assignment: a permutation of the pair refit's heads that
maximises the summed similarity (`scipy.optimize.linear_sum_assignment`). Every assigned similarity is at
most its row's best match, so one-to-one stability is never above best-match stability; they are equal
exactly when the best matches already form a permutation.
"""

from __future__ import annotations

import numpy as np

__all__ = ["assigned_values", "one_to_one_assignment"]


def _solve(matrix: np.ndarray) -> np.ndarray:
    """int64 [head_a]: the head of b assigned to each head of a, maximising the summed similarity."""
    from scipy.optimize import linear_sum_assignment

    rows, columns = linear_sum_assignment(matrix, maximize=True)
    assignment = np.empty(matrix.shape[0], dtype=np.int64)
    assignment[rows] = columns
    return assignment


def one_to_one_assignment(blocks: np.ndarray) -> np.ndarray:
    """One-to-one assignment of every layer of every ordered pair of refits.

    blocks: same-layer similarity [seed_a, seed_b, layer, head_a, head_b] (square head axes).
    Returns int64 [seed_a, seed_b, layer, head_a]: the head of refit b assigned to each head of refit a;
    on the diagonal (a == b) the identity. When the blocks are exactly symmetric (blocks[b, a] equals
    blocks[a, b] transposed, as the pair-similarity tensor is), (a, b) is solved for a < b only and (b, a)
    gets the inverse permutation, so a's head i is assigned b's head j exactly when b's j is assigned a's i.
    """
    blocks = np.asarray(blocks)
    if blocks.ndim != 5 or blocks.shape[0] != blocks.shape[1] or blocks.shape[3] != blocks.shape[4]:
        raise ValueError(
            f"one-to-one matching needs [seed_a, seed_b, layer, head_a, head_b] blocks; got {blocks.shape}"
        )
    n_seeds, _, n_layers, n_heads, _ = blocks.shape
    assignment = np.broadcast_to(np.arange(n_heads), blocks.shape[:4]).copy()
    symmetric = np.array_equal(blocks, blocks.transpose(1, 0, 2, 4, 3))
    for a in range(n_seeds):
        for b in range(a + 1 if symmetric else 0, n_seeds):
            if a == b:
                continue
            for layer in range(n_layers):
                forward = _solve(blocks[a, b, layer])
                assignment[a, b, layer] = forward
                if symmetric:
                    assignment[b, a, layer, forward] = np.arange(n_heads)
    return assignment


def assigned_values(values: np.ndarray, assignment: np.ndarray) -> np.ndarray:
    """values [..., seed_a, seed_b, layer, head_a, head_b] at the assigned heads: [..., seed_a, seed_b, layer, head_a].

    Leading axes (e.g. prompt groups) share the one assignment [seed_a, seed_b, layer, head_a].
    """
    values = np.asarray(values)
    index = np.broadcast_to(assignment[..., None], (*values.shape[:-1], 1))
    return np.take_along_axis(values, index, axis=-1)[..., 0]
