"""Float tolerances for tests, derived from the dtype and the size of the reduction.

A float result can differ in its last bits between CPUs (Intel, AMD) and BLAS code paths (AVX2,
AVX-512, threading), because the order of a reduction's additions differs. Rounding a sum of n terms
of magnitude m errs by at most about n * eps * m (Higham's gamma_n bound), so a test compares
against that, plus a few ulps for the operations around the sum (a norm, a division), instead of a
bare number that holds on one machine only.
"""

from __future__ import annotations

import numpy as np

EXTRA_ULPS = 4  # the operations around a reduction: a square root, a division, a scaling


def eps(dtype: np.dtype | type) -> float:
    """Machine epsilon of a float dtype (2**-23 for float32, 2**-52 for float64)."""
    return float(np.finfo(dtype).eps)


def reduction_atol(dtype: np.dtype | type, n_terms: int, magnitude: float = 1.0) -> float:
    """Absolute tolerance of a result computed by summing n_terms values of size `magnitude` in `dtype`.

    For a cosine of unit vectors (a dot product of n entries whose products sum to at most 1 in
    absolute value) magnitude is 1.
    """
    return (n_terms + EXTRA_ULPS) * eps(dtype) * magnitude


def reduction_rtol(dtype: np.dtype | type, n_terms: int) -> float:
    """Relative tolerance of a result of n_terms reductions whose terms share the result's sign."""
    return (n_terms + EXTRA_ULPS) * eps(dtype)
