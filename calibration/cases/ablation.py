"""Ablation importance against head stability (§4.8): the per-layer correlation's permutation p-values
(Pearson and Spearman) and head-resampled interval over one layer's heads (n counts heads), and the trend of
r over depth (n counts layers).

The real data: one anchor's heads of a layer share its refit (and so every partner refit behind their
stability: a layer offset common to the heads); a positional head can stand out in stability (about 0.9
where the layer's other heads sit near 0.45); and ΔPPL is heavy-tailed, one head costing twenty times the
next (docs/statistics.md: 205 against 10.6).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.harness import Case, PowerCase
from calibration.simulate import depth_profile
from headstab.sections.ablation import ablation_correlation, ablation_correlation_intervals

PERMUTATIONS = 199  # a Monte Carlo permutation p of (1 + count) / (1 + B) holds its size at any B
N_BOOT = 1000


def _stability(rng: np.random.Generator, n: int) -> np.ndarray:
    """A layer's head stabilities: a positional head (1 in 7) near 0.9, the others near 0.45, all shifted by the
    layer offset their shared refit and partners give."""
    positional = rng.random(n) < 0.15
    return np.where(positional, rng.normal(0.9, 0.03, n), rng.normal(0.45, 0.08, n)) + rng.normal(scale=0.03)


def _heavy_tailed_null(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """ΔPPL Pareto-tailed (shape 0.7: the largest head costs over 19 times the next in 1 layer of 8), unrelated
    to stability."""
    return _stability(rng, n), rng.pareto(0.7, size=n) + 0.05


def _gaussian_null(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.normal(0.5, 0.1, size=n), rng.normal(2.0, 0.5, size=n)


def _table(stability: np.ndarray, delta_ppl: np.ndarray, layer: np.ndarray | int = 0) -> pd.DataFrame:
    return pd.DataFrame({"seed": 1, "layer": layer, "stability": stability, "delta_ppl": delta_ppl})


def _p(column: str, draw):
    def simulate(rng: np.random.Generator, n: int) -> float:
        per_layer, _ = ablation_correlation(
            _table(*draw(rng, n)), permutations=PERMUTATIONS, seed=int(rng.integers(2**31))
        )
        return float(per_layer[column].iloc[0])

    return simulate


# Coverage: ΔPPL = exp(σ w), w = ρ z + sqrt(1 - ρ²) e with stability z: Pearson's r of (z, ΔPPL) is
# σ ρ / sqrt(exp(σ²) - 1) (a lognormal's moments).
SIGMA, RHO = 1.5, 0.6
LOGNORMAL_R = SIGMA * RHO / np.sqrt(np.expm1(SIGMA**2))


def _interval(lognormal: bool):
    def simulate(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
        z = rng.normal(size=n)
        w = RHO * z + np.sqrt(1 - RHO**2) * rng.normal(size=n)
        delta, truth = (np.exp(SIGMA * w), LOGNORMAL_R) if lognormal else (w, RHO)
        low, high = ablation_correlation_intervals(
            _table(0.5 + 0.1 * z, delta), N_BOOT, int(rng.integers(2**31)), 0.95
        )[["ci_low", "ci_high"]].iloc[0]
        return float(low), float(high), float(truth)

    return simulate


HEADS = 8  # heads per layer behind each r of the trend


def _trend(smooth: bool):
    """n layers of 8 heads each; the true per-layer correlation is 0 (independent layers) or a smooth profile over
    depth with no trend in expectation (neighbouring layers alike: AR(1), correlation 0.7, s.d. 0.4)."""

    def simulate(rng: np.random.Generator, n: int) -> float:
        rho = np.tanh(depth_profile(rng, n, 0.7, 0.4)) if smooth else np.zeros(n)
        z = rng.normal(size=(n, HEADS))
        w = rho[:, None] * z + np.sqrt(1 - rho[:, None] ** 2) * rng.normal(size=(n, HEADS))
        layer = np.repeat(np.arange(n), HEADS)
        table = _table((0.5 + 0.1 * z).ravel(), np.exp(SIGMA * w).ravel(), layer)
        _, trend = ablation_correlation(table, permutations=19, seed=0)
        return trend["p_value"]

    return simulate


CASES = [
    Case(method, scenario, "size", _p(column, draw), reps=1000, quick_n=8, quick_reps=100)
    for method, column in (
        ("permutation_pearson_ablation_heads", "p_value"),
        ("permutation_spearman_ablation_heads", "spearman_p"),
    )
    for scenario, draw in (("heavy_tailed_delta_ppl", _heavy_tailed_null), ("gaussian", _gaussian_null))
]
CASES += [
    Case(
        "head_bootstrap_pearson_ablation", "lognormal_delta_ppl", "coverage", _interval(True), reps=1000, quick_reps=150
    ),
    Case("head_bootstrap_pearson_ablation", "gaussian", "coverage", _interval(False), reps=1000, quick_reps=150),
    Case("linregress_trend_ablation", "independent_layers", "size", _trend(False), reps=400, quick_n=4, quick_reps=50),
    Case("linregress_trend_ablation", "smooth_depth_profile", "size", _trend(True), reps=400, quick_n=4, quick_reps=50),
]


def _power(rng: np.random.Generator, n: int, effect: float) -> float:
    """n heads whose log ΔPPL correlates `effect` with stability (ΔPPL lognormal, sigma 1.5): the permutation p."""
    z = rng.normal(size=n)
    w = effect * z + np.sqrt(1 - effect**2) * rng.normal(size=n)
    table = _table(0.5 + 0.1 * z, np.exp(SIGMA * w))
    per_layer, _ = ablation_correlation(table, permutations=PERMUTATIONS, seed=int(rng.integers(2**31)))
    return float(per_layer["p_value"].iloc[0])


POWER = [
    PowerCase(
        "permutation_pearson_ablation_heads",
        "head stability correlates with ablation ΔPPL in a layer",
        "correlation of stability with log ΔPPL",
        _power,
        effects=(0.3, 0.5, 0.7, 0.8, 0.9, 0.95),
        reps=200,
        ns=(4, 5, 8, 16, 50),
    )
]
