"""The noise ceiling of head types: the refit-resampled intervals of the split-half reliability and of the
attenuation-corrected cross-seed score correlation, through the project's own noise_ceiling_table.

Each refit's true score of a head is the layer's mean + the refit's layer offset (mean zero over refits) + the
head's own value, shared by every refit (universal heads) at refit-specific indices (the best match finds the
twin); each probe half adds independent measurement noise. Two layers, one sharp (heads spread widely, little
noise) and one broad. With head variance V, offset variance U and noise variance E, the population split-half r
is (V + U) / (V + U + E) and the corrected cross-seed r is V / (V + U): refit offsets are shared by a refit's two
halves but not by two refits, so even universal heads are corrected to below 1 when refits differ in level.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.harness import Case
from headstab.head_type_thresholds import fixed_thresholds, type_heads
from headstab.head_types import CRITERIA, SCORE_COLUMNS
from headstab.sections.noise_ceiling import noise_ceiling_table

CONFIDENCE, N_BOOT, N_HEADS = 0.95, 400, 8
LAYER_MEAN, HEAD_SD, NOISE_SD, OFFSET_SD = np.array([0.3, 0.1]), np.array([0.2, 0.05]), np.array([0.05, 0.04]), 0.03
THRESHOLDS = fixed_thresholds(dict.fromkeys(CRITERIA, 0.4), len(LAYER_MEAN), {})


def _typed(scores: np.ndarray, seeds: list[int]) -> pd.DataFrame:
    refit, layer, head = (axis.ravel() for axis in np.indices(scores.shape))
    table = pd.DataFrame({"refit": np.asarray(seeds)[refit], "layer": layer, "head": head})
    table = table.assign(**dict.fromkeys(SCORE_COLUMNS, 0.0)).assign(copying=1.0, previous_token=scores.ravel())
    return type_heads(table, THRESHOLDS)


def _study(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """noise_ceiling_table of n simulated refits (module docstring)."""
    seeds, n_layers = list(range(1, n + 1)), len(LAYER_MEAN)
    head_value = rng.normal(size=(n_layers, N_HEADS)) * HEAD_SD[:, None]
    order = np.argsort(rng.random((n, n_layers, N_HEADS)), axis=-1)  # refit r's head h is true head order[r, l, h]
    offsets = rng.normal(scale=OFFSET_SD, size=(n, n_layers))
    truth = LAYER_MEAN[None, :, None] + offsets[..., None] + np.take_along_axis(head_value[None], order, axis=-1)
    halves = [truth + rng.normal(size=truth.shape) * NOISE_SD[None, :, None] for _ in range(2)]
    inverse = np.argsort(order, axis=-1)  # refit b's head holding true head t is inverse[b, l, t]
    rows = []
    for a, b, layer, head in np.ndindex(n, n, n_layers, N_HEADS):
        if a != b:
            rows.append((seeds[a], seeds[b], layer, head, int(inverse[b, layer, order[a, layer, head]])))
    pairs = pd.DataFrame(rows, columns=["anchor_seed", "pair_seed", "layer", "head", "best_head"])
    first, second = (_typed(half, seeds) for half in halves)
    return noise_ceiling_table(
        first, second, pairs, seeds, n_boot=N_BOOT, seed=int(rng.integers(2**31)), confidence=CONFIDENCE
    )


def _interval(statistic: str, layer: int):
    variance, offset, noise = HEAD_SD[layer] ** 2, OFFSET_SD**2, NOISE_SD[layer] ** 2
    truth = {
        "reliability_score": (variance + offset) / (variance + offset + noise),
        "corrected_score": variance / (variance + offset),
    }[statistic]

    def simulate(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
        table = _study(rng, n)
        row = table[(table["type"] == "previous_token") & (table["layer"] == layer) & (table["statistic"] == statistic)]
        return float(row["ci_low"].iloc[0]), float(row["ci_high"].iloc[0]), truth

    return simulate


CASES = [
    Case(
        "noise_ceiling_refit_bootstrap",
        scenario,
        "coverage",
        _interval(statistic, layer),
        reps=400,
        quick_n=5,
        quick_reps=20,
    )
    for scenario, statistic, layer in (
        ("universal_heads_sharp_layer_reliability", "reliability_score", 0),
        ("universal_heads_broad_layer_corrected", "corrected_score", 1),
        ("universal_heads_sharp_layer_corrected", "corrected_score", 0),
    )
]
