"""Do layers differ in stability, and is the dip at mid-depth? Tests with refits as units (paper §4.1, §4.6).

The input is psi [refit, layer]: each refit's jackknife pseudo-value of pooled layer stability above its
prompt-permutation null (`headstab.statistics.hypothesis.pair_pseudo_values`). The pseudo-values average to
the pooled layer means, and their spread over refits carries the variance of a mean over pairs of refits, so
refits are the units of every test here; heads, and the pairs a refit enters, never are.

- `layer_heterogeneity_test`: "the layers differ beyond chance". The statistic is the range of the pooled layer
  means (ΔS of stability above its null); its null flips the sign of each refit's centred layer vector
  psi[s] - mean(psi[s]) (a refit whose layer l sits above its own mean is as likely to sit below it). Unlike a
  permutation of a refit's layer values, the sign flip needs no exchangeable layers: sharper and broader layers
  (different spreads over refits) leave it exact, where a within-refit permutation and Friedman's test reject
  too often (docs/statistics.md, "The stability gap against its null").
- `mid_depth_test`: the paper's claim. d_s = mean of the two end layers - mean of the interior layers of refit s;
  one-sided sign flip of the d_s (a dip: d > 0). Needs at least 3 layers.
- `depth_trend_test`: "deeper models dip more": Spearman's rho of a per-architecture value with depth, the
  values permuted over architectures (every order enumerated when there are few).

With 2**n sign vectors at most `n_permutations`, every one is enumerated and p is exact; otherwise p =
(1 + #{as extreme}) / (1 + n_permutations) over random sign vectors. `min_p` is the smallest p the test can
give at that n: a test whose min_p exceeds alpha cannot reject, whatever the data.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import stats

__all__ = ["depth_trend_test", "layer_heterogeneity_test", "mid_depth_test", "q_values", "sign_vectors"]

# A statistic equal to the observed one up to rounding counts as at least as extreme.
SLACK = 8 * np.finfo(np.float64).eps


def sign_vectors(n: int, n_permutations: int, seed: int) -> tuple[np.ndarray, bool]:
    """(signs float64 [vector, n] of +-1, exact): all 2**n vectors (the first all +1) when 2**n <= n_permutations,
    else n_permutations random ones from `seed`."""
    if n < 2:
        raise ValueError(f"a sign-flip test needs at least two refits; got {n}")
    if n_permutations < 1:
        raise ValueError(f"config key 'statistics.permutations' must be >= 1; got {n_permutations}")
    if 2**n <= n_permutations:
        return 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1), True
    return np.random.default_rng(seed).choice([-1.0, 1.0], size=(n_permutations, n)), False


def _p_value(null: np.ndarray, observed: float, exact: bool, scale: float) -> float:
    """Share of the null at least `observed` (ties up to rounding of values of size `scale` count)."""
    extreme = int(np.sum(null >= observed - SLACK * max(scale, 1.0)))
    return extreme / len(null) if exact else (1.0 + extreme) / (1.0 + len(null))


def _check_pseudo(psi: np.ndarray) -> np.ndarray:
    psi = np.asarray(psi, dtype=np.float64)
    if psi.ndim != 2 or not np.isfinite(psi).all():
        raise ValueError(f"pseudo-values must be a finite [refit, layer] array; got shape {psi.shape}")
    return psi


def layer_heterogeneity_test(psi: np.ndarray, n_permutations: int, seed: int) -> dict[str, float]:
    """Range of the pooled layer means of psi [refit, layer] and its sign-flip test (module docstring).

    Returns delta_s (max - min over layers of the mean over refits), chance (its mean under the sign flips: ΔS
    when no layer differs, from the refits' own spread), p_value (one-sided: ranges at least the observed),
    min_p (a range is the same for a sign vector and its negation: 2 / 2**n when exact), n_signs.
    """
    psi = _check_pseudo(psi)
    centred = psi - psi.mean(axis=1, keepdims=True)
    signs, exact = sign_vectors(len(psi), n_permutations, seed)
    null = np.ptp(signs @ centred / len(psi), axis=1)
    observed = float(np.ptp(psi.mean(axis=0)))
    return {
        "delta_s": observed,
        "chance": float(null.mean()),
        "p_value": _p_value(null, observed, exact, float(np.abs(centred).max(initial=0.0))),
        "min_p": 2.0 / len(signs) if exact else 1.0 / (1.0 + len(signs)),
        "n_signs": len(signs),
    }


def mid_depth_test(psi: np.ndarray, n_permutations: int, seed: int) -> dict[str, float | str]:
    """Mean over refits of d_s = mean(ends) - mean(interior) of psi [refit, layer] and its one-sided sign-flip
    p-value (a dip at mid-depth: d > 0). Returns dip, p_value, min_p (1 / 2**n when exact), n_signs and note;
    with fewer than 3 layers dip and p_value are NaN and note says why."""
    psi = _check_pseudo(psi)
    n_layers = psi.shape[1]
    if n_layers < 3:
        note = f"needs at least 3 layers (two ends and an interior); this architecture has {n_layers}"
        return {"dip": np.nan, "p_value": np.nan, "min_p": np.nan, "n_signs": 0, "note": note}
    dips = psi[:, [0, n_layers - 1]].mean(axis=1) - psi[:, 1:-1].mean(axis=1)
    signs, exact = sign_vectors(len(dips), n_permutations, seed)
    observed = float(dips.mean())
    return {
        "dip": observed,
        "p_value": _p_value(signs @ dips / len(dips), observed, exact, float(np.abs(dips).max())),
        "min_p": 1.0 / len(signs) if exact else 1.0 / (1.0 + len(signs)),
        "n_signs": len(signs),
        "note": "",
    }


def _orders(n: int, n_permutations: int, seed: int) -> tuple[np.ndarray, bool]:
    """Every order of n units when n! <= n_permutations (exact), else n_permutations random orders."""
    if math.factorial(n) <= n_permutations:
        return np.array(list(itertools.permutations(range(n)))), True
    return np.argsort(np.random.default_rng(seed).random((n_permutations, n)), axis=1), False


def depth_trend_test(
    depth: np.ndarray, values: np.ndarray, n_permutations: int, seed: int, alternative: str = "greater"
) -> dict[str, float]:
    """Spearman's rho of values [unit] with depth [unit] (ties: average ranks) over the units with a finite
    value, and its permutation p-value, the values permuted over units. alternative: "greater" (rho at least
    the observed) or "two-sided" (|rho|). Returns rho, p_value, n_units, n_orders; NaN rho and p with fewer
    than two distinct depths or constant values."""
    if alternative not in ("greater", "two-sided"):
        raise ValueError(f"alternative must be 'greater' or 'two-sided'; got {alternative!r}")
    depth, values = np.asarray(depth, dtype=np.float64), np.asarray(values, dtype=np.float64)
    keep = np.isfinite(values)
    depth, values = depth[keep], values[keep]
    if len(np.unique(depth)) < 2 or np.ptp(values) == 0:
        return {"rho": np.nan, "p_value": np.nan, "n_units": len(values), "n_orders": 0}
    x, y = stats.rankdata(depth), stats.rankdata(values)
    x, y = x - x.mean(), y - y.mean()
    orders, exact = _orders(len(y), n_permutations, seed)
    rhos = y[orders] @ x / np.sqrt((x**2).sum() * (y**2).sum())
    rho = float(y @ x / np.sqrt((x**2).sum() * (y**2).sum()))
    if alternative == "two-sided":
        rhos, observed = np.abs(rhos), abs(rho)
    else:
        observed = rho
    return {"rho": rho, "p_value": _p_value(rhos, observed, exact, 1.0), "n_units": len(y), "n_orders": len(orders)}


def q_values(p_values: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg q-values of a family of p-values (scipy), NaN where p is NaN (not counted)."""
    p_values = np.asarray(p_values, dtype=np.float64)
    out = np.full(p_values.shape, np.nan)
    finite = np.isfinite(p_values)
    if finite.any():
        out[finite] = stats.false_discovery_control(p_values[finite], method="bh")
    return out
