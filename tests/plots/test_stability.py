"""headstab.plots.stability: each §4.1-4.3 figure is written and draws what the table holds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text

import headstab.plots.stability as stability_plots
from headstab.plots import DPI
from headstab.plots.stability import (
    plot_alignment_map,
    plot_cross_layer_stability,
    plot_head_stability,
    plot_layer_stability,
    plot_pair_stability,
)
from headstab.stability import alignment_dispersion_table, alignment_map_table, pair_stability_table, stability_tables

SEEDS = [9, 3, 5]  # deliberately unsorted: "first seed" means first as given, not smallest
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# The plot functions' argument names for stability_tables' tables.
FIGURE_TABLE_NAMES = {
    "pair_stability": "pairs",
    "head_stability": "heads",
    "layer_stability": "layers",
    "alignment_map": "alignment",
    "alignment_dispersion": "dispersion",
    "commonness": "commonness",
}


def figure_tables(similarity: np.ndarray, seeds: list[int]) -> dict[str, pd.DataFrame]:
    """stability_tables of the primary prompt set, keyed as the plot functions name them."""
    return {FIGURE_TABLE_NAMES[name]: table for name, table in stability_tables(similarity, seeds, "primary").items()}


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(0)
    n_layers, n_heads = 3, 4
    similarity = rng.uniform(0.2, 0.9, size=(3, 3, n_layers, n_heads, n_layers, n_heads)).astype(np.float32)
    similarity = (similarity + similarity.transpose(1, 0, 4, 5, 2, 3)) / 2  # S[a, b] = S[b, a]^T
    for a in range(3):
        for layer in range(n_layers):
            for head in range(n_heads):
                similarity[a, a, layer, head, layer, head] = 1.0
    return figure_tables(similarity, SEEDS)


def assert_png(path) -> None:
    data = path.read_bytes()
    assert len(data) > 5000 and data.startswith(PNG_MAGIC)


def test_head_stability_heatmap_holds_first_anchor_table(tables, tmp_path):
    path = tmp_path / "figures" / "head_stability.png"
    matrix = plot_head_stability(tables["heads"], path, "l3_h4", "primary")
    assert_png(path)
    heads = tables["heads"]
    rows = heads[(heads["scope"] == "same_layer") & (heads["anchor_seed"] == 9)]
    assert matrix.shape == (4, 3)
    for row in rows.itertuples():
        assert matrix.loc[row.head, row.layer] == row.stability


def test_layer_stability_line_and_band_across_anchors(tables, tmp_path):
    path = tmp_path / "layer_stability.png"
    data = plot_layer_stability(tables["layers"], path, "l3_h4", "primary")
    assert_png(path)
    layers = tables["layers"][tables["layers"]["scope"] == "same_layer"]
    first = layers[layers["anchor_seed"] == 9].sort_values("layer")
    np.testing.assert_array_equal(data["mean"], first["mean"])
    np.testing.assert_array_equal(data["std"], first["std"])
    np.testing.assert_allclose(data["anchors_mean"], layers.groupby("layer")["mean"].mean())


def with_chance_columns(layers: pd.DataFrame) -> pd.DataFrame:
    """The layer table as stability_tables writes it: interval, null and step-0 columns (NaN cross-layer)."""
    same = layers["scope"] == "same_layer"
    null = (0.1 + 0.01 * layers["layer"]).where(same)
    return layers.assign(
        ci_low=layers["mean"] - 0.03 - 0.01 * layers["layer"],
        ci_high=layers["mean"] + 0.02,
        n_boot=200,
        resampled=np.where(same, "refits+prompts", "refits"),
        null=null,
        null_ci_low=null - 0.02,
        null_ci_high=null + 0.04,
        above_null=layers["mean"] - null,
        init=(null + 0.05).where(same),
    )


def legend_texts(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def test_layer_stability_draws_interval_null_band_and_step_zero(tables, tmp_path, monkeypatch):
    layers = with_chance_columns(tables["layers"])
    figures = captured_figures(monkeypatch)
    data = plot_layer_stability(layers, tmp_path / "layer_stability.png", "l3_h4", "primary")
    assert_png(tmp_path / "layer_stability.png")
    first = layers[(layers["scope"] == "same_layer") & (layers["anchor_seed"] == 9)].sort_values("layer")
    for column in ("ci_low", "ci_high", "null", "null_ci_low", "null_ci_high", "init"):
        np.testing.assert_array_equal(data[column], first[column])
    (ax,) = figures[0].axes
    (bars,) = ax.containers  # one set of error bars: the first anchor's interval
    segments = bars.lines[2][0].get_segments()
    np.testing.assert_allclose([s[:, 1].min() for s in segments], first["ci_low"])
    np.testing.assert_allclose([s[:, 1].max() for s in segments], first["ci_high"])
    np.testing.assert_allclose([s[0, 0] for s in segments], [1, 2, 3])
    labels = legend_texts(ax)
    assert "prompt-permutation null (95% CI)" in labels and "step 0, untrained" in labels
    (band,) = [c for c in ax.collections if c.get_label() == "prompt-permutation null (95% CI)"]
    limits = band.get_paths()[0].vertices[:, 1]
    assert limits.min() == pytest.approx(first["null_ci_low"].min())
    assert limits.max() == pytest.approx(first["null_ci_high"].max())
    (dotted,) = [line for line in ax.lines if line.get_linestyle() == ":"]
    np.testing.assert_allclose(dotted.get_ydata(), first["init"])
    assert dotted.get_label() == "step 0, untrained"
    assert any(np.allclose(line.get_ydata(), first["null"]) for line in ax.lines)


def test_layer_stability_cross_layer_has_interval_but_no_null(tables, tmp_path, monkeypatch):
    figures = captured_figures(monkeypatch)
    layers = with_chance_columns(tables["layers"])
    data = plot_layer_stability(layers, tmp_path / "cross.png", "l3_h4", "primary", scope="cross_layer")
    assert data["null"].isna().all()
    (ax,) = figures[0].axes
    assert len(ax.containers) == 1  # the interval is drawn
    assert not any("null" in label or "step 0" in label for label in legend_texts(ax))
    assert not [line for line in ax.lines if line.get_linestyle() == ":"]


def test_layer_stability_of_an_old_table_draws_no_extras(tables, tmp_path, monkeypatch):
    figures = captured_figures(monkeypatch)
    data = plot_layer_stability(tables["layers"], tmp_path / "old.png", "l3_h4", "primary")
    assert list(data.columns) == ["layer", "mean", "std", "anchors_mean", "anchors_std"]
    (ax,) = figures[0].axes
    assert not ax.containers and len(ax.collections) == 2  # the two s.d. bands only
    assert len(legend_texts(ax)) == 3


def test_cross_layer_figure_draws_intervals_of_both_scopes_when_present(tables, tmp_path, monkeypatch):
    figures = captured_figures(monkeypatch)
    for layers in (tables["layers"], with_chance_columns(tables["layers"])):
        plot_cross_layer_stability(tables["heads"], layers, tmp_path / "cross_layer.png", "l3_h4", "primary")
    old, new = (figure.axes[1] for figure in figures)  # the line panel (axes[2] is the colorbar)
    assert len(old.containers) == 0 and len(new.containers) == 2
    assert "bootstrap CI" in new.get_title() and "CI" not in old.get_title()


def test_pair_stability_panels_hold_similarities_of_first_anchor(tables, tmp_path):
    path = tmp_path / "pair_stability.png"
    data = plot_pair_stability(tables["pairs"], path, "l3_h4", "primary")
    assert_png(path)
    assert list(data.columns) == [3, 5]  # pair refits in the order given
    pairs = tables["pairs"]
    rows = pairs[(pairs["scope"] == "same_layer") & (pairs["anchor_seed"] == 9)]
    for row in rows.itertuples():
        assert data.loc[(row.layer, row.head), row.pair_seed] == pytest.approx(row.similarity)


def test_cross_layer_figure_holds_cross_layer_head_stability(tables, tmp_path):
    path = tmp_path / "cross_layer_stability.png"
    matrix = plot_cross_layer_stability(tables["heads"], tables["layers"], path, "l3_h4", "primary")
    assert_png(path)
    heads = tables["heads"]
    rows = heads[(heads["scope"] == "cross_layer") & (heads["anchor_seed"] == 9)]
    expected = rows.pivot(index="head", columns="layer", values="stability")
    pd.testing.assert_frame_equal(matrix, expected, check_names=False)


def captured_figures(monkeypatch) -> list[Figure]:
    """Figures the plot module saves, kept after saving so a test can inspect what was drawn."""
    figures: list[Figure] = []
    original = stability_plots.save_figure

    def save_and_keep(figure: Figure, path) -> None:
        original(figure, path)
        figures.append(figure)

    monkeypatch.setattr(stability_plots, "save_figure", save_and_keep)
    return figures


def overlapping_texts(figure: Figure) -> list[tuple[str, str]]:
    """Pairs of visible, non-empty texts of the saved figure whose boxes overlap (in display pixels)."""
    # Redraw at the saved resolution: savefig restores the screen dpi, leaving label positions stale.
    figure.set_dpi(DPI)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    texts = [text for text in figure.findobj(Text) if text.get_visible() and text.get_text().strip()]
    boxes = [(text.get_text(), text.get_window_extent(renderer)) for text in texts]
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1 :] if box_a.overlaps(box_b)]


def test_alignment_map_rows_sum_to_one(tables, tmp_path):
    path = tmp_path / "alignment_map.png"
    matrix = plot_alignment_map(tables["alignment"], path, "l3_h4", "primary")
    assert_png(path)
    assert matrix.shape == (3, 3)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0)
    alignment = tables["alignment"]
    for row in alignment[alignment["anchor_seed"] == 9].itertuples():
        assert matrix.loc[row.layer, row.match_layer] == row.fraction


@pytest.mark.parametrize("n_layers", [2, 4, 8])
def test_alignment_map_annotates_rows_with_share_and_entropy_without_overlap(n_layers, tmp_path, monkeypatch):
    rng = np.random.default_rng(n_layers)
    similarity = rng.uniform(0.2, 0.9, size=(3, 3, n_layers, 4, n_layers, 4)).astype(np.float32)
    similarity[:, :, 0, :, 0, :] = 0.95  # layer 1 matches itself: share 1, entropy 0, kurtosis NaN
    alignment = alignment_map_table(pair_stability_table(similarity, SEEDS, "primary"))
    dispersion = alignment_dispersion_table(alignment)
    figures = captured_figures(monkeypatch)
    path = tmp_path / "alignment_map.png"
    plot_alignment_map(alignment, path, f"l{n_layers}_h4", "primary", dispersion_table=dispersion)
    assert_png(path)
    (figure,) = figures
    map_ax, side_ax = figure.axes[:2]
    assert [label.get_text() for label in side_ax.get_xticklabels()] == ["diagonal\nshare", "norm.\nentropy"]
    first = dispersion[dispersion["anchor_seed"] == 9].sort_values("layer")
    # Row by row, left to right: diagonal share then normalized entropy, as the heatmap annotates.
    expected = [f"{value:.2f}" for value in first[["diagonal_share", "normalized_entropy"]].to_numpy().ravel()]
    assert [text.get_text() for text in side_ax.texts] == expected
    assert expected[:2] == ["1.00", "0.00"]
    assert not any("kurtosis" in text.get_text() for text in figure.findobj(Text))
    assert overlapping_texts(figure) == []


def test_alignment_map_dispersion_of_another_prompt_set_fails_clearly(tables, tmp_path):
    other = tables["dispersion"].assign(promptset="len5")
    with pytest.raises(ValueError, match="alignment_dispersion table has no rows with promptset = 'primary'"):
        plot_alignment_map(tables["alignment"], tmp_path / "x.png", "l3_h4", "primary", dispersion_table=other)


def test_unknown_prompt_set_fails_listing_available(tables, tmp_path):
    with pytest.raises(ValueError, match=r"promptset = 'len5'; available: \['primary'\]"):
        plot_head_stability(tables["heads"], tmp_path / "x.png", "l3_h4", promptset="len5")


def test_cross_layer_figure_draws_each_scopes_null_as_a_band_where_the_table_holds_it(tables, tmp_path, monkeypatch):
    figures = captured_figures(monkeypatch)
    layers = with_chance_columns(tables["layers"])
    plot_cross_layer_stability(tables["heads"], layers, tmp_path / "same_null.png", "l3_h4", "primary")
    null = 0.2 + 0.01 * layers["layer"]
    cross = layers.assign(null=null, null_ci_low=null - 0.01, null_ci_high=null + 0.01)
    plot_cross_layer_stability(tables["heads"], cross, tmp_path / "both_nulls.png", "l3_h4", "primary")
    same_only, both = (figure.axes[1] for figure in figures)
    labels = lambda ax: [text for text in legend_texts(ax) if "null" in text]  # noqa: E731
    assert labels(same_only) == ["same-layer null (prompt permutation)"]
    assert labels(both) == ["same-layer null (prompt permutation)", "cross-layer null (prompt permutation)"]


def test_alignment_map_adds_the_nulls_share_and_entropy_where_the_table_holds_them(tables, tmp_path, monkeypatch):
    figures = captured_figures(monkeypatch)
    dispersion = tables["dispersion"].assign(diagonal_share_null=0.25, normalized_entropy_null=0.75)
    plot_alignment_map(tables["alignment"], tmp_path / "null.png", "l3_h4", "primary", dispersion_table=dispersion)
    plot_alignment_map(
        tables["alignment"],
        tmp_path / "nan.png",
        "l3_h4",
        "primary",
        dispersion_table=dispersion.assign(diagonal_share_null=np.nan),
    )
    with_null, without_share = (figure.axes[1] for figure in figures)
    labels = lambda ax: [label.get_text() for label in ax.get_xticklabels()]  # noqa: E731
    assert labels(with_null) == ["diagonal\nshare", "norm.\nentropy", "null\nshare", "null\nentropy"]
    assert [text.get_text() for text in with_null.texts][2:4] == ["0.25", "0.75"]
    assert labels(without_share) == ["diagonal\nshare", "norm.\nentropy", "null\nentropy"]
    assert overlapping_texts(figures[0]) == []
