"""Refit-resampled intervals of means and correlations over rows that belong to refits.

The rows of the §-beyond tables (a head of a refit, a head of an anchor beside its best match in a pair
refit, a layer of a refit) are not independent: the refits are the units drawn anew by a new study.
Each resample draws refit counts k (`headstab.statistics.bootstrap.draw_resamples`, the stability
bootstrap's draws); a row of refit a weighs k_a, a row of the ordered pair (a, b) weighs k_a k_b (a refit
drawn twice is never compared with itself). The statistic is recomputed with those weights and the
percentile interval of the replicates is the confidence interval.
"""

from __future__ import annotations

import numpy as np

from headstab.statistics.bootstrap import draw_resamples, percentile_interval

__all__ = ["row_weights", "weighted_mean", "weighted_pearson", "refit_interval"]


def row_weights(refit_counts: np.ndarray, row_refits: np.ndarray) -> np.ndarray:
    """float64 [boot, row]: each row's weight in each resample, a refit's count or the product of two.

    refit_counts: int [boot, refit] (`Resamples.refit_counts`); row_refits: int [row] (a row of one refit)
    or [row, 2] (a row of an ordered pair of refits: k_a k_b) of indices into the refit axis.
    """
    k = np.asarray(refit_counts, dtype=np.float64)  # float64 weights: the weighted sums are BLAS products
    row_refits = np.asarray(row_refits)
    if row_refits.ndim == 1:
        return k[:, row_refits]
    if row_refits.ndim == 2 and row_refits.shape[1] == 2:
        return k[:, row_refits[:, 0]] * k[:, row_refits[:, 1]]
    raise ValueError(f"row_refits must be [row] or [row, 2]; got shape {row_refits.shape}")


def weighted_mean(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """[boot]: sum_i w_i v_i / sum_i w_i per resample (NaN where every weight is zero).

    weights: float64 [boot, row], never negative, so a zero total has a zero sum: 0 / 0 is NaN.
    """
    with np.errstate(invalid="ignore"):
        return (weights @ values) / weights.sum(axis=1)


def weighted_pearson(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """[boot]: Pearson's r of (x_i, y_i) with row weights [boot, row]; NaN where a variable is constant."""
    # One float64 cast for both: in float16 the floor below rounds to 0, and noise would get a correlation.
    x, y = np.asarray([x, y], dtype=np.float64)
    with np.errstate(invalid="ignore"):
        w = weights / weights.sum(axis=1, keepdims=True)  # all-zero weights: NaN rows, so r is NaN
        dx = x[None, :] - (w @ x)[:, None]
        dy = y[None, :] - (w @ y)[:, None]
        covariance = (w * dx * dy).sum(axis=1)
        scale = np.sqrt((w * dx**2).sum(axis=1) * (w * dy**2).sum(axis=1))
    # A resample whose variance is rounding noise has no correlation: relative to the values' size.
    floor = 1e-12 * np.abs(x).max(initial=0.0) * np.abs(y).max(initial=0.0)
    return np.divide(covariance, scale, out=np.full(scale.shape, np.nan), where=scale > floor)


def refit_interval(
    statistic: str,
    x: np.ndarray,
    y: np.ndarray | None,
    row_refits: np.ndarray,
    n_refits: int,
    n_boot: int,
    seed: int,
    confidence: float,
) -> tuple[float, float, float]:
    """(estimate, ci_low, ci_high) of `statistic` ("mean" of x, or "pearson" of x and y) over rows of refits.

    row_refits: [row] or [row, 2] refit indices in 0..n_refits-1 (`row_weights`). Rows with a non-finite
    value are left out. NaN interval for fewer than 3 rows or 2 refits.
    """
    x = np.asarray(x, dtype=np.float64)
    y_arr = None if y is None else np.asarray(y, dtype=np.float64)
    keep = np.isfinite(x) if y_arr is None else np.isfinite(x) & np.isfinite(y_arr)
    x, row_refits = x[keep], np.asarray(row_refits)[keep]
    y_arr = None if y_arr is None else y_arr[keep]
    if statistic not in ("mean", "pearson"):
        raise ValueError(f"statistic must be 'mean' or 'pearson'; got {statistic!r}")
    if statistic == "pearson" and y_arr is None:
        raise ValueError("a pearson interval needs y")

    def compute(weights: np.ndarray) -> np.ndarray:
        return weighted_mean(x, weights) if statistic == "mean" else weighted_pearson(x, y_arr, weights)

    if x.size == 0:
        return np.nan, np.nan, np.nan
    estimate = compute(np.ones_like(x)[None, :]).item()
    if x.size < 3 or n_refits < 2:
        return estimate, np.nan, np.nan
    counts = draw_resamples(n_boot, n_refits, 1, seed).refit_counts
    replicates = compute(row_weights(counts, row_refits))
    if not np.isfinite(replicates).any():
        return estimate, np.nan, np.nan
    low, high = percentile_interval(replicates, confidence)
    return estimate, float(low), float(high)
