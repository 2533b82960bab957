"""headstab.plots.ablation: §4.8 figure: ablation importance vs head stability."""

import numpy as np
import pandas as pd

from headstab.plots.ablation import plot_ablation_correlation
from headstab.sections.ablation import ablation_correlation, ablation_table
from plots.conftest import N_HEADS, N_LAYERS


def test_ablation_correlation(tmp_path, assert_written):
    rng = np.random.default_rng(1)
    stability = rng.uniform(0.2, 1.0, (N_LAYERS, N_HEADS))
    heads = pd.DataFrame(
        [
            ("primary", "same_layer", 1, layer, h, stability[layer, h])
            for layer in range(N_LAYERS)
            for h in range(N_HEADS)
        ],
        columns=["promptset", "scope", "anchor_seed", "layer", "head", "stability"],
    )
    ppl = 20 + stability * (np.arange(N_LAYERS)[:, None] - 1.5) + rng.normal(0, 0.1, stability.shape)
    table = ablation_table(ppl, 20.0, heads, seed=1)
    per_layer, trend = ablation_correlation(table)
    data = plot_ablation_correlation(table, per_layer, trend, tmp_path / "ablation_correlation.png", "l4_h8")
    assert_written(tmp_path / "ablation_correlation.png")
    assert trend["slope"] > 0 and "trend_r" in data.columns
