"""Effect size of paired differences (Cohen's d_z), NaN where their spread is within the inputs' rounding:
the effect_size column of the interval tables (docs/statistics.md), descriptive only."""

from __future__ import annotations

import numpy as np

__all__ = ["effect_size"]


def effect_size(differences: np.ndarray, magnitudes: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    """Cohen's d_z: mean / s.d. (ddof 1) of the paired `differences` over `axes`; NaN where the s.d. is
    undefined (one pair) or at most the resolution of the inputs.

    magnitudes: max(|a|, |b|) of the pair whose difference a - b each entry is (same shape); eps: the
    machine epsilon of the dtype a and b were stored in. Each of a, b is within eps/2 x its size of its
    rounded value, so differences equal up to that rounding lie within eps x M of one value (M the
    largest magnitude over `axes`), and n such values have an s.d. of at most eps x M x sqrt(n / (n - 1)):
    the resolution. A smaller s.d. is rounding, and a mean divided by it is not an effect size.
    """
    mean = differences.mean(axis=axes)
    n = int(np.prod([differences.shape[a] for a in axes]))
    if n < 2:
        return np.full(mean.shape, np.nan)
    sd = differences.std(axis=axes, ddof=1)
    resolution = eps * np.abs(magnitudes).max(axis=axes) * np.sqrt(n / (n - 1))
    return np.divide(mean, sd, out=np.full(mean.shape, np.nan), where=sd > resolution)
