"""Do layers differ in stability, and is the dip at mid-depth? Tests with refits as units (paper §4.1, §4.6).

The input is psi [refit, layer]: each refit's jackknife pseudo-value of pooled layer stability above its
prompt-permutation null (`headstab.statistics.hypothesis.pair_pseudo_values`). The pseudo-values average to
the pooled layer means, and their spread over refits carries the variance of a mean over pairs of refits, so
refits are the units of every test here; heads, and the pairs a refit enters, never are.

- `layer_heterogeneity_test`: "the layers differ beyond chance". The statistic is the range of the pooled layer
  means (ΔS of stability above its null); its null flips the sign of each refit's centred layer vector
  psi[s] - mean(psi[s]) (a refit whose layer l sits above its own mean is as likely to sit below it). A range
  ignores what every layer shares, so flipping psi[s] itself gives the same null. Unlike a permutation of a
  refit's layer values, the sign flip needs no exchangeable layers: sharper and broader layers (different
  spreads over refits) leave it exact, where a within-refit permutation and Friedman's test reject too often
  (docs/statistics.md, "The stability gap against its null").
- `mid_depth_test`: the paper's claim. d_s = mean of the two end layers - mean of the interior layers of refit s;
  one-sided sign flip of the d_s (a dip: d > 0). Needs at least 3 layers.
- `depth_trend_test`: "deeper models dip more": Spearman's rho of a per-architecture value with depth, the
  values permuted over architectures (every order enumerated when there are few).

With 2**n sign vectors at most `n_permutations`, every one is enumerated and p is exact; otherwise p =
(1 + #{as extreme}) / (1 + n_permutations) over random sign vectors. Either way the observed statistic is the
first row of the null (all signs +1, or the identity order), computed by the same arithmetic, so a tie with it
is exact and needs no tolerance. `min_p` is the smallest p the test can give at that n: a test whose min_p
exceeds alpha cannot reject, whatever the data.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import stats

__all__ = ["depth_trend_test", "layer_heterogeneity_test", "mid_depth_test", "q_values", "sign_vectors"]


def sign_vectors(n: int, n_permutations: int, seed: int) -> tuple[np.ndarray, bool]:
    """(signs float64 [vector, n] of +-1, the first all +1; exact): all 2**n vectors when 2**n <= n_permutations,
    else all +1 and n_permutations random ones from `seed`."""
    if n < 2:
        raise ValueError(f"a sign-flip test needs at least two refits; got {n}")
    if n_permutations < 1:
        raise ValueError(f"config key 'statistics.permutations' must be >= 1; got {n_permutations}")
    if 2**n <= n_permutations:
        return 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1), True
    drawn = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n_permutations, n))
    return np.concatenate([np.ones((1, n)), drawn]), False


def _p_value(null: np.ndarray) -> float:
    """Share of the null (its first value the observed statistic) at least the observed one."""
    return float(np.mean(null >= null[0]))


def _check_pseudo(psi: np.ndarray) -> np.ndarray:
    psi = np.asarray(psi, dtype=np.float64)
    if psi.ndim != 2 or not np.isfinite(psi).all():
        raise ValueError(f"pseudo-values must be a finite [refit, layer] array; got shape {psi.shape}")
    return psi


def layer_heterogeneity_test(psi: np.ndarray, n_permutations: int, seed: int) -> dict[str, float]:
    """Range of the pooled layer means of psi [refit, layer] and its sign-flip test (module docstring).

    Returns delta_s (max - min over layers of the mean over refits), chance (its mean under the random sign
    flips, or every one: ΔS when no layer differs, from the refits' own spread), p_value (one-sided: ranges at
    least the observed), min_p (a range is the same for a sign vector and its negation: 2 / 2**n when exact;
    1 / (1 + n_permutations) otherwise), n_signs.
    """
    psi = _check_pseudo(psi)
    signs, exact = sign_vectors(len(psi), n_permutations, seed)
    null = np.ptp(signs @ psi / len(psi), axis=1)
    return {
        "delta_s": float(null[0]),
        "chance": float(null[0 if exact else 1 :].mean()),
        "p_value": _p_value(null),
        "min_p": (2.0 if exact else 1.0) / len(signs),
        "n_signs": len(signs) - (not exact),
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
    null = signs @ dips / len(dips)
    return {
        "dip": float(null[0]),
        "p_value": _p_value(null),
        "min_p": 1.0 / len(signs),
        "n_signs": len(signs) - (not exact),
        "note": "",
    }


def _orders(n: int, n_permutations: int, seed: int) -> tuple[np.ndarray, bool]:
    """(orders of n units, the identity first; exact): all n! when n! <= n_permutations, else the identity and
    n_permutations random ones."""
    if math.factorial(n) <= n_permutations:
        return np.array(list(itertools.permutations(range(n)))), True
    drawn = np.random.default_rng(seed).permuted(np.tile(np.arange(n), (n_permutations, 1)), axis=1)
    return np.concatenate([np.arange(n)[None], drawn]), False


def depth_trend_test(
    depth: np.ndarray, values: np.ndarray, n_permutations: int, seed: int, *, alternative: str
) -> dict[str, float]:
    """Spearman's rho of values [unit] with depth [unit] (ties: average ranks) over the units with a finite
    value, and its permutation p-value, the values permuted over units. alternative: "greater" (rho at least
    the observed) or "two-sided" (|rho|). Returns rho, p_value, n_units, n_orders (the orders compared with
    the observed one); NaN rho and p with fewer than two distinct depths or constant values. Centred ranks are
    halves, so every order's rho has the same rounding: ties are exact."""
    if alternative not in ("greater", "two-sided"):
        raise ValueError(f"alternative must be 'greater' or 'two-sided'; got {alternative!r}")
    depth, values = np.asarray(depth), np.asarray(values)
    keep = np.isfinite(values)
    depth, values = depth[keep], values[keep]
    if len(np.unique(depth)) < 2 or np.ptp(values) == 0:
        return {"rho": np.nan, "p_value": np.nan, "n_units": len(values), "n_orders": 0}
    x, y = stats.rankdata(depth), stats.rankdata(values)
    x, y = x - x.mean(), y - y.mean()
    orders, exact = _orders(len(y), n_permutations, seed)
    rhos = y[orders] @ x / np.sqrt((x**2).sum() * (y**2).sum())
    p_value = _p_value(np.abs(rhos) if alternative == "two-sided" else rhos)
    return {"rho": float(rhos[0]), "p_value": p_value, "n_units": len(y), "n_orders": len(orders) - (not exact)}


def q_values(p_values: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg q-values (scipy's default method) of a family of p-values, NaN where p is NaN (not
    counted)."""
    p_values = np.asarray(p_values, dtype=np.float64)
    out = np.full(p_values.shape, np.nan)
    finite = np.isfinite(p_values)
    if finite.any():
        out[finite] = stats.false_discovery_control(p_values[finite])
    return out
