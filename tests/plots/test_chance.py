"""headstab.plots.chance: stability against chance across architectures, and the seeds-needed curve."""

import numpy as np
import pandas as pd
import pytest

from headstab.plots.chance import plot_seeds_needed, plot_stability_against_chance
from headstab.statistics.seeds_needed import seeds_needed


def pooled(arch, n_layers, init=True):
    """layer_stability_pooled rows of both scopes: stability with a null well below it and a step-0 line above."""
    layer = np.arange(n_layers)
    centres = {
        "stability": 0.8 - 0.05 * layer,
        "null": np.full(n_layers, 0.5),
        "init": np.full(n_layers, 0.9 if init else np.nan),
    }
    rows = pd.DataFrame({"promptset": "primary", "scope": "same_layer", "layer": layer, "n_refits": 4, **centres})
    for name, prefix in (("stability", ""), ("null", "null_"), ("init", "init_")):
        rows[f"{prefix}ci_low"], rows[f"{prefix}ci_high"] = rows[name] - 0.02, rows[name] + 0.02
    return pd.concat([rows, rows.assign(scope="cross_layer")]).assign(architecture=arch)


def test_one_panel_per_architecture_with_the_same_layer_rows_and_only_finite_bands(tmp_path, assert_written):
    summary = pd.concat([pooled("a", 2), pooled("b", 4, init=False)], ignore_index=True)
    drawn = plot_stability_against_chance(summary, tmp_path / "chance.png", "primary")
    assert_written(tmp_path / "chance.png")
    assert len(drawn) == 6 and set(drawn["scope"]) == {"same_layer"}
    with pytest.raises(ValueError, match="no same_layer rows for prompt set 'len5'"):
        plot_stability_against_chance(summary, tmp_path / "x.png", "len5")


def test_seeds_needed_figure_names_the_largest_need(tmp_path, assert_written, monkeypatch):
    curve = pd.DataFrame(
        {"statistic": ["layer_stability"] * 2 + ["delta_s"] * 2, "layer": [0, 0, -1, -1], "n_refits": [3, 4, 3, 4],
         "ci_width": [0.03, 0.02, 0.05, 0.04], "ci_width_sd": 0.001, "n_subsets": 5, "n_boot": 100}
    )  # fmt: skip
    needed = seeds_needed(curve, 0.01)
    titles = []
    monkeypatch.setattr("matplotlib.axes.Axes.set_title", lambda ax, text, **kw: titles.append(text))
    drawn = plot_seeds_needed(curve, needed, tmp_path / "seeds.png", "l2_h8")
    assert_written(tmp_path / "seeds.png")
    assert drawn is curve
    assert titles == ["l2_h8: refits needed for width ≤ 0.01: 64 (extrapolated)"]  # 4 x (0.04 / 0.01)^2


def test_the_interval_level_and_its_calibration_label_are_the_tables_not_a_fixed_95(tmp_path, monkeypatch):
    texts = []
    for name in ("set_title", "set_ylabel"):
        monkeypatch.setattr(f"matplotlib.axes.Axes.{name}", lambda ax, text, **kw: texts.append(text))
    monkeypatch.setattr("matplotlib.figure.Figure.suptitle", lambda fig, text, **kw: texts.append(text))
    labels = []
    monkeypatch.setattr(
        "matplotlib.axes.Axes.legend", lambda ax, *a, **kw: labels.extend(ax.get_legend_handles_labels()[1])
    )
    summary = pooled("a", 2).assign(ci_calibration="descriptive")
    plot_stability_against_chance(summary, tmp_path / "chance.png", "primary", confidence=0.9)
    assert "a (4 refits, interval descriptive)" in texts and "trained (90% CI)" in labels
    assert any("multi-bootstrap 90% intervals" in text for text in texts) and not any("95%" in t for t in texts)
    curve = pd.DataFrame({"statistic": "layer_stability", "layer": 0, "n_refits": [3, 4], "ci_width": [0.03, 0.02],
                          "ci_width_sd": 0.001, "n_subsets": 5, "n_boot": 100})  # fmt: skip
    plot_seeds_needed(curve, seeds_needed(curve, 0.01), tmp_path / "seeds.png", "a", confidence=0.8)
    assert "80% interval width" in texts
