"""Heads beside neurons by layer: the size of the layer-label permutation test of Spearman's rho between head
stability above its null and the universal-neuron share, through the project's own
`headstab.neurons.head_layers.rank_permutation_test`, at n architectures of LAYERS layers each.

Under the null a layer's head value says nothing about its neuron value within an architecture, but the data
have the dependence real layers have: an architecture's level shared by both measures (which a test pooling
architectures would take for an association), and sharp and broad layers (each layer's spread, the same layer
sharp or broad in both measures). The second scenario gives each measure its own smooth depth profile per
architecture (a random curvature: a dip or a bump at mid-depth, independent between the measures), the case
where layers are not exchangeable and a permutation test over layers can be too liberal.
"""

from __future__ import annotations

import numpy as np

from calibration.harness import Case
from headstab.neurons.head_layers import rank_permutation_test

LAYERS, PERMUTATIONS = 6, 199
LEVEL_SD = 2.0
LAYER_SD = np.array([0.3, 1.0, 0.3, 1.0, 0.3, 1.0])  # sharp and broad layers alternating
PROFILE_SD = 1.0
DEPTH = (np.arange(LAYERS) + 1) / LAYERS


def _layers(rng: np.random.Generator, n: int, profiles: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    groups = np.repeat(np.arange(n), LAYERS)
    level = rng.normal(scale=LEVEL_SD, size=n)[groups]
    values = []
    for _ in range(2):
        noise = rng.normal(size=(n, LAYERS)) * LAYER_SD
        shape = rng.normal(scale=PROFILE_SD, size=(n, 1)) * (DEPTH - 0.5) ** 2 * 4 if profiles else 0.0
        values.append(level + (noise + shape).ravel())
    return values[0], values[1], groups


def _size(profiles: bool):
    def simulate(rng: np.random.Generator, n: int) -> float:
        head, neuron, groups = _layers(rng, n, profiles)
        return rank_permutation_test(head, neuron, groups, PERMUTATIONS, int(rng.integers(2**31)))["p_value"]

    return simulate


CASES = [
    Case(
        "head_neuron_rank_permutation",
        "architecture_levels_sharp_and_broad_layers",
        "size",
        _size(False),
        reps=1000,
        quick_n=4,
        quick_reps=100,
    ),
    Case(
        "head_neuron_rank_permutation",
        "independent_depth_profiles",
        "size",
        _size(True),
        reps=1000,
        quick_n=4,
        quick_reps=100,
    ),
]
