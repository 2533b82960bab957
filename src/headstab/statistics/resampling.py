"""Bootstrap intervals of the correlations and means the paper reports across heads, layers and refits.

Each resamples the units the statistic is computed over, with replacement, from one seeded generator:
- `pearson_interval`: the (x, y) pairs of a correlation (heads of a layer for the ablation
  correlation of §4.8);
- `mean_interval`: the values of a mean (anchors for the mean Table B.5 correlation of §4.4.1);
- `pair_mean_interval`: refits, for a mean over distinct pairs of refits (residual CKA per layer, §4.7):
  a resample with counts k weighs pair (a, b) by k_a k_b, as the stability bootstrap does.
Percentile intervals; NaN where the statistic is undefined (fewer than 3 units for a correlation, or a
constant variable in every resample).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headstab.statistics.bootstrap import draw_resamples, percentile_interval, prompt_weights

__all__ = ["commonness_replicates", "mean_interval", "pair_mean_interval", "partial_correlation", "pearson_interval"]


def _rows(rng: np.random.Generator, n_boot: int, n_units: int) -> np.ndarray:
    return rng.integers(0, n_units, size=(n_boot, n_units))


def pearson_interval(x: np.ndarray, y: np.ndarray, n_boot: int, seed: int, confidence: float) -> tuple[float, float]:
    """Percentile interval of Pearson's r over units (x_k, y_k) resampled with replacement."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 3:
        return float("nan"), float("nan")
    rows = _rows(np.random.default_rng(seed), n_boot, x.size)
    xs, ys = x[rows], y[rows]
    xs = xs - xs.mean(axis=1, keepdims=True)
    ys = ys - ys.mean(axis=1, keepdims=True)
    denominator = np.sqrt((xs**2).sum(axis=1) * (ys**2).sum(axis=1))
    r = np.divide((xs * ys).sum(axis=1), denominator, out=np.full(n_boot, np.nan), where=denominator > 0)
    if not np.isfinite(r).any():
        return float("nan"), float("nan")
    low, high = percentile_interval(r, confidence)
    return float(low), float(high)


def mean_interval(values: np.ndarray, n_boot: int, seed: int, confidence: float) -> tuple[float, float]:
    """Percentile interval of the mean of the finite `values`, resampled with replacement."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size < 2:
        return float("nan"), float("nan")
    low, high = percentile_interval(
        values[_rows(np.random.default_rng(seed), n_boot, values.size)].mean(axis=1), confidence
    )
    return float(low), float(high)


def pair_mean_interval(table: pd.DataFrame, value: str, n_boot: int, seed: int, confidence: float) -> pd.DataFrame:
    """Per layer, the interval of the mean of `value` over distinct refit pairs, refits resampled.

    table: columns seed_a, seed_b (a != b, each unordered pair once), layer, `value`.
    Returns columns layer, ci_low, ci_high, n_boot.
    """
    seeds = sorted(set(table["seed_a"]) | set(table["seed_b"]))
    index = {seed_: i for i, seed_ in enumerate(seeds)}
    resamples = draw_resamples(n_boot, len(seeds), 1, seed)
    weights = resamples.pair_weights()  # [boot, a, b], symmetric, zero diagonal
    rows = []
    for layer, group in table.groupby("layer", sort=True):
        matrix = np.full((len(seeds), len(seeds)), np.nan)
        a, b = group["seed_a"].map(index).to_numpy(), group["seed_b"].map(index).to_numpy()
        matrix[a, b] = matrix[b, a] = group[value].to_numpy(dtype=np.float64)
        np.fill_diagonal(matrix, 0.0)
        if np.isnan(matrix).any():
            raise ValueError(f"layer {layer}: not every pair of the refits {seeds} has a {value}")
        low, high = percentile_interval(np.einsum("rab,ab->r", weights, matrix), confidence)
        rows.append((int(layer), float(low), float(high), n_boot))
    return pd.DataFrame(rows, columns=["layer", "ci_low", "ci_high", "n_boot"])


def commonness_replicates(grouped: np.ndarray, group_sizes: np.ndarray, prompt_counts: np.ndarray) -> np.ndarray:
    """Commonness (Eq. 10, the head itself included) of every head of every refit under prompt-group
    resampling: grouped [group, seed_a, seed_b, layer, head_a, head_b] -> float64 [boot, seed, layer, head]."""
    within = np.diagonal(grouped, axis1=1, axis2=2)  # [group, layer, head_a, head_b, seed]
    per_group = np.moveaxis(within.mean(axis=-2, dtype=np.float64), -1, 1)  # [group, seed, layer, head]
    return np.tensordot(prompt_weights(prompt_counts, group_sizes), per_group, axes=1)


def partial_correlation(x: np.ndarray, y: np.ndarray, z: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Pearson correlation of x and y controlling for z (each [unit]): the correlation of the residuals of
    x and y after a linear fit on z, from the three pairwise correlations.

    weights: [resample, unit] counts (a bootstrap's draws of the units) or None for one unweighted estimate.
    Returns float64 [resample] (or a 0-d array); NaN where a variable is constant or |r(x, z)| or
    |r(y, z)| is 1 (nothing left to correlate).
    """
    data = np.stack([np.asarray(v, dtype=np.float64) for v in (x, y, z)])  # [variable, unit]
    w = np.ones((1, data.shape[1])) if weights is None else np.atleast_2d(np.asarray(weights, dtype=np.float64))
    w = w / w.sum(axis=1, keepdims=True)
    centred = data[None] - np.einsum("ru,vu->rv", w, data)[..., None]  # [resample, variable, unit]
    cov = np.einsum("ru,rvu,rwu->rvw", w, centred, centred)
    sd = np.sqrt(np.einsum("rvv->rv", cov))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = cov / (sd[:, :, None] * sd[:, None, :])
        r_xy, r_xz, r_yz = r[:, 0, 1], r[:, 0, 2], r[:, 1, 2]
        left = (1 - r_xz**2) * (1 - r_yz**2)
        partial = (r_xy - r_xz * r_yz) / np.sqrt(left)
    # |r| = 1 up to the rounding of sums over the units: nothing left of x or y once z is removed.
    degenerate = left <= 16 * data.shape[1] * np.finfo(np.float64).eps
    # a constant variable keeps a spread of the weighted mean's rounding, about n eps |value|, never exactly 0
    constant = sd <= 16 * data.shape[1] * np.finfo(np.float64).eps * np.abs(data).max(axis=1)
    degenerate |= constant.any(axis=1)
    partial = np.where(np.isfinite(partial) & ~degenerate, np.clip(partial, -1.0, 1.0), np.nan)
    return partial[0] if weights is None else partial
