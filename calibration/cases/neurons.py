"""Neuron universality: the refit-resampled interval of a layer's universal-neuron share, through the project's
own `headstab.neurons.shares.universal_share_table` on simulated maximum correlations.

The maxima carry the dependence real refit pairs have: max[a, b, i] = mu[a, i] + o_a + o_b + v_ab + e[a, b, i],
with each anchor neuron's own level mu (a universal kind at UNIVERSAL_MU for a share P_UNIVERSAL of the
neurons, the rest at OTHER_MU, each spread by NEURON_SD), refit offsets o of mean zero shared by every neuron
and pair the refit is in, symmetric pair blocks v_ab = v_ba, and pair noise e. Two layers: a sharp one (few
neurons near the threshold) and a broad one. The truth is the share an anchor has with infinitely many
partners (mu + o_a above the threshold), which a finite study's partner mean estimates with the partner
noise in it, so coverage measures bias as well as spread.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from calibration.harness import Case
from calibration.simulate import symmetric_pair_values
from headstab.neurons.shares import UNIVERSAL_THRESHOLD, universal_share_table

CONFIDENCE, N_BOOT, N_NEURONS = 0.95, 400, 200
P_UNIVERSAL, UNIVERSAL_MU, OTHER_MU = 0.1, 0.75, 0.15
OFFSET_SD, PAIR_SD, NOISE_SD = 0.05, 0.03, 0.05
NEURON_SD = {"sharp": 0.05, "broad": 0.15}


def _true_share(neuron_sd: float) -> float:
    """P(mu + o_a > threshold) over the neuron kinds: the share with infinitely many partners."""
    spread = np.hypot(neuron_sd, OFFSET_SD)
    above = lambda mu: norm.sf((UNIVERSAL_THRESHOLD - mu) / spread)  # noqa: E731
    return float(P_UNIVERSAL * above(UNIVERSAL_MU) + (1 - P_UNIVERSAL) * above(OTHER_MU))


def _pair_maxima(rng: np.random.Generator, n: int, neuron_sd: float) -> np.ndarray:
    """[anchor, other, 1 layer, neuron] maxima with refit offsets, symmetric pair blocks and pair noise."""
    universal = rng.random((n, N_NEURONS)) < P_UNIVERSAL
    mu = np.where(universal, UNIVERSAL_MU, OTHER_MU) + rng.normal(scale=neuron_sd, size=(n, N_NEURONS))
    pairs = symmetric_pair_values(rng, rng.normal(scale=OFFSET_SD, size=n), PAIR_SD)  # o_a + o_b + v_ab
    noise = rng.normal(scale=NOISE_SD, size=(n, n, N_NEURONS))
    values = mu[:, None, :] + pairs[:, :, None] + noise
    values[np.arange(n), np.arange(n)] = np.nan
    return values[:, :, None, :]


def _share_interval(layer: str):
    def simulate(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
        pair_max = _pair_maxima(rng, n, NEURON_SD[layer])
        pair_null = np.where(np.isnan(pair_max), np.nan, 0.1)
        row = universal_share_table(
            pair_max, pair_null, n_boot=N_BOOT, seed=int(rng.integers(2**31)), confidence=CONFIDENCE
        ).iloc[0]
        return float(row["ci_low"]), float(row["ci_high"]), _true_share(NEURON_SD[layer])

    return simulate


CASES = [
    Case(
        "neuron_share_bootstrap",
        f"{layer}_layer_refit_offsets_pair_blocks",
        "coverage",
        _share_interval(layer),
        reps=400,
        quick_n=5,
        quick_reps=40,
    )
    for layer in NEURON_SD
]
