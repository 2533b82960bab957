"""Does the universal-neuron share dip at mid-depth: the size of the one-sided sign-flip test over refits of
the end layers' minus the interior layers' jackknife pseudo-values of the share above the null share, through
the project's own `headstab.neurons.depth.neuron_depth_table`, and its power.

Four layers of N_NEURONS neurons; each layer's maxima follow calibration/cases/neurons.py's model
(max[a, b, l, i] = mu[a, l, i] + o_al + o_bl + v_abl + e[a, b, l, i]: each neuron's level, of a universal kind
for a share of the neurons; refit-specific layer offsets of mean zero; symmetric pair blocks; pair noise), and
the null maxima have a layer's own chance floor and spread. Under the null the layers differ (a sharp kind A
with few universal neurons and a low floor, a broad kind B with more of both) but the end layers and the
interior hold one of each (A, A, B, B): the true dip is 0. Power: the interior layers' universal share lowered.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from calibration.harness import Case, PowerCase
from calibration.simulate import symmetric_pair_values
from headstab.neurons.depth import neuron_depth_table

N_NEURONS, PERMUTATIONS = 64, 2000
UNIVERSAL_MU, OTHER_MU, OFFSET_SD, PAIR_SD, NOISE_SD = 0.75, 0.15, 0.05, 0.03, 0.05


@dataclass(frozen=True)
class LayerKind:
    p_universal: float  # share of neurons of the universal kind
    neuron_sd: float  # spread of the neurons' levels
    null_mu: float  # the null maxima's floor
    null_sd: float


SHARP = LayerKind(p_universal=0.1, neuron_sd=0.05, null_mu=0.1, null_sd=0.05)
BROAD = LayerKind(p_universal=0.3, neuron_sd=0.15, null_mu=0.35, null_sd=0.1)
SCENARIOS = {"sharp_and_broad_layers_no_dip": (SHARP, SHARP, BROAD, BROAD), "alike_layers": (SHARP,) * 4}


def _layer_maxima(rng: np.random.Generator, n: int, kind: LayerKind) -> tuple[np.ndarray, np.ndarray]:
    """One layer's maxima and null maxima, [anchor, other, neuron], NaN on the diagonal."""
    universal = rng.random((n, N_NEURONS)) < kind.p_universal
    mu = np.where(universal, UNIVERSAL_MU, OTHER_MU) + rng.normal(scale=kind.neuron_sd, size=(n, N_NEURONS))
    pairs = symmetric_pair_values(rng, rng.normal(scale=OFFSET_SD, size=n), PAIR_SD)
    values = mu[:, None, :] + pairs[:, :, None] + rng.normal(scale=NOISE_SD, size=(n, n, N_NEURONS))
    null = kind.null_mu + rng.normal(scale=kind.null_sd, size=(n, n, N_NEURONS))
    diagonal = np.arange(n)
    values[diagonal, diagonal], null[diagonal, diagonal] = np.nan, np.nan
    return values, null


def simulate_maxima(rng: np.random.Generator, n: int, kinds: tuple[LayerKind, ...]) -> tuple[np.ndarray, np.ndarray]:
    """[anchor, other, layer, neuron] maxima and null maxima of n refits, one layer per kind."""
    layers = [_layer_maxima(rng, n, kind) for kind in kinds]
    return np.stack([v for v, _ in layers], axis=2), np.stack([z for _, z in layers], axis=2)


def _p_value(kinds: tuple[LayerKind, ...]):
    def simulate(rng: np.random.Generator, n: int) -> float:
        pair_max, pair_null = simulate_maxima(rng, n, kinds)
        table = neuron_depth_table(pair_max, pair_null, permutations=PERMUTATIONS, seed=int(rng.integers(2**31)))
        return float(table["p_value"].iloc[0])

    return simulate


def _power(rng: np.random.Generator, n: int, effect: float) -> float:
    """The interior layers of the no-dip scenario hold `effect` fewer universal neurons (a share)."""
    sharp, broad = SCENARIOS["sharp_and_broad_layers_no_dip"][0], SCENARIOS["sharp_and_broad_layers_no_dip"][2]
    kinds = (
        sharp,
        replace(sharp, p_universal=sharp.p_universal - effect / 2),
        replace(broad, p_universal=broad.p_universal - effect),
        broad,
    )
    return _p_value(kinds)(rng, n)


CASES = [
    Case(
        "neuron_mid_depth_sign_flip",
        scenario,
        "size",
        _p_value(kinds),
        reps=1000,
        quick_n=5,
        quick_reps=100,
        reps_by_n=((50, 400),),
    )
    for scenario, kinds in SCENARIOS.items()
]

POWER = [
    PowerCase(
        "neuron_mid_depth_sign_flip",
        "the universal-neuron share dips at mid-depth",
        "interior layers' lower universal share (broad layer; half in the sharp one)",
        _power,
        (0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2),
        reps=200,
    )
]
