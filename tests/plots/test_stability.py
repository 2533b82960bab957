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
    plot_commonness,
    plot_cross_layer_stability,
    plot_head_stability,
    plot_layer_stability,
    plot_pair_stability,
)
from headstab.stability import (
    alignment_dispersion_table,
    alignment_map_table,
    commonness_table,
    head_stability_table,
    layer_stability_table,
    pair_stability_table,
)

SEEDS = [9, 3, 5]  # deliberately unsorted: "first seed" means first as given, not smallest
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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
    pairs = pair_stability_table(similarity, SEEDS, "primary")
    heads = head_stability_table(pairs)
    alignment = alignment_map_table(pairs)
    return {
        "pairs": pairs,
        "heads": heads,
        "layers": layer_stability_table(heads),
        "alignment": alignment,
        "dispersion": alignment_dispersion_table(alignment),
        "commonness": commonness_table(similarity, SEEDS, "primary"),
    }


def assert_png(path) -> None:
    data = path.read_bytes()
    assert len(data) > 5000 and data.startswith(PNG_MAGIC)


def test_head_stability_heatmap_holds_first_anchor_table(tables, tmp_path):
    path = tmp_path / "figures" / "head_stability.png"
    matrix = plot_head_stability(tables["heads"], path, "l3_h4")
    assert_png(path)
    heads = tables["heads"]
    rows = heads[(heads["scope"] == "same_layer") & (heads["anchor_seed"] == 9)]
    assert matrix.shape == (4, 3)
    for row in rows.itertuples():
        assert matrix.loc[row.head, row.layer] == row.stability


def test_layer_stability_line_and_band_across_anchors(tables, tmp_path):
    path = tmp_path / "layer_stability.png"
    data = plot_layer_stability(tables["layers"], path, "l3_h4")
    assert_png(path)
    layers = tables["layers"][tables["layers"]["scope"] == "same_layer"]
    first = layers[layers["anchor_seed"] == 9].sort_values("layer")
    np.testing.assert_array_equal(data["mean"], first["mean"])
    np.testing.assert_array_equal(data["std"], first["std"])
    np.testing.assert_allclose(data["anchors_mean"], layers.groupby("layer")["mean"].mean())


def test_pair_stability_panels_hold_similarities_of_first_anchor(tables, tmp_path):
    path = tmp_path / "pair_stability.png"
    data = plot_pair_stability(tables["pairs"], path, "l3_h4")
    assert_png(path)
    assert list(data.columns) == [3, 5]  # pair refits in the order given
    pairs = tables["pairs"]
    rows = pairs[(pairs["scope"] == "same_layer") & (pairs["anchor_seed"] == 9)]
    for row in rows.itertuples():
        assert data.loc[(row.layer, row.head), row.pair_seed] == pytest.approx(row.similarity)


def test_cross_layer_figure_holds_cross_layer_head_stability(tables, tmp_path):
    path = tmp_path / "cross_layer_stability.png"
    matrix = plot_cross_layer_stability(tables["heads"], tables["layers"], path, "l3_h4")
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
    matrix = plot_alignment_map(tables["alignment"], path, "l3_h4")
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
    plot_alignment_map(alignment, path, f"l{n_layers}_h4", dispersion_table=dispersion)
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
        plot_alignment_map(tables["alignment"], tmp_path / "x.png", "l3_h4", dispersion_table=other)


def test_commonness_heatmap_holds_first_seed(tables, tmp_path):
    path = tmp_path / "commonness.png"
    matrix = plot_commonness(tables["commonness"], path, "l3_h4")
    assert_png(path)
    rows = tables["commonness"][tables["commonness"]["seed"] == 9]
    for row in rows.itertuples():
        assert matrix.loc[row.head, row.layer] == row.commonness


def test_unknown_prompt_set_fails_listing_available(tables, tmp_path):
    with pytest.raises(ValueError, match=r"promptset = 'len5'; available: \['primary'\]"):
        plot_head_stability(tables["heads"], tmp_path / "x.png", "l3_h4", promptset="len5")
