"""headstab.plots.weight_norms: §4.4.1 figure: weight norms vs layer stability."""

import numpy as np
import pandas as pd

from headstab.plots.weight_norms import plot_weight_norm_correlation
from headstab.sections.weight_norms import norm_stability_correlation
from plots.conftest import N_LAYERS, SEEDS


def test_weight_norm_correlation(tmp_path, layer_stability, assert_written):
    rng = np.random.default_rng(0)
    norms = pd.DataFrame(
        [
            (s, layer, m, 2.0 + layer + rng.normal(0, 0.2))
            for s in SEEDS
            for layer in range(N_LAYERS)
            for m in ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "ln1_w", "ln2_w")
        ],
        columns=["seed", "layer", "matrix", "frobenius_norm"],
    ).assign(whole_layer_norm=lambda frame: frame["frobenius_norm"] * 2)
    stab = layer_stability()
    corr = norm_stability_correlation(norms, stab, "primary")
    data = plot_weight_norm_correlation(norms, stab, corr, tmp_path / "weight_norm_correlation.png", "l4_h8", "primary")
    assert_written(tmp_path / "weight_norm_correlation.png")
    assert len(data) == len(SEEDS) * N_LAYERS  # one point per refit and layer
