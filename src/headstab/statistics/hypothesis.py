"""Tests of a difference and of equivalence: Adam vs AdamW (paper §4.5) as statistics, not only means.

- `permutation_test`: two-sided test of a difference in means by permuting the group labels of the
  units (refits); p = (1 + #{|permuted| >= |observed|}) / (1 + n_permutations), so it is never 0 and
  is valid (uniform or conservative) under exchangeability.
- `tost`: two one-sided Welch t-tests of |mean_b - mean_a| < margin (Schuirmann's TOST); equivalence
  is claimed at level alpha when both one-sided p-values are below alpha, i.e. when the
  (1 - 2 alpha) Welch interval of the difference lies inside (-margin, margin).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = ["gap_replicates", "permutation_test", "tost"]


def permutation_test(x: np.ndarray, y: np.ndarray, n_permutations: int, seed: int) -> dict[str, float]:
    """Difference of means mean(y) - mean(x) over axis 0 and its two-sided permutation p-value.

    x: [unit, ...], y: [unit, ...] (trailing axes, e.g. layers, are tested separately, with the same
    permutations). Returns {"difference": [...], "p_value": [...]} as arrays of the trailing shape.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2 or len(y) < 2:
        raise ValueError(f"a permutation test needs at least two units per group; got {len(x)} and {len(y)}")
    pooled = np.concatenate([x, y])
    n_x, n = len(x), len(x) + len(y)
    observed = y.mean(axis=0) - x.mean(axis=0)
    rng = np.random.default_rng(seed)
    order = np.argsort(rng.random((n_permutations, n)), axis=1)  # one permutation per row
    in_y = np.zeros((n_permutations, n))
    np.put_along_axis(in_y, order[:, n_x:], 1.0, axis=1)
    flat = pooled.reshape(n, -1)
    permuted = (in_y @ flat) / (n - n_x) - ((1.0 - in_y) @ flat) / n_x
    # A permuted difference equal to the observed one up to rounding counts as at least as extreme.
    slack = 8 * np.finfo(np.float64).eps * np.abs(flat).max(axis=0)
    extreme = (np.abs(permuted) >= np.abs(observed.reshape(-1)) - slack).sum(axis=0)
    p_value = (1.0 + extreme) / (1.0 + n_permutations)
    return {"difference": observed, "p_value": p_value.reshape(observed.shape)}


def tost(x: np.ndarray, y: np.ndarray, margin: float, alpha: float = 0.05) -> dict[str, float]:
    """Welch TOST of equivalence of mean(y) and mean(x) within +-margin (absolute, margin > 0).

    Returns difference (mean y - mean x), its (1 - 2 alpha) Welch interval ci_low/ci_high, the two
    one-sided p-values, p_value = their maximum, and equivalent (p_value < alpha).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if margin <= 0:
        raise ValueError(f"the equivalence margin must be > 0; got {margin}")
    if len(x) < 2 or len(y) < 2:
        raise ValueError(f"TOST needs at least two values per group; got {len(x)} and {len(y)}")
    var_x, var_y = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se = np.sqrt(var_x + var_y)
    difference = y.mean() - x.mean()
    dof = (var_x + var_y) ** 2 / (var_x**2 / (len(x) - 1) + var_y**2 / (len(y) - 1)) if se > 0 else np.inf
    if se == 0:
        p_lower = p_upper = 0.0 if abs(difference) < margin else 1.0
    else:
        p_lower = float(stats.t.sf((difference + margin) / se, dof))  # H0: difference <= -margin
        p_upper = float(stats.t.cdf((difference - margin) / se, dof))  # H0: difference >= +margin
    half = float(stats.t.ppf(1 - alpha, dof) * se) if se > 0 else 0.0
    p_value = max(p_lower, p_upper)
    return {
        "difference": float(difference),
        "ci_low": float(difference - half),
        "ci_high": float(difference + half),
        "p_lower": p_lower,
        "p_upper": p_upper,
        "p_value": p_value,
        "equivalent": bool(p_value < alpha),
        "margin": float(margin),
        "alpha": float(alpha),
    }


def gap_replicates(layer: np.ndarray) -> dict[str, np.ndarray]:
    """The stability gap of §4.6 for each row of layer stability [..., layer]: delta_s = max - min, and
    the relative depths r = l / L of the most and least stable layer (l from 1; ties: shallowest)."""
    layer = np.asarray(layer, dtype=np.float64)
    n_layers = layer.shape[-1]
    return {
        "s_max": layer.max(axis=-1),
        "s_min": layer.min(axis=-1),
        "delta_s": layer.max(axis=-1) - layer.min(axis=-1),
        "r_max": (layer.argmax(axis=-1) + 1) / n_layers,
        "r_min": (layer.argmin(axis=-1) + 1) / n_layers,
    }
