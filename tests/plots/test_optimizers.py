"""headstab.plots.optimizers: §4.5 figures: Adam vs AdamW stability, activation norms and perplexity."""

from dataclasses import replace

import pandas as pd
import pytest

from headstab.plots.optimizers import plot_activation_norms, plot_optimizer_stability, plot_perplexity
from headstab.sections.optimizers import perplexity_comparison
from plots.conftest import N_LAYERS, SEEDS


def test_optimizer_stability(tmp_path, layer_stability, assert_written):
    data = plot_optimizer_stability(
        layer_stability(),
        layer_stability(offset=-0.1, seed=1),
        tmp_path / "optimizer_stability.png",
        "l4_h8",
        "l4_h8_wd",
        "primary",
    )
    assert_written(tmp_path / "optimizer_stability.png")
    assert set(data["optimizer"]) == {"Adam", "AdamW"} and len(data) == 2 * N_LAYERS


def test_activation_norms(tmp_path, assert_written):
    rows = [
        (o, s, layer, a, (10 if o == "Adam" else 6) * (1 + layer) * (1.5 if a == "resid_mid" else 1) + s * 0.1)
        for o in ("Adam", "AdamW")
        for s in SEEDS
        for layer in range(N_LAYERS)
        for a in ("attn_out", "resid_mid")
    ]
    norms = pd.DataFrame(rows, columns=["optimizer", "seed", "layer", "activation", "mean_norm"])
    data = plot_activation_norms(norms, tmp_path / "activation_norms.png", "l4_h8", "l4_h8_wd")
    assert_written(tmp_path / "activation_norms.png")
    assert (data["n_refits"] == len(SEEDS)).all()


def test_perplexity(tmp_path, assert_written):
    ppl = pd.DataFrame(
        {
            "optimizer": ["Adam"] * 4 + ["AdamW"] * 4,
            "seed": list(SEEDS) * 2,
            "perplexity": [30.1, 29.5, 30.8, 30.2, 30.5, 31.0, 29.9, 30.4],
        }
    )
    comparison = perplexity_comparison(ppl.perplexity[:4], ppl.perplexity[4:])
    data = plot_perplexity(ppl, comparison, tmp_path / "perplexity.png", "l4_h8", "l4_h8_wd")
    assert_written(tmp_path / "perplexity.png")
    assert data.set_index("optimizer").loc["Adam", "mean"] == pytest.approx(30.15)


def test_the_perplexity_title_calls_both_p_values_difference_tests_and_marks_a_descriptive_one(tmp_path, monkeypatch):
    from headstab.statistics import calibration

    titles = []
    monkeypatch.setattr("matplotlib.axes.Axes.set_title", lambda ax, text, **kw: titles.append(text))
    ppl = pd.DataFrame(
        {"optimizer": ["Adam"] * 4 + ["AdamW"] * 4, "seed": list(SEEDS) * 2,
         "perplexity": [30.1, 29.5, 30.8, 30.2, 30.5, 31.0, 29.9, 30.4]}
    )  # fmt: skip
    comparison = perplexity_comparison(ppl.perplexity[:4], ppl.perplexity[4:], permutations=100, seed=0)
    plot_perplexity(ppl, comparison, tmp_path / "calibrated.png", "l4_h8", "l4_h8_wd")
    welch = calibration.METHODS["welch_t_perplexity"]
    monkeypatch.setitem(calibration.METHODS, "welch_t_perplexity", replace(welch, min_n=50))
    plot_perplexity(ppl, comparison, tmp_path / "descriptive.png", "l4_h8", "l4_h8_wd")
    calibrated, descriptive = titles
    assert "parity" not in calibrated.split("\n")[0] and "parity is the TOST of optimizer_tests.csv" in calibrated
    assert "descriptive" not in calibrated  # both tests hold their size from 4 refits per optimizer
    assert f"p = {comparison['welch_p']:.3g} (descriptive at 4 refits)" in descriptive.split("\n")[1]
    assert f"Brunner-Munzel p = {comparison['brunner_munzel_p']:.3g}\n" in descriptive
