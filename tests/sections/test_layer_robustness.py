"""headstab.sections.layer_robustness: drop/swap tables beside layer stability (issue 14 part 3)."""

import math

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol

from headstab.sections.layer_robustness import (
    drop_swap_table,
    extreme_depths,
    robustness_by_layer,
    robustness_correlation,
    robustness_with_stability,
)

N_LAYERS = 4


def _counts(n=100):
    plan = [("drop", layer) for layer in range(N_LAYERS)] + [("swap", layer) for layer in range(N_LAYERS - 1)]
    return {
        "n_predictions": n,
        "intact_loss": n * math.log(10.0),
        "conditions": plan,
        "loss": np.array([n * math.log(10.0 + i) for i in range(len(plan))]),
        "agree": np.array([n - 10 * i for i in range(len(plan))]),
        "kl": np.array([n * 0.5 * i for i in range(len(plan))]),
    }


def _stability(seeds):
    """Layer stability falling with depth and differing by refit."""
    return pd.DataFrame(
        [(s, layer, 0.9 - 0.1 * layer + 0.01 * s) for s in seeds for layer in range(N_LAYERS)],
        columns=["anchor_seed", "layer", "mean"],
    )


def test_table_has_perplexities_and_agreement_per_condition():
    table = drop_swap_table(_counts(), seed=7)
    assert table["ppl_intact"].tolist() == pytest.approx([10.0] * 7)
    assert table["ppl"].tolist() == pytest.approx([10.0 + i for i in range(7)])
    assert table["delta_ppl"].tolist() == pytest.approx(list(range(7)))
    assert table["top1_agreement"].tolist() == pytest.approx([1 - 0.1 * i for i in range(7)])
    assert set(table["seed"]) == {7}


def test_kl_divergence_is_the_mean_over_predictions_and_a_measure_of_every_table():
    table = drop_swap_table(_counts(), seed=7)
    assert table["kl_divergence"].tolist() == pytest.approx([0.5 * i for i in range(7)])
    table = robustness_with_stability(table, _stability([7]))
    by_layer = robustness_by_layer(table, N_LAYERS, n_boot=20, seed=0, confidence=0.95)
    kl = by_layer[by_layer["metric"] == "kl_divergence"]
    assert kl["mean"].tolist() == pytest.approx([0.5 * i for i in range(7)])
    correlation = robustness_correlation(table, n_boot=20, seed=0, confidence=0.95)
    assert (correlation["metric"] == "kl_divergence").sum() == 2 * 2  # per condition: the refit, across refits


def test_a_swap_sits_beside_the_mean_stability_of_its_two_layers():
    table = robustness_with_stability(drop_swap_table(_counts(), seed=1), _stability([1]))
    swaps = table[table["condition"] == "swap"].sort_values("layer")
    expected = [(0.91 - 0.1 * layer + 0.91 - 0.1 * (layer + 1)) / 2 for layer in range(N_LAYERS - 1)]
    assert swaps["stability"].tolist() == pytest.approx(expected)
    drops = table[table["condition"] == "drop"].sort_values("layer")
    assert drops["stability"].tolist() == pytest.approx([0.91 - 0.1 * layer for layer in range(N_LAYERS)])


def test_a_refit_without_layer_stability_is_refused():
    with pytest.raises(ValueError, match=r"no anchor_seed \[2\]"):
        robustness_with_stability(drop_swap_table(_counts(), seed=2), _stability([1]))


def _table(seeds=(1, 2, 3)):
    """Agreement exactly 1 - stability: r = -1 within and across refits."""
    table = pd.concat([drop_swap_table(_counts(), seed=s) for s in seeds], ignore_index=True)
    table = robustness_with_stability(table, _stability(seeds))
    return table.assign(top1_agreement=1.0 - table["stability"])


def test_agreement_tied_to_stability_correlates_at_minus_one():
    correlation = robustness_correlation(_table(), n_boot=100, seed=0, confidence=0.95)
    rows = correlation[(correlation["metric"] == "top1_agreement") & (correlation["condition"] == "drop")]
    assert len(rows) == 3 + 1  # each refit, then across refits
    values = rows[["pearson_r"]].to_numpy()
    np.testing.assert_allclose(values, -1.0, atol=reduction_atol(np.float64, 12))
    across = rows[rows["scope"] == "across_refits"]
    np.testing.assert_allclose(across[["ci_low", "ci_high"]].to_numpy(), -1.0, atol=reduction_atol(np.float64, 12))


def test_mean_over_refits_and_relative_depth():
    by_layer = robustness_by_layer(_table(), N_LAYERS, n_boot=100, seed=0, confidence=0.95)
    drop0 = by_layer[
        (by_layer["condition"] == "drop") & (by_layer["layer"] == 0) & (by_layer["metric"] == "top1_agreement")
    ]
    assert drop0["mean"].item() == pytest.approx(1 - (0.91 + 0.92 + 0.93) / 3)
    assert drop0["relative_depth"].item() == 0.25
    assert drop0["ci_low"].item() <= drop0["mean"].item() <= drop0["ci_high"].item()


def test_extreme_depths_name_the_layers_as_l_over_L():
    by_layer = robustness_by_layer(_table(), N_LAYERS, n_boot=50, seed=0, confidence=0.95)
    pooled = pd.DataFrame({"layer": range(N_LAYERS), "stability": [0.5, 0.9, 0.7, 0.6]})
    depths = extreme_depths(by_layer, pooled, N_LAYERS)
    # agreement = 1 - stability rises with depth: the last layer is the most robust, the first the least
    assert depths == {"r_most_robust": 1.0, "r_least_robust": 0.25, "r_most_stable": 0.5, "r_least_stable": 0.25}


def test_counts_whose_lists_disagree_in_length_are_refused():
    counts = _counts()
    counts["loss"] = counts["loss"][:-1]
    with pytest.raises(ValueError, match="shorter"):
        drop_swap_table(counts, seed=1)


def test_whole_number_stabilities_still_average_for_a_swap():
    # A CSV column of whole numbers is read as int64; a swap of a layer at 1 and one at 0 sits at 0.5.
    stability = pd.DataFrame({"anchor_seed": 1, "layer": range(N_LAYERS), "mean": [1, 0, 1, 0]})
    table = robustness_with_stability(drop_swap_table(_counts(), seed=1), stability)
    assert table.loc[table["condition"] == "swap", "stability"].tolist() == [0.5, 0.5, 0.5]


def test_by_layer_rows_by_hand_whatever_the_row_order():
    table = _table()
    by_layer = robustness_by_layer(table, N_LAYERS, n_boot=50, seed=4, confidence=0.95)
    shuffled = robustness_by_layer(table.sample(frac=1.0, random_state=2), N_LAYERS, n_boot=50, seed=4, confidence=0.95)
    pd.testing.assert_frame_equal(shuffled, by_layer)
    expected_keys = [(c, layer) for c in ("drop", "swap") for layer in range(N_LAYERS if c == "drop" else N_LAYERS - 1)]
    assert list(zip(by_layer["condition"], by_layer["layer"]))[::3] == expected_keys
    for row in by_layer.itertuples():
        group = table[(table["condition"] == row.condition) & (table["layer"] == row.layer)]
        assert row.stability == pytest.approx(group["stability"].mean(), abs=reduction_atol(np.float64, 3))
        assert row.n_refits == 3


def test_by_layer_draws_depend_on_the_seed_alone():
    table = _table()
    table = table.assign(delta_ppl=table["delta_ppl"] + np.random.default_rng(0).uniform(0, 1, len(table)))
    first = robustness_by_layer(table, N_LAYERS, n_boot=30, seed=5, confidence=0.9)
    pd.testing.assert_frame_equal(robustness_by_layer(table, N_LAYERS, n_boot=30, seed=5, confidence=0.9), first)
    other = robustness_by_layer(table, N_LAYERS, n_boot=30, seed=6, confidence=0.9)
    assert not np.array_equal(other["ci_low"], first["ci_low"])


def test_paper_and_grid_refit_names_together_are_accepted():
    # A paper refit is named by an int, a grid refit by "init-data": they sort together as text.
    table = _table(seeds=(1, 2)).replace({"seed": {2: "1-2"}})
    by_layer = robustness_by_layer(table, N_LAYERS, n_boot=20, seed=0, confidence=0.95)
    assert (by_layer["n_refits"] == 2).all()
    correlation = robustness_correlation(table, n_boot=20, seed=0, confidence=0.95)
    assert set(correlation["seed"].dropna()) == {1, "1-2"}


def test_correlation_rows_by_hand_whatever_the_row_order():
    rng = np.random.default_rng(1)
    table = _table()
    table = table.assign(
        delta_ppl=rng.uniform(0, 1, len(table)),
        top1_agreement=rng.uniform(0, 1, len(table)),
        kl_divergence=rng.uniform(0, 1, len(table)),
    )
    correlation = robustness_correlation(table, n_boot=50, seed=2, confidence=0.95)
    shuffled = robustness_correlation(table.sample(frac=1.0, random_state=3), n_boot=50, seed=2, confidence=0.95)
    pd.testing.assert_frame_equal(shuffled, correlation)
    pd.testing.assert_frame_equal(robustness_correlation(table, n_boot=50, seed=2, confidence=0.95), correlation)
    assert correlation["condition"].tolist()[:4] == ["drop"] * 4 and correlation["condition"].iloc[-1] == "swap"
    assert correlation["seed"].tolist()[:3] == [1, 2, 3] and pd.isna(correlation["seed"].iloc[3])
    for row in correlation.itertuples():
        part = table[table["condition"] == row.condition]
        if row.scope == "within_refit":
            part = part[part["seed"] == row.seed]
            assert np.isnan(row.ci_low) and np.isnan(row.ci_high)
        else:
            assert row.scope == "across_refits" and pd.isna(row.seed) and row.ci_low <= row.ci_high
        expected = np.corrcoef(part["stability"], part[row.metric])[0, 1]
        assert row.pearson_r == pytest.approx(expected, abs=reduction_atol(np.float64, len(part)))
        assert row.n_rows == len(part)


def test_object_columns_are_read_as_floats():
    table = _table().astype({"stability": object, "top1_agreement": object})
    numeric = robustness_correlation(_table(), n_boot=20, seed=0, confidence=0.95)
    pd.testing.assert_frame_equal(robustness_correlation(table, n_boot=20, seed=0, confidence=0.95), numeric)


def _by_layer_by_hand():
    """Drop top-1 agreement peaks at layer 0 and bottoms at layer 1; delta_ppl and the swaps peak elsewhere."""
    rows = [("drop", layer, "top1_agreement", m) for layer, m in enumerate([0.9, 0.5, 0.7])]
    rows += [("drop", layer, "delta_ppl", m) for layer, m in enumerate([5.0, 9.0, 0.1])]
    rows += [("swap", layer, "top1_agreement", m) for layer, m in enumerate([0.95, 0.1])]
    return pd.DataFrame(rows, columns=["condition", "layer", "metric", "mean"])


def test_extreme_depths_read_the_drop_agreement_rows_only():
    pooled = pd.DataFrame({"layer": range(3), "stability": [0.5, 0.9, 0.7]})
    depths = extreme_depths(_by_layer_by_hand(), pooled, 3)
    assert (depths["r_most_robust"], depths["r_least_robust"]) == (1 / 3, 2 / 3)


def test_extreme_depths_without_drop_rows_or_stability_are_refused():
    message = "^extreme depths need the drop rows of the robustness table and the pooled layer stability$"
    pooled = pd.DataFrame({"layer": range(3), "stability": [0.5, 0.9, 0.7]})
    by_layer = _by_layer_by_hand()
    with pytest.raises(ValueError, match=message):
        extreme_depths(by_layer[by_layer["condition"] == "swap"], pooled, 3)
    with pytest.raises(ValueError, match=message):
        extreme_depths(by_layer, pooled.iloc[:0], 3)


def test_every_interval_is_labelled_at_the_number_of_refits_and_a_within_refit_r_has_no_label():
    from headstab.statistics.calibration import calibration_label

    table = _table()  # 3 refits
    by_layer = robustness_by_layer(table, N_LAYERS, n_boot=20, seed=0, confidence=0.95)
    assert by_layer.columns[-1] == "calibration"
    assert (by_layer["calibration"] == calibration_label("refit_bootstrap_mean_layer_robustness", 3)).all()
    assert by_layer["calibration"].eq("descriptive").all()
    correlation = robustness_correlation(table, n_boot=20, seed=0, confidence=0.95)
    across = correlation["scope"] == "across_refits"
    assert (
        correlation.loc[across, "calibration"] == calibration_label("refit_bootstrap_pearson_layer_robustness", 3)
    ).all()
    assert correlation.loc[~across, "calibration"].isna().all()


def _min_n(monkeypatch, method, min_n):
    """Set `method`'s min_n in the registry the section reads."""
    from dataclasses import replace

    from headstab.statistics import calibration

    monkeypatch.setitem(calibration.METHODS, method, replace(calibration.METHODS[method], min_n=min_n))


def test_the_labels_are_taken_at_the_refits(monkeypatch):
    table = _table(seeds=(1, 2, 3, 4))
    for min_n, label in ((4, "calibrated"), (5, "descriptive")):
        _min_n(monkeypatch, "refit_bootstrap_mean_layer_robustness", min_n)
        _min_n(monkeypatch, "refit_bootstrap_pearson_layer_robustness", min_n)
        assert (robustness_by_layer(table, N_LAYERS, n_boot=10, seed=0, confidence=0.9)["calibration"] == label).all()
        correlation = robustness_correlation(table, n_boot=10, seed=0, confidence=0.9)
        assert (correlation.loc[correlation["scope"] == "across_refits", "calibration"] == label).all()
