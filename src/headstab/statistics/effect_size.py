"""Effect size of paired differences (Cohen's d_z), NaN where their spread is within the inputs' rounding:
the effect_size column of the interval tables (docs/statistics.md), descriptive only."""

from __future__ import annotations

import numpy as np

__all__ = ["RELATIVE_FLOOR", "effect_size", "similarity_rounding"]

# An s.d. below this share of |mean| is no spread a similarity resolves: float32 cosines accumulated over
# thousands of entries differ by many ulps, and a mean divided by that read 10^5.
RELATIVE_FLOOR = 1e-4


def similarity_rounding(dtype: np.dtype | type, lengths: np.ndarray) -> float:
    """The relative rounding of a stored similarity: the epsilon of `dtype` times the square root of the
    lower-triangle entries of the longest prompt (of token `lengths`), the products each cosine sums."""
    longest = int(np.max(lengths))
    return float(np.finfo(dtype).eps) * float(np.sqrt(longest * (longest + 1) / 2))


def effect_size(differences: np.ndarray, magnitudes: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    """Cohen's d_z: mean / s.d. (ddof 1) of the paired `differences` over `axes`; NaN where the s.d. is
    undefined (one pair), at most the resolution of the inputs, or below RELATIVE_FLOOR x |mean| (d_z
    above 10^4 is rounding, whatever the inputs' resolution).

    magnitudes: max(|a|, |b|) of the pair whose difference a - b each entry is (same shape); eps: the
    relative rounding of each of a and b (the machine epsilon of their dtype, times the square root of the
    terms each was accumulated from). Each is within eps/2 x its size of its exact value, so differences
    equal up to that rounding lie within eps x M of one value (M the largest magnitude over `axes`), and n
    such values have an s.d. of at most eps x M x sqrt(n / (n - 1)): the resolution. A smaller s.d. is
    rounding, and a mean divided by it is not an effect size.
    """
    mean = differences.mean(axis=axes)
    n = int(np.prod([differences.shape[a] for a in axes]))
    if n < 2:
        return np.full(mean.shape, np.nan)
    sd = differences.std(axis=axes, ddof=1)
    resolution = eps * np.abs(magnitudes).max(axis=axes) * np.sqrt(n / (n - 1))
    floor = np.maximum(resolution, RELATIVE_FLOOR * np.abs(mean))
    return np.divide(mean, sd, out=np.full(mean.shape, np.nan), where=sd > floor)
