"""meta-SNE (§4.9): the Mantel test of head-description distance against |Δ relative depth|, layers permuted as
blocks within refits. Each dataset's descriptions go through the workflow's own `depth_mantel_table`."""

from __future__ import annotations

import numpy as np

from calibration.harness import Case, PowerCase
from headstab.sections.meta_sne import depth_mantel_table

PERMUTATIONS = 199
N_HEADS, N_FEATURES = 4, 8


def _refit(rng: np.random.Generator, n_layers: int, scenario: str, centre: np.ndarray, effect: float) -> np.ndarray:
    """[layer, head, feature] descriptions of one refit. "iid_heads": no structure; "refit_layer_clusters": the
    heads of a layer gather around a centroid drawn for that refit (unordered in depth; centre [layer, 1, feature]
    shared by every refit for "shared_layer_clusters": a layer's identity across refits); "sharp_and_broad_layers":
    the same with a spread and a scale drawn per layer of the refit. effect moves every layer along one direction
    by effect x relative depth (a depth order)."""
    heads = rng.normal(size=(n_layers, N_HEADS, N_FEATURES))
    if scenario != "iid_heads":
        spread = rng.uniform(0.1, 1.0, size=(n_layers, 1, 1)) if scenario == "sharp_and_broad_layers" else 0.3
        heads = centre + 2.0 * rng.normal(size=(n_layers, 1, N_FEATURES)) + spread * heads
        if scenario == "sharp_and_broad_layers":
            heads *= rng.uniform(0.5, 3.0, size=(n_layers, 1, 1))
    depth = (np.arange(n_layers) + 1) / n_layers
    return heads + effect * depth[:, None, None] * np.eye(N_FEATURES)[0]


def _mantel_p(scenario: str, description: str = "raw"):
    """p of n refits: 4-layer refits of one architecture, or with "two_architectures" alternately 4- and 6-layer
    refits of two architectures far apart in description space, each refit with layer clusters of its own."""

    def simulate(rng: np.random.Generator, n: int, effect: float = 0.0) -> float:
        descriptions, facts = {}, {}
        shared = 2.0 * rng.normal(size=(6, 1, N_FEATURES))  # "shared_layer_clusters": layer l alike in every refit
        for k in range(n):
            arch = f"l{4 + 2 * (k % 2)}" if scenario == "two_architectures" else "l4"
            n_layers = int(arch[1:])
            centre = rng.normal(size=N_FEATURES) + (5.0 if arch == "l6" else 0.0)
            if scenario == "shared_layer_clusters":
                centre = shared[:n_layers]
            kind = "refit_layer_clusters" if scenario in ("two_architectures", "shared_layer_clusters") else scenario
            descriptions[(arch, k)] = _refit(rng, n_layers, kind, centre, effect)
            facts[arch] = {"n_layers": n_layers, "n_heads": N_HEADS, "optimizer": "Adam", "attention_only": True}
        table = depth_mantel_table(descriptions, facts, PERMUTATIONS, int(rng.integers(2**31)))
        return float(table.set_index("description").loc[description, "p_value"])

    return simulate


SCENARIOS = (
    "iid_heads",
    "refit_layer_clusters",
    "shared_layer_clusters",
    "sharp_and_broad_layers",
    "two_architectures",
)
CASES = [
    Case("mantel_layer_blocks", scenario, "size", _mantel_p(scenario), reps=400, quick_n=5, quick_reps=150)
    for scenario in SCENARIOS
]
CASES.append(
    Case(
        "mantel_layer_blocks",
        "sharp_and_broad_layers_normalised",
        "size",
        _mantel_p("sharp_and_broad_layers", "scale_normalised"),
        reps=400,
        quick_n=5,
        quick_reps=150,
    )
)
POWER = [
    PowerCase(
        "mantel_layer_blocks",
        "head descriptions move with relative depth (beyond refit-specific layer clusters)",
        "description units per unit of relative depth (layer clusters s.d. 2)",
        _mantel_p("refit_layer_clusters"),
        effects=(0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
        reps=200,
    )
]
