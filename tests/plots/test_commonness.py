"""headstab.plots.commonness: Fig. 4 draws what the commonness table holds, and the above-null panel draws
the layer means over seeds with and without the head's match with itself."""

from __future__ import annotations

import numpy as np
import pytest

from headstab.plots.commonness import ABOVE_NULL_LINES, plot_commonness
from plots.test_stability import SEEDS, assert_png, tables  # noqa: F401  (the module fixture)


def test_commonness_heatmap_holds_first_seed(tables, tmp_path):  # noqa: F811
    path = tmp_path / "commonness.png"
    drawn = plot_commonness(tables["commonness"], path, "l3_h4", "primary")
    assert_png(path)
    rows = tables["commonness"][tables["commonness"]["seed"] == SEEDS[0]]
    for row in rows.itertuples():
        assert drawn["matrix"].loc[row.head, row.layer] == row.commonness
    assert drawn["above_null"].empty  # stability_tables alone has no null columns: two panels


def test_above_null_panel_draws_each_layers_mean_over_seeds(tables, tmp_path):  # noqa: F811
    common = tables["commonness"].copy()
    # seed s, layer l, head h: above null = s + 10 l + h / 4 with self, a tenth of it without
    value = common["seed"] + 10 * common["layer"] + common["head"] / 4
    common["commonness_above_null"] = value
    common["commonness_excl_self_above_null"] = value / 10
    drawn = plot_commonness(common, tmp_path / "c.png", "l3_h4", "primary")
    expected = np.mean(SEEDS) + 10 * np.arange(3) + np.mean(np.arange(4)) / 4
    np.testing.assert_allclose(drawn["above_null"]["commonness_above_null"], expected)
    np.testing.assert_allclose(drawn["above_null"]["commonness_excl_self_above_null"], expected / 10)
    assert [name for name, _, _ in ABOVE_NULL_LINES] == list(drawn["above_null"].columns)


def test_commonness_of_another_prompt_set_fails_listing_available(tables, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match=r"promptset = 'len5'; available: \['primary'\]"):
        plot_commonness(tables["commonness"], tmp_path / "x.png", "l3_h4", promptset="len5")
