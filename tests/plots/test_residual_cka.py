"""headstab.plots.residual_cka: §4.7 figure: residual-stream CKA vs head stability."""

import numpy as np
import pandas as pd
from helpers.tolerances import reduction_rtol

from headstab.plots.residual_cka import plot_residual_stream
from plots.conftest import N_LAYERS, SEEDS


def test_residual_stream(tmp_path, layer_stability, assert_written):
    rows = [(a, b, layer, 0.95 - 0.1 * layer) for a in SEEDS for b in SEEDS if a < b for layer in range(N_LAYERS)]
    cka = pd.DataFrame(rows, columns=["seed_a", "seed_b", "layer", "cka"]).assign(promptset="primary")
    data = plot_residual_stream(cka, layer_stability(), tmp_path / "residual_stream.png", "l4_h8", "primary")
    assert_written(tmp_path / "residual_stream.png")
    np.testing.assert_allclose(data["cka_mean"], 0.95 - 0.1 * np.arange(N_LAYERS), rtol=reduction_rtol(np.float64, 16))


def test_residual_stream_with_self_pairs_averages_all_ordered_pairs(tmp_path, layer_stability):
    rows = [(a, b, layer, 0.7) for a in SEEDS for b in SEEDS if a < b for layer in range(N_LAYERS)]
    cka = pd.DataFrame(rows, columns=["seed_a", "seed_b", "layer", "cka"]).assign(promptset="primary")
    data = plot_residual_stream(
        cka, layer_stability(), tmp_path / "r.png", "l4_h8", "primary", pairs="ordered_with_self"
    )
    n = len(SEEDS)
    np.testing.assert_allclose(data["cka_mean"], (n * (n - 1) * 0.7 + n) / n**2, rtol=reduction_rtol(np.float64, n**2))
    assert (data["n_pairs"] == n**2).all()


def test_residual_stream_labels_name_the_hook(tmp_path, monkeypatch, layer_stability):
    import headstab.plots.residual_cka as residual_cka

    saved = []
    monkeypatch.setattr(residual_cka, "save_figure", lambda figure, path: saved.append(figure))
    rows = [(a, b, layer, 0.9 - 0.1 * layer) for a in SEEDS for b in SEEDS if a < b for layer in range(N_LAYERS)]
    cka = pd.DataFrame(rows, columns=["seed_a", "seed_b", "layer", "cka"]).assign(promptset="primary")
    plot_residual_stream(cka, layer_stability(), tmp_path / "r.png", "l4_h8", "primary", hook="hook_resid_pre")
    line_ax, scatter_ax = saved[0].axes
    assert "hook_resid_pre" in scatter_ax.get_ylabel()
    assert any("hook_resid_pre" in text.get_text() for text in line_ax.get_legend().get_texts())


def test_residual_stream_draws_the_mean_cka_interval(tmp_path, layer_stability):
    from headstab.sections.residual_cka import layer_cka_table

    rng = np.random.default_rng(0)
    rows = [(a, b, layer, 0.6 + 0.1 * rng.random()) for a in SEEDS for b in SEEDS if a < b for layer in range(N_LAYERS)]
    cka = pd.DataFrame(rows, columns=["seed_a", "seed_b", "layer", "cka"]).assign(promptset="primary")
    layers = layer_cka_table(cka, "distinct", 200, 0, 0.95)
    data = plot_residual_stream(cka, layer_stability(), tmp_path / "r.png", "l4_h8", "primary", layer_intervals=layers)
    assert (data["ci_low"] <= data["cka_mean"]).all() and (data["cka_mean"] <= data["ci_high"]).all()
    np.testing.assert_allclose(data["ci_low"], layers["ci_low"])


def test_residual_stream_draws_the_step_0_chance_level_and_the_cka_without_bos(tmp_path, monkeypatch, layer_stability):
    import headstab.plots.residual_cka as residual_cka
    from headstab.sections.residual_cka import layer_cka_table

    saved = []
    monkeypatch.setattr(residual_cka, "save_figure", lambda figure, path: saved.append(figure))
    rows = [(a, b, layer, 0.9 - 0.1 * layer) for a in SEEDS for b in SEEDS if a < b for layer in range(N_LAYERS)]
    every = pd.DataFrame(rows, columns=["seed_a", "seed_b", "layer", "cka"]).assign(promptset="primary", init_cka=0.25)
    cka = pd.concat([every.assign(positions="all"), every.assign(positions="no_bos", cka=0.5)], ignore_index=True)
    layers = layer_cka_table(cka, "distinct", 50, 0, 0.95)
    data = plot_residual_stream(cka, layer_stability(), tmp_path / "r.png", "l4_h8", "primary", layer_intervals=layers)
    np.testing.assert_allclose(data["cka_mean"], 0.9 - 0.1 * np.arange(N_LAYERS), rtol=reduction_rtol(np.float64, 16))
    line_ax = saved[0].axes[0]
    lines = {line.get_label(): line.get_ydata() for line in line_ax.get_lines()}
    chance = next(label for label in lines if "step 0" in label)
    np.testing.assert_allclose(lines[chance], 0.25, rtol=reduction_rtol(np.float64, 16))
    np.testing.assert_allclose(lines["CKA without the BOS rows"], 0.5, rtol=reduction_rtol(np.float64, 16))
