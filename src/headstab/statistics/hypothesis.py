"""Tests of a difference and of equivalence: Adam vs AdamW (paper §4.5) as statistics, not only means.

- `permutation_test`: two-sided test of a difference in means by permuting the group labels of the
  units (refits); p = (1 + #{|permuted| >= |observed|}) / (1 + n_permutations), so it is never 0 and
  is valid (uniform or conservative) under exchangeability.
- `tost`: two one-sided Welch t-tests of |mean_b - mean_a| < margin (Schuirmann's TOST); equivalence
  is claimed at level alpha when both one-sided p-values are below alpha, i.e. when the
  (1 - 2 alpha) Welch interval of the difference lies inside (-margin, margin).
- `benjamini_hochberg`: q-values of a family of p-values (false discovery rate), NaN where p is NaN.
- paired designs (refit s of both optimizers starts from the same weights and sees the same data):
  `sign_flip_test` of per-seed differences, `paired_tost` (one-sample t-tests of the differences), and
  `pair_pseudo_values`, the per-seed jackknife pseudo-values of a mean over ordered pairs of refits.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = [
    "benjamini_hochberg",
    "gap_replicates",
    "pair_pseudo_values",
    "paired_tost",
    "permutation_test",
    "sign_flip_test",
    "tost",
]


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
    return _tost_result(difference, se, dof, margin, alpha)


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


def sign_flip_test(differences: np.ndarray, n_permutations: int, seed: int) -> dict[str, np.ndarray]:
    """Mean of paired differences over axis 0 and its two-sided sign-flip permutation p-value.

    differences: [pair, ...] (trailing axes tested separately with the same sign vectors). Under the null
    each pair's difference is as likely negated. With 2**n_pairs <= n_permutations every sign vector is
    enumerated and p = #{|mean*| >= |mean|} / 2**n_pairs (exact; at least 2 / 2**n_pairs); otherwise
    p = (1 + #extreme) / (1 + n_permutations) over random sign vectors. Returns "difference", "p_value"
    and "n_signs" (the sign vectors used).
    """
    d = np.asarray(differences, dtype=np.float64)
    n = len(d)
    if n < 2:
        raise ValueError(f"a sign-flip test needs at least two paired differences; got {n}")
    flat = d.reshape(n, -1)
    observed = flat.mean(axis=0)
    exact = 2**n <= n_permutations
    if exact:
        signs = 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1)
    else:
        signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n_permutations, n))
    flipped = signs @ flat / n
    slack = 8 * np.finfo(np.float64).eps * np.abs(flat).max(axis=0)  # a tie up to rounding counts as extreme
    extreme = (np.abs(flipped) >= np.abs(observed) - slack).sum(axis=0)
    p_value = extreme / len(signs) if exact else (1.0 + extreme) / (1.0 + n_permutations)
    shape = d.shape[1:]
    return {"difference": observed.reshape(shape), "p_value": p_value.reshape(shape), "n_signs": len(signs)}


def paired_tost(x: np.ndarray, y: np.ndarray, margin: float, alpha: float = 0.05) -> dict[str, float]:
    """TOST of equivalence of paired values y and x within +-margin: two one-sided one-sample t-tests of the
    differences d = y - x (n - 1 degrees of freedom). Returns the keys of `tost`."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if margin <= 0:
        raise ValueError(f"the equivalence margin must be > 0; got {margin}")
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError(f"paired TOST needs two equal-length series of at least two values; got {x.shape}, {y.shape}")
    d = y - x
    difference, se, dof = d.mean(), d.std(ddof=1) / np.sqrt(len(d)), len(d) - 1
    return _tost_result(difference, se, dof, margin, alpha)


def pair_pseudo_values(values: np.ndarray) -> np.ndarray:
    """Jackknife pseudo-values, one per refit, of U = the mean of values[a, b] over ordered pairs a != b.

    values: [refit_a, refit_b, ...] (the diagonal is ignored). Pseudo-value s is N U - (N - 1) U_(-s), with
    U_(-s) the mean over pairs without refit s: they average to U exactly, and, unlike a refit's mean over
    its own pairs, their spread carries the variance of a mean over pairs (which the spread of the
    per-anchor means understates 2 to 4 times when anchors and partners vary alike). Needs N >= 3.
    Returns float64 [refit, ...].
    """
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[0]
    if n < 3 or values.shape[1] != n:
        raise ValueError(f"pseudo-values need values [refit, refit, ...] of at least 3 refits; got {values.shape}")
    off = values * (1.0 - np.eye(n)).reshape(n, n, *([1] * (values.ndim - 2)))
    total = off.sum(axis=(0, 1))
    involving = off.sum(axis=1) + off.sum(axis=0)  # [refit, ...]: pairs with s as anchor or partner
    return total / (n - 1) - (total - involving) / (n - 2)


def _tost_result(difference: float, se: float, dof: float, margin: float, alpha: float) -> dict[str, float]:
    """The two one-sided t tests of |difference| < margin and the (1 - 2 alpha) interval, from the difference,
    its standard error and degrees of freedom (Welch's or the paired test's)."""
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


def benjamini_hochberg(p_values: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg q-values of one family of p-values (`scipy.stats.false_discovery_control`), computed
    over the finite p-values only: a NaN p (no test) stays NaN and does not enlarge the family."""
    p_values = np.asarray(p_values, dtype=np.float64)
    q_values = np.full(p_values.shape, np.nan)
    finite = np.isfinite(p_values)
    if finite.any():
        q_values[finite] = stats.false_discovery_control(p_values[finite], method="bh")
    return q_values
