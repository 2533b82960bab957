"""The noise-ceiling figure: drawn at the demo's size for 2 and 12 layers, every name inside the canvas (conftest's
check), every type's label and score statistics drawn beside head stability."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headstab.head_type_thresholds import fixed_thresholds, type_heads
from headstab.head_types import CRITERIA, HEAD_TYPES, SCORE_COLUMNS
from headstab.plots.noise_ceiling import CEILING_LINES, plot_noise_ceiling
from headstab.sections.noise_ceiling import noise_ceiling_table
from plots.test_head_types import pooled

SEEDS, N_HEADS = [1, 2, 3, 4], 8


def ceiling(n_layers: int) -> pd.DataFrame:
    rng = np.random.default_rng(n_layers)
    truth = rng.uniform(0.0, 0.8, size=(len(SEEDS), n_layers, N_HEADS, len(SCORE_COLUMNS)))
    grid = np.indices(truth.shape[:3]).reshape(3, -1).T
    keys = {"refit": np.asarray(SEEDS)[grid[:, 0]], "layer": grid[:, 1], "head": grid[:, 2]}
    thresholds = fixed_thresholds(dict.fromkeys(CRITERIA, 0.4), n_layers, {})
    halves = []
    for _ in range(2):
        scores = (truth + rng.normal(scale=0.1, size=truth.shape)).reshape(-1, len(SCORE_COLUMNS))
        halves.append(type_heads(pd.DataFrame({**keys, **dict(zip(SCORE_COLUMNS, scores.T))}), thresholds))
    pairs = pd.DataFrame(
        [(SEEDS[a], SEEDS[b], layer, head, int(rng.integers(N_HEADS)))
         for a in range(4) for b in range(4) if a != b for layer in range(n_layers) for head in range(N_HEADS)],
        columns=["anchor_seed", "pair_seed", "layer", "head", "best_head"],
    )  # fmt: skip
    return noise_ceiling_table(*halves, pairs, SEEDS, n_boot=50, seed=0, confidence=0.95)


@pytest.mark.parametrize("n_layers", (2, 12))  # the fewest and the most layers: labels crowd as layers grow
def test_the_noise_ceiling_figure_draws_every_type_beside_head_stability(n_layers, tmp_path):
    drawn = plot_noise_ceiling(ceiling(n_layers), pooled(n_layers), tmp_path / "ceiling.png", f"l{n_layers}_h8_attn_wd")
    statistics = {statistic for lines in CEILING_LINES.values() for statistic, *_ in lines}
    assert set(drawn["type"]) == set(HEAD_TYPES) and set(drawn["statistic"]) == statistics
    assert len(drawn) == len(HEAD_TYPES) * len(statistics) * n_layers
    assert (tmp_path / "ceiling.png").stat().st_size > 0
