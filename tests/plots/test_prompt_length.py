"""headstab.plots.prompt_length: §4.4.2 figure: layer stability by prompt length, observed beside the null."""

import numpy as np
import pandas as pd
import pytest

import headstab.plots.prompt_length as prompt_length_plots
from headstab.plots.prompt_length import plot_prompt_length

LENGTHS = (5, 10, 20, 30, 40, 50)


@pytest.fixture
def length_table(layer_stability):
    def make(chance):
        return pd.concat(
            [
                layer_stability(promptset=f"len{n}", offset=0.002 * n, chance=chance)[lambda d: d.anchor_seed == 1]
                for n in LENGTHS
            ]
        ).assign(prompt_length=lambda d: d.promptset.str[3:].astype(int))

    return make


@pytest.fixture
def figures(monkeypatch):
    """Figures the module saves, kept for inspection."""
    kept = []
    original = prompt_length_plots.save_figure

    def save_and_keep(figure, path):
        original(figure, path)
        kept.append(figure)

    monkeypatch.setattr(prompt_length_plots, "save_figure", save_and_keep)
    return kept


def test_prompt_length_without_chance_columns_is_one_panel(tmp_path, length_table, figures, assert_written):
    table = length_table(chance=False)
    data = plot_prompt_length(table, tmp_path / "prompt_length.png", "l4_h8")
    assert_written(tmp_path / "prompt_length.png")
    assert list(data.columns.unique(0)) == ["mean"]
    assert list(data["mean"].columns) == list(LENGTHS)  # one line per length
    (ax,) = figures[0].axes
    assert len(ax.lines) == len(LENGTHS) and not ax.collections  # lines, no bands
    np.testing.assert_allclose(ax.lines[0].get_ydata(), table[table.prompt_length == 5]["mean"])


def test_prompt_length_draws_observed_and_null_side_by_side(tmp_path, length_table, figures, assert_written):
    table = length_table(chance=True)
    data = plot_prompt_length(table, tmp_path / "prompt_length.png", "l4_h8")
    assert_written(tmp_path / "prompt_length.png")
    assert list(data.columns.unique(0)) == ["mean", "ci_low", "ci_high", "null", "null_ci_low", "null_ci_high"]
    observed, null = figures[0].axes
    assert observed.get_shared_y_axes().joined(observed, null)
    assert "observed" in observed.get_title() and "prompt-permutation null" in null.get_title()
    for ax, value, low, style in ((observed, "mean", "ci_low", "-"), (null, "null", "null_ci_low", "--")):
        assert len(ax.lines) == len(ax.collections) == len(LENGTHS)  # a line and a band per length
        for line, band, length in zip(ax.lines, ax.collections, LENGTHS):
            rows = table[table.prompt_length == length].sort_values("layer")
            assert line.get_linestyle() == style and line.get_label() == f"{length} words"
            np.testing.assert_allclose(line.get_ydata(), rows[value])
            assert band.get_paths()[0].vertices[:, 1].min() == pytest.approx(rows[low].min())
    assert [t.get_text() for t in null.get_legend().get_texts()] == [f"{n} words" for n in LENGTHS]
    np.testing.assert_allclose(data["null"][50], table[table.prompt_length == 50].sort_values("layer")["null"])


def test_prompt_length_with_all_nan_null_keeps_one_panel(tmp_path, length_table, figures):
    table = length_table(chance=True).assign(null=np.nan, null_ci_low=np.nan, null_ci_high=np.nan)
    data = plot_prompt_length(table, tmp_path / "prompt_length.png", "l4_h8")
    assert list(data.columns.unique(0)) == ["mean", "ci_low", "ci_high"]
    (ax,) = figures[0].axes
    assert len(ax.collections) == len(LENGTHS)  # the observed intervals
