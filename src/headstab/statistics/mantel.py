"""Mantel test: does one distance between objects grow with another, beyond what the strata explain?

The statistic is Mantel's r, the Pearson correlation of the two distances over the pairs i < j. Its null
distribution comes from permuting the objects of the predictor within strata (Legendre & Legendre 2012,
"Numerical Ecology" §10.5: restricted permutations): under the null, objects of one stratum are
exchangeable, so structure shared by a stratum (its architecture, its refit) is kept in every permutation
and cannot make r significant. Permuting objects moves whole rows and columns of the predictor's distance
matrix, so the mean and spread of its pair values never change; only their pairing with the response does.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MANTEL_COLUMNS", "mantel_test", "stratified_permutation"]

MANTEL_COLUMNS = ["mantel_r", "p_value", "null_mean", "null_sd", "n_objects", "n_strata", "n_permutations"]


def stratified_permutation(strata: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A permutation of 0..n-1 that maps every object to an object of its own stratum. strata: [n] labels."""
    codes = np.unique(np.asarray(strata), return_inverse=True)[1].ravel()
    # Both orders list each stratum's members in one block, blocks in the same order: the second shuffled within.
    base = np.argsort(codes, kind="stable")
    shuffled = np.lexsort((rng.random(len(codes)), codes))
    order = np.empty(len(codes), dtype=np.intp)
    order[base] = shuffled
    return order


def mantel_test(
    response: np.ndarray, points: np.ndarray, strata: np.ndarray, n_permutations: int, seed: int
) -> dict[str, float]:
    """One-sided Mantel test of a positive association between two distances, objects permuted within strata.

    response: [n, n] symmetric distances (e.g. between head descriptions), held fixed.
    points: [n] or [n, k] coordinates of the objects whose Euclidean distances are the predictor (e.g. relative
        depth: |Δ depth|); a permutation relabels them, object i taking the point of object order[i].
    strata: [n] labels; objects are permuted only within their label.
    Returns MANTEL_COLUMNS: mantel_r (Pearson r over the n(n-1)/2 pairs), p_value = (1 + #{r_perm >= r}) /
    (1 + n_permutations), the null's mean and s.d., n_objects, n_strata, n_permutations. NaN r (and p) when
    either distance is constant over the pairs.
    """
    response = np.asarray(response, dtype=np.float64)
    n = response.shape[0]
    if response.shape != (n, n) or n < 3:
        raise ValueError(f"response must be a square [n >= 3, n] distance matrix, got shape {response.shape}")
    points = np.asarray(points, dtype=np.float64).reshape(n, -1)
    if np.shape(strata) != (n,):
        raise ValueError(f"strata must be [n] = ({n},) labels, got shape {np.shape(strata)}")
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be >= 1, got {n_permutations}")
    rows, cols = np.triu_indices(n, k=1)

    def predictor(order: np.ndarray) -> np.ndarray:
        moved = points[order]
        return np.sqrt(((moved[rows] - moved[cols]) ** 2).sum(axis=1))

    x = response[rows, cols]
    y = predictor(np.arange(n))
    x_centred, y_mean = x - x.mean(), y.mean()
    scale = len(x) * x.std() * y.std()  # invariant under the permutations

    def correlation(values: np.ndarray) -> float:
        return float(x_centred @ (values - y_mean) / scale) if scale > 0 else np.nan

    observed = correlation(y)
    rng = np.random.default_rng(seed)
    null = np.array([correlation(predictor(stratified_permutation(strata, rng))) for _ in range(n_permutations)])
    p_value = (1 + np.count_nonzero(null >= observed)) / (1 + n_permutations) if np.isfinite(observed) else np.nan
    return {
        "mantel_r": observed,
        "p_value": float(p_value),
        "null_mean": float(null.mean()),
        "null_sd": float(null.std()),
        "n_objects": n,
        "n_strata": len(np.unique(strata)),
        "n_permutations": n_permutations,
    }
