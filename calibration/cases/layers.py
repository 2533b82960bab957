"""The layer tests of §4.1 and §4.6, refits as units: do the layers differ beyond chance, is the dip at mid-depth,
do deeper models dip more (architectures as units). Each dataset goes through the workflow's own functions:
prompt-group similarity -> `layer_pseudo_values` -> `layer_tests_table` (-> `gap_depth_table`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.harness import Case, PowerCase
from calibration.simulate import graded_layer_similarity
from headstab.sections.stability_gap import gap_depth_table, layer_pseudo_values, layer_tests_table

PERMUTATIONS = 2000
N_LAYERS = 4
# Scenario -> (floors, spreads, offset s.d.s) per layer of a 4-layer architecture. "sharp_and_broad_layers":
# sharper end layers (higher chance floors: a raw dip when none is above the null), spreads and refit-specific
# offsets that differ by layer (the layer vectors are not exchangeable within a refit).
SCENARIOS = {
    "iid_pairs": ([0.3] * 4, [0.05] * 4, [0.0] * 4),
    "refit_layer_offsets": ([0.3] * 4, [0.05] * 4, [0.04] * 4),
    "sharp_and_broad_layers": ([0.6, 0.3, 0.35, 0.55], [0.02, 0.12, 0.06, 0.03], [0.01, 0.08, 0.03, 0.0]),
}
DEPTHS = (3, 4, 6, 8, 12)  # the architectures of a dip-vs-depth dataset cycle through these depths


def _profile(n_layers: int, dip: float) -> np.ndarray:
    """Stability above the null per layer: 0.1, less `dip` on the interior layers."""
    above = np.full(n_layers, 0.1)
    above[1:-1] -= dip
    return above


def _layer_tests(rng: np.random.Generator, n: int, scenario: str, dip: float = 0.0) -> pd.DataFrame:
    floors, spreads, offsets = SCENARIOS[scenario]
    grouped = graded_layer_similarity(rng, n, floors, spreads, offsets, _profile(N_LAYERS, dip))
    facts = {"a": {"n_layers": N_LAYERS, "n_heads": 3, "optimizer": "Adam", "attention_only": True}}
    table = layer_tests_table({"a": layer_pseudo_values(grouped)}, facts, PERMUTATIONS, int(rng.integers(2**31)))
    return table[table["statistic"] == "layer_above_null"].set_index("test")


def _heterogeneity_p(scenario: str):
    return lambda rng, n: float(_layer_tests(rng, n, scenario).loc["layers_differ", "p_value"])


def _mid_depth_p(scenario: str):
    return lambda rng, n, effect=0.0: float(_layer_tests(rng, n, scenario, effect).loc["mid_depth_dip", "p_value"])


def _dip_depth_p(spread_growth: float):
    """n architectures of DEPTHS (cycled), 5 refits each, with random floors, spreads and refit offsets per layer,
    spreads x (1 + spread_growth x L) (deeper models noisier); each dips by `effect` x (L - 3) / 9 (deeper models
    dip more when effect > 0). A dip common to all architectures moves no rank, so it needs no scenario."""

    def simulate(rng: np.random.Generator, n: int, effect: float = 0.0) -> float:
        pseudo, facts = {}, {}
        for k in range(n):
            n_layers = DEPTHS[k % len(DEPTHS)]
            spreads = rng.uniform(0.02, 0.12, n_layers) * (1.0 + spread_growth * n_layers)
            profile = _profile(n_layers, effect * (n_layers - 3) / 9)
            grouped = graded_layer_similarity(
                rng, 5, rng.uniform(0.3, 0.6, n_layers), spreads, rng.uniform(0.0, 0.05, n_layers), profile, 2
            )
            pseudo[f"a{k}"] = layer_pseudo_values(grouped)
            facts[f"a{k}"] = {"n_layers": n_layers, "n_heads": 2, "optimizer": "Adam", "attention_only": True}
        seed = int(rng.integers(2**31))
        tests = layer_tests_table(pseudo, facts, PERMUTATIONS, seed)
        summary = pd.DataFrame({"architecture": list(facts), "n_layers": [f["n_layers"] for f in facts.values()]})
        depth = gap_depth_table(summary, PERMUTATIONS, seed, layer_tests=tests)
        return float(depth.loc[depth["quantity"] == "mid_depth_dip", "p_value"].iloc[0])

    return simulate


CASES = [
    *(
        Case("layer_heterogeneity_sign_flip", scenario, "size", _heterogeneity_p(scenario), quick_reps=150)
        for scenario in SCENARIOS
    ),
    *(Case("mid_depth_sign_flip", scenario, "size", _mid_depth_p(scenario), quick_reps=150) for scenario in SCENARIOS),
    Case("dip_depth_permutation", "no_dip", "size", _dip_depth_p(0.0), quick_n=5, quick_reps=100, reps=500),
    Case(
        "dip_depth_permutation",
        "spread_grows_with_depth",
        "size",
        _dip_depth_p(0.25),
        quick_n=5,
        quick_reps=100,
        reps=500,
    ),
]
POWER = [
    PowerCase(
        "mid_depth_sign_flip",
        "interior layers less stable than the end layers (above the null)",
        "stability",
        _mid_depth_p("sharp_and_broad_layers"),
        effects=(0.005, 0.01, 0.02, 0.04, 0.08, 0.16),
    ),
    PowerCase(
        "dip_depth_permutation",
        "deeper models dip more (dip at L = 12 beyond L = 3)",
        "stability",
        _dip_depth_p(0.0),
        effects=(0.01, 0.02, 0.04, 0.08, 0.16, 0.32),
        reps=200,
    ),
]
