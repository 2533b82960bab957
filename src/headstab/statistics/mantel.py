"""Mantel test: does one distance between objects grow with another, beyond what the strata explain?

The statistic is Mantel's r, the Pearson correlation of the two distances over the pairs i < j. Its null
distribution comes from permuting the predictor's objects within strata (Legendre & Legendre 2012, "Numerical
Ecology" §10.5: restricted permutations), and, where objects come in blocks that share their predictor (the
heads of one layer share its depth), permuting whole blocks: every object of a block takes the point of the
block it is mapped to. Under the null the blocks of one stratum are exchangeable, so structure shared by a
stratum (its architecture, its refit) and by a block (the heads of one layer, alike because they read the same
residual stream) is kept in every permutation and cannot make r significant. Permuting single objects breaks
the blocks: heads of one layer at distance 0 in depth and close in description then pass for a depth effect.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

__all__ = ["MANTEL_COLUMNS", "every_stratified_order", "mantel_test", "stratified_permutation"]

MANTEL_COLUMNS = ["mantel_r", "p_value", "null_mean", "null_sd", "n_objects", "n_blocks", "n_strata", "n_permutations"]


def stratified_permutation(strata: np.ndarray, rng: np.random.Generator, count: int | None = None) -> np.ndarray:
    """A permutation of 0..n-1 that maps every object to an object of its own stratum. strata: [n] labels.
    With count, int [count, n]: count of them, the same as count calls one after the other would draw."""
    codes = np.unique(np.asarray(strata), return_inverse=True)[1].ravel()
    # Both orders list each stratum's members in one block, blocks in the same order: the second shuffled within
    # (a code plus a uniform in [0, 1) sorts by code first, then at random).
    base = np.argsort(codes, kind="stable")
    shuffled = np.argsort(codes + rng.random((1 if count is None else count, len(codes))))
    order = np.empty_like(shuffled)
    order[:, base] = shuffled
    return order[0] if count is None else order


def _blocks(points: np.ndarray, strata: np.ndarray, blocks: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(block index [n] in 0..n_blocks-1, block stratum [n_blocks]); checks that a block lies in one stratum and
    that its objects share their point."""
    n = len(points)
    labels = np.arange(n) if blocks is None else np.asarray(blocks)
    if labels.shape != (n,):
        raise ValueError(f"blocks must be [n] = ({n},) labels, got shape {labels.shape}")
    _, first, index = np.unique(labels, return_index=True, return_inverse=True)
    index = index.ravel()
    if not (strata[first][index] == strata).all():
        raise ValueError("every block must lie in one stratum; a block label spans two strata")
    if not np.array_equal(points[first][index], points):
        raise ValueError("the objects of a block must share their point (e.g. the heads of one layer its depth)")
    return index, strata[first]


def _block_pair_weights(response: np.ndarray, index: np.ndarray, n_blocks: int) -> np.ndarray:
    """float64 [block * block, 2]: per ordered pair of blocks, half the number of object pairs i != j between them
    and half the sum of their responses. Any block order's predictor is constant on such a cell (0 on the
    diagonal cells: the pairs within a block), so its sums over the pairs i < j are these weights times the
    cells' predictor values; the response's own diagonal (i = j) lands in a diagonal cell and never counts."""
    cell = (index[:, None] * n_blocks + index[None, :]).ravel()
    # every block index occurs, so both counts cover every block and cell (the last block's own cell included)
    response_sums = np.bincount(cell, weights=response.ravel())
    sizes = np.bincount(index)
    pair_counts = np.outer(sizes, sizes) - np.diag(sizes)
    return np.stack([pair_counts.ravel(), response_sums], axis=1) / 2


def every_stratified_order(block_strata: np.ndarray) -> np.ndarray:
    """int [order, block]: every map of the blocks onto blocks of their own stratum, the identity first.
    block_strata: [block] labels. prod over strata of (blocks in it)! orders."""
    block_strata = np.asarray(block_strata)
    members = [np.flatnonzero(block_strata == label) for label in np.unique(block_strata)]
    orders = []
    for images in itertools.product(*(itertools.permutations(m) for m in members)):
        order = np.empty(len(block_strata), dtype=np.int64)
        for m, image in zip(members, images, strict=True):
            order[m] = image
        orders.append(order)
    return np.array(orders)


def mantel_test(
    response: np.ndarray,
    points: np.ndarray,
    strata: np.ndarray,
    n_permutations: int,
    seed: int,
    blocks: np.ndarray | None = None,
) -> dict[str, float]:
    """One-sided Mantel test of a positive association between two distances, blocks permuted within strata.

    response: [n, n] symmetric distances (e.g. between head descriptions), held fixed.
    points: [n] or [n, k] coordinates of the objects whose Euclidean distances are the predictor (e.g. relative
        depth: |Δ depth|); equal within a block.
    strata: [n] labels; blocks move only within their stratum.
    blocks: [n] labels of objects that move together (None: every object alone); a permutation maps each block
        to a block of its stratum, whose point all its objects take.
    Returns MANTEL_COLUMNS: mantel_r (Pearson r over the n(n-1)/2 pairs), p_value = (1 + #{r_perm >= r}) /
    (1 + n_permutations) (a permuted r equal to r up to rounding counts), or, when the block maps number at most
    n_permutations, the exact #{r_map >= r} / #maps over every map, the identity included (n_permutations is then
    that number); the null's mean and s.d., n_objects, n_blocks, n_strata, n_permutations. NaN r (and p) when
    either distance is constant over the pairs.
    """
    response = np.asarray(response, dtype=np.float64)
    n = response.shape[0]
    if response.shape != (n, n) or n < 3:
        raise ValueError(f"response must be a square [n >= 3, n] distance matrix, got shape {response.shape}")
    points = np.asarray(points).reshape(n, -1)
    strata = np.asarray(strata)
    if strata.shape != (n,):
        raise ValueError(f"strata must be [n] = ({n},) labels, got shape {strata.shape}")
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be >= 1, got {n_permutations}")
    index, block_strata = _blocks(points, strata, blocks)
    n_blocks = len(block_strata)
    block_points = np.zeros((n_blocks, points.shape[1]))
    block_points[index] = points
    n_pairs = n * (n - 1) / 2
    weights = _block_pair_weights(response, index, n_blocks) / n_pairs  # [block pair, 2]
    rows, cols = np.triu_indices(n, k=1)
    x = response[rows, cols]
    x_mean, x_sd = x.mean(), x.std()

    def correlations(orders: np.ndarray) -> np.ndarray:
        """Mantel r of each block order [order, block] (NaN where the permuted predictor is constant)."""
        moved = block_points[orders]  # [order, block, k]
        distance = np.sqrt(((moved[:, :, None, :] - moved[:, None, :, :]) ** 2).sum(axis=-1)).reshape(len(orders), -1)
        y_mean, cross = (distance @ weights).T
        y_sd = np.sqrt((distance - y_mean[:, None]) ** 2 @ weights[:, 0])  # centred first: a constant gives 0
        constant = np.logical_or(x_sd == 0, y_sd <= 1e-12 * np.abs(y_mean))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(constant, np.nan, (cross - x_mean * y_mean) / (x_sd * y_sd))

    observed = float(correlations(np.arange(n_blocks)[None])[0])
    rng = np.random.default_rng(seed)
    chunk = max(1, 2**22 // n_blocks**2)  # orders per batch: a few million block pairs at a time
    sizes = np.unique(block_strata, return_counts=True)[1]
    exact = math.prod(math.factorial(int(size)) for size in sizes) <= n_permutations
    if exact:  # few enough maps (one 4-layer architecture: 24): all of them, so p is exact and its floor is 1/#maps
        every = every_stratified_order(block_strata)
        n_permutations = len(every)
        null = np.concatenate([correlations(every[start : start + chunk]) for start in range(0, len(every), chunk)])
    else:
        batches = [min(chunk, n_permutations - start) for start in range(0, n_permutations, chunk)]
        null = np.concatenate([correlations(stratified_permutation(block_strata, rng, size)) for size in batches])
    slack = 8 * np.finfo(np.float64).eps * n_pairs  # sums over n_pairs pairs round differently per order
    extreme = np.count_nonzero(null >= observed - slack)
    p_value = (extreme + (0 if exact else 1)) / (n_permutations + (0 if exact else 1))
    p_value = p_value if np.isfinite(observed) else np.nan
    return {
        "mantel_r": observed,
        "p_value": float(p_value),
        "null_mean": float(np.nanmean(null)) if np.isfinite(null).any() else np.nan,
        "null_sd": float(np.nanstd(null)) if np.isfinite(null).any() else np.nan,
        "n_objects": n,
        "n_blocks": n_blocks,
        "n_strata": len(np.unique(strata)),
        "n_permutations": n_permutations,
    }
