"""Tests for headstab.plots.stability: each figure is written and draws what the table holds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headstab.plots.stability import (
    plot_alignment_map,
    plot_commonness,
    plot_cross_layer_stability,
    plot_head_stability,
    plot_layer_stability,
    plot_pair_stability,
)
from headstab.stability import (
    alignment_kurtosis_table,
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
        "kurtosis": alignment_kurtosis_table(alignment),
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


def test_alignment_map_rows_sum_to_one_with_kurtosis_column(tables, tmp_path):
    path = tmp_path / "alignment_map.png"
    matrix = plot_alignment_map(tables["alignment"], path, "l3_h4", kurtosis_table=tables["kurtosis"])
    assert_png(path)
    assert matrix.shape == (3, 3)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0)
    alignment = tables["alignment"]
    for row in alignment[alignment["anchor_seed"] == 9].itertuples():
        assert matrix.loc[row.layer, row.match_layer] == row.fraction
    plain = tmp_path / "alignment_map_plain.png"
    plot_alignment_map(tables["alignment"], plain, "l3_h4")
    assert_png(plain)


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
