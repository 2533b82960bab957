"""headstab.sections.ablation: §4.8 tables (anchor perplexities, ΔPPL beside stability, correlations)."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import torch
from helpers.bridges import tiny_bridge
from helpers.tolerances import reduction_atol, reduction_rtol

from headstab.evaluation import head_ablation_perplexities, perplexity
from headstab.sections.ablation import (
    CORRELATION_COLUMNS,
    PERPLEXITY_COLUMNS,
    ablated_grid,
    ablated_grids,
    ablation_correlation,
    ablation_correlation_intervals,
    ablation_perplexity_table,
    ablation_table,
    correlation_table,
    permutation_p,
)

PPL_RTOL = reduction_rtol(np.float32, 2 * (32 + 64) + 50) * math.log(50)


def _tiny_model():
    model = tiny_bridge(seed=1)
    model.eval()
    return model


def _stability(values):
    layers, heads = np.indices(np.shape(values))
    return pd.DataFrame(
        {
            "promptset": "primary",
            "scope": "same_layer",
            "anchor_seed": 7,
            "layer": layers.ravel(),
            "head": heads.ravel(),
            "stability": np.ravel(values),
            "n_pairs": 3,
        }
    )


def test_ablation_table_columns_and_delta():
    stab = pd.concat([_stability([[0.1, 0.2], [0.3, 0.4]]), _stability(np.zeros((2, 2))).assign(anchor_seed=8)])
    ppl = np.array([[11.0, 12.0], [10.0, 15.0]])
    table = ablation_table(ppl, 10.0, stab, seed=7, promptset="primary")
    assert list(table.columns) == ["seed", "layer", "head", "ppl_ablated", "delta_ppl", "stability"]
    assert table["delta_ppl"].tolist() == [1.0, 2.0, 0.0, 5.0]
    assert table["stability"].tolist() == [0.1, 0.2, 0.3, 0.4]
    with pytest.raises(ValueError, match="anchor_seed = 9"):
        ablation_table(ppl, 10.0, stab, seed=9)


def test_ablation_correlation_by_hand():
    stability = np.array([[0.1, 0.5, 0.9], [0.2, 0.4, 0.8], [0.3, 0.3, 0.3]])
    delta = np.array([2 * stability[0] + 1, -stability[1], [1.0, 2.0, 3.0]])
    table = ablation_table(delta + 10.0, 10.0, _stability(stability), seed=7)
    per_layer, trend = ablation_correlation(table)
    assert per_layer["pearson_r"].iloc[0] == pytest.approx(1.0)
    assert per_layer["pearson_r"].iloc[1] == pytest.approx(-1.0)
    assert math.isnan(per_layer["pearson_r"].iloc[2])  # constant stability: r undefined
    assert per_layer["n_heads"].tolist() == [3, 3, 3]
    # trend over the finite layers 0 and 1: r = 1 - 2 * layer
    assert trend["slope"] == pytest.approx(-2.0)
    assert trend["intercept"] == pytest.approx(1.0)


def test_anchor_perplexities_one_row_per_head_from_the_cached_prompts(caplog):
    caplog.set_level("INFO", logger="headstab.sections.ablation")
    model = _tiny_model()
    gen = torch.Generator().manual_seed(0)
    lengths = np.array([12, 3, 7])
    tokens = torch.randint(0, 50, (3, 12), generator=gen).numpy()
    table = ablation_perplexity_table(model, tokens, lengths, batch_size=2, seed=5)
    assert list(table.columns) == PERPLEXITY_COLUMNS and len(table) == 2 * 4
    assert (table["seed"] == 5).all() and table["ppl_baseline"].nunique() == 1
    # sorted by length into batches: same sums as the prompts in their own order
    assert table["ppl_baseline"].iloc[0] == pytest.approx(perplexity(model, tokens, lengths), rel=PPL_RTOL)
    grid = head_ablation_perplexities(model, tokens, lengths, progress=False)
    np.testing.assert_allclose(table["ppl_ablated"], grid.ravel(), rtol=PPL_RTOL)  # row-major: layer, then head
    low, high, base = table["ppl_ablated"].min(), table["ppl_ablated"].max(), table["ppl_baseline"].iloc[0]
    assert f"anchor seed 5: perplexity {base:.3f}, ablated {low:.3f} .. {high:.3f}" in caplog.messages
    seed, back, baseline = ablated_grid(table)
    assert seed == 5 and baseline == table["ppl_baseline"].iloc[0]
    np.testing.assert_array_equal(back, table["ppl_ablated"].to_numpy().reshape(2, 4))


def test_ablation_table_refuses_a_mix_of_prompt_sets():
    stab = pd.concat([_stability(np.zeros((1, 2))), _stability(np.ones((1, 2))).assign(promptset="len5")])
    with pytest.raises(ValueError, match=r"holds several promptsets \['len5', 'primary'\]"):
        ablation_table(np.ones((1, 2)), 1.0, stab, seed=7)
    assert ablation_table(np.ones((1, 2)), 1.0, stab, seed=7, promptset="len5")["stability"].tolist() == [1.0, 1.0]


def test_correlation_table_puts_the_trend_beside_every_layer():
    per_layer = pd.DataFrame(
        {"layer": [0, 1], "pearson_r": [0.5, -0.5], "p_value": [0.1, 0.2], "spearman_p": [0.1, 0.2], "n_heads": [4, 4]}
    )
    trend = {"slope": -1.0, "intercept": 0.5, "r_value": -1.0, "p_value": math.nan}
    table = correlation_table(per_layer, trend, seed=3)
    assert list(table.columns) == [
        "layer",
        "pearson_r",
        "p_value",
        "spearman_p",
        "n_heads",
        "seed",
        "trend_slope",
        "trend_intercept",
        "trend_r_value",
        "trend_p_value",
        "q_value",
        "spearman_q_value",
        "p_calibration",
        "ci_calibration",
        "trend_calibration",
    ]
    assert table["trend_slope"].tolist() == [-1.0, -1.0] and (table["seed"] == 3).all()


def test_ablation_table_picks_same_layer_rows_of_the_anchor_from_a_full_table():
    # The workflow's head table holds both scopes and several prompt sets; the default scope is same_layer.
    stab = pd.concat(
        [
            _stability([[0.1, 0.2]]),
            _stability([[0.8, 0.9]]).assign(scope="cross_layer"),
            _stability([[0.5, 0.6]]).assign(promptset="len5"),
            _stability([[0.0, 0.0]]).assign(anchor_seed=8),
        ]
    )
    table = ablation_table(np.array([[3.0, 5.0]]), 2.0, stab, seed=7, promptset="primary")
    assert table["stability"].tolist() == [0.1, 0.2]
    assert table["delta_ppl"].tolist() == [1.0, 3.0]
    assert table["seed"].tolist() == [7, 7]
    cross = ablation_table(np.array([[3.0, 5.0]]), 2.0, stab, seed=7, promptset="primary", scope="cross_layer")
    assert cross["stability"].tolist() == [0.8, 0.9]


def test_ablation_table_rejects_duplicate_and_missing_heads():
    duplicated = pd.concat([_stability([[0.1, 0.2]]), _stability([[0.1, 0.2]])])
    with pytest.raises(ValueError, match=r"several rows per \(layer, head\) for this anchor; pass promptset and scope"):
        ablation_table(np.ones((1, 2)), 1.0, duplicated, seed=7)
    missing = _stability([[0.1, 0.2]]).iloc[:1]
    with pytest.raises(ValueError, match=r"head stability lacks \(layer, head\) \[\[0, 1\]\] for anchor_seed=7"):
        ablation_table(np.ones((1, 2)), 1.0, missing, seed=7)
    with pytest.raises(ValueError, match=r"ppl_ablated must be \[layer, head\], got shape \(2,\)"):
        ablation_table(np.ones(2), 1.0, _stability([[0.1, 0.2]]), seed=7)


def test_ablation_correlation_trend_values_and_fewer_than_two_finite_layers():
    stability = np.array([[0.1, 0.5, 0.9], [0.2, 0.4, 0.8], [0.3, 0.6, 0.2]])
    delta = np.array([stability[0], -stability[1], [1.0, 1.0, 1.0]])  # layer 2: constant ΔPPL, r undefined
    per_layer, trend = ablation_correlation(ablation_table(delta + 10.0, 10.0, _stability(stability), seed=7))
    assert list(per_layer.columns) == CORRELATION_COLUMNS
    assert per_layer["p_value"].iloc[0] == pytest.approx(2 / 6)  # a perfect correlation, 1 of 3! pairings a side
    assert math.isnan(per_layer["p_value"].iloc[2])
    # Two finite layers: the line through (0, 1) and (1, -1) fits by construction, r_value -1 and no p-value.
    assert set(trend) == {"slope", "intercept", "r_value", "p_value"}
    assert trend["r_value"] == pytest.approx(-1.0)
    assert math.isnan(trend["p_value"])
    # One layer with a finite r: the trend is undefined, all NaN, and correlation_table still writes it.
    one = ablation_table(delta[:1] + 10.0, 10.0, _stability(stability[:1]), seed=7)
    per_layer, trend = ablation_correlation(one)
    assert per_layer["pearson_r"].tolist() == pytest.approx([1.0])
    assert set(trend) == {"slope", "intercept", "r_value", "p_value"}
    assert all(math.isnan(value) for value in trend.values())
    assert correlation_table(per_layer, trend, seed=7)["trend_slope"].isna().all()


def test_ablation_correlation_intervals_resample_heads_layer_by_layer():
    from headstab.statistics.resampling import pearson_interval

    rng = np.random.default_rng(0)
    stability = rng.random((2, 6))
    delta = np.array([3 * stability[0] + 1, rng.random(6)])  # layer 0: r = 1 in every resample
    table = ablation_table(delta + 10.0, 10.0, _stability(stability), seed=7)
    intervals = ablation_correlation_intervals(
        table.sort_values("layer", ascending=False, kind="stable"), n_boot=50, seed=4, confidence=0.9
    )
    assert list(intervals.columns) == ["layer", "ci_low", "ci_high", "n_boot"]
    assert intervals["layer"].tolist() == [0, 1] and intervals["n_boot"].tolist() == [50, 50]
    assert intervals[["ci_low", "ci_high"]].iloc[0].tolist() == pytest.approx([1.0, 1.0])
    # layer 1 is drawn with seed + layer, its own heads only
    expected = pearson_interval(stability[1], delta[1], 50, 4 + 1, 0.9)
    assert intervals[["ci_low", "ci_high"]].iloc[1].tolist() == pytest.approx(list(expected))
    assert pearson_interval(stability[1], delta[1], 50, 4, 0.9) != pytest.approx(expected)
    assert intervals["ci_low"].iloc[1] < intervals["ci_high"].iloc[1]


def test_ablation_tables_of_one_head_and_unsorted_layers():
    one = pd.DataFrame({"seed": [3], "layer": [0], "head": [0], "ppl_ablated": [4.0], "ppl_baseline": [2.0]})
    assert ablated_grid(one)[0] == 3 and ablated_grid(one)[2] == 2.0
    table = ablation_table(np.array([[3, 5]]), 2, _stability([[0.1, 0.2]]), seed=7)
    assert table["ppl_ablated"].dtype == np.float64 and table["delta_ppl"].tolist() == [1.0, 3.0]
    stability = np.array([[0.1, 0.5, 0.9], [0.2, 0.4, 0.8], [0.3, 0.6, 0.2]])
    delta = np.array([stability[0], -stability[1], stability[2]])
    table = ablation_table(delta + 10.0, 10.0, _stability(stability), seed=7).iloc[::-1]  # layers 2, 1, 0
    per_layer, trend = ablation_correlation(table)
    assert per_layer["layer"].tolist() == [0, 1, 2]
    assert per_layer["pearson_r"].tolist() == pytest.approx([1.0, -1.0, 1.0])
    assert trend["slope"] == pytest.approx(0.0)


def test_ablation_table_error_messages_name_the_table_and_at_most_three_heads():
    with pytest.raises(ValueError, match="^head stability has no rows with anchor_seed = 9"):
        ablation_table(np.ones((1, 2)), 1.0, _stability([[0.1, 0.2]]), seed=9)
    differing = pd.concat([_stability([[0.1, 0.2]]), _stability([[0.3, 0.4]])])
    with pytest.raises(ValueError, match=r"^head stability has several rows per \(layer, head\) for this anchor; pass"):
        ablation_table(np.ones((1, 2)), 1.0, differing, seed=7)
    missing = _stability([[0.1, 0.2, 0.3, 0.4, 0.5]]).iloc[:1]
    with pytest.raises(ValueError, match=r"lacks \(layer, head\) \[\[0, 1\], \[0, 2\], \[0, 3\]\] for"):
        ablation_table(np.ones((1, 5)), 1.0, missing, seed=7)


def test_spearman_stands_beside_pearson_where_one_head_costs_twenty_times_the_next():
    stability = np.array([[0.1, 0.2, 0.3, 0.4, 0.5]])
    delta = np.array([[1.0, 2.0, 3.0, 10.6, 205.0]])  # monotone in stability, heavy-tailed
    per_layer, _ = ablation_correlation(ablation_table(delta + 10.0, 10.0, _stability(stability), seed=7))
    row = per_layer.iloc[0]
    assert row["spearman_r"] == pytest.approx(1.0) and row["spearman_p"] == pytest.approx(2 / 120)  # exact: 5!
    expected = np.corrcoef(stability[0], delta[0])[0, 1]
    assert row["pearson_r"] == pytest.approx(expected, abs=reduction_atol(np.float64, 5, magnitude=205.0))
    assert row["pearson_r"] < 0.75  # the one extreme head sets Pearson's r


def _two_anchor_table():
    """Two anchors whose heads agree within each anchor (ΔPPL rises with stability) but whose means run the
    other way (anchor 8: more stable heads, smaller ΔPPL)."""
    stability = np.array([[0.1, 0.2, 0.3, 0.4]])
    first = ablation_table(10.0 + 2 * stability, 10.0, _stability(stability), seed=7)
    second = ablation_table(
        10.0 + np.array([[-5.0, -4.5, -4.4, -3.0]]), 10.0, _stability(stability + 0.5).assign(anchor_seed=8), seed=8
    )
    return pd.concat([first, second], ignore_index=True)


def test_correlations_pool_over_anchors_with_values_centred_within_each_anchor():
    table = _two_anchor_table()
    per_layer, _ = ablation_correlation(table)
    row = per_layer.iloc[0]
    assert row["n_anchors"] == 2 and row["n_heads"] == 4
    assert row["pearson_r"] == pytest.approx(1.0)  # the first anchor's, as the paper reports
    x = table["stability"] - table.groupby("seed")["stability"].transform("mean")
    y = table["delta_ppl"] - table.groupby("seed")["delta_ppl"].transform("mean")
    expected = (x * y).sum() / np.sqrt((x**2).sum() * (y**2).sum())
    assert row["pooled_pearson_r"] == pytest.approx(expected, abs=reduction_atol(np.float64, 8, magnitude=5.0))
    assert row["pooled_spearman_r"] == pytest.approx(1.0)  # every anchor's ranks agree
    assert np.corrcoef(table["stability"], table["delta_ppl"])[0, 1] < 0  # pooling without centring reverses it
    second, _ = ablation_correlation(table, anchor_seed=8)
    assert second["pooled_pearson_r"].iloc[0] == row["pooled_pearson_r"]
    assert second["pearson_r"].iloc[0] == pytest.approx(
        np.corrcoef([0.6, 0.7, 0.8, 0.9], [-5.0, -4.5, -4.4, -3.0])[0, 1]
    )


def test_ablated_grids_read_every_anchor_in_table_order():
    rows = [
        (s, layer, head, 10.0 * s + layer + head / 10, 5.0 * s) for s in (3, 1) for layer in (0, 1) for head in (0, 1)
    ]
    table = pd.DataFrame(rows, columns=PERPLEXITY_COLUMNS)
    grids = ablated_grids(table)
    assert [seed for seed, _, _ in grids] == [3, 1] and [base for _, _, base in grids] == [15.0, 5.0]
    np.testing.assert_array_equal(grids[1][1], [[10.0, 10.1], [11.0, 11.1]])
    assert ablated_grid(table)[0] == 3 and ablated_grid(table)[1].shape == (2, 2)  # the first anchor's only


def test_one_head_that_costs_most_where_another_head_stands_out_is_no_evidence_of_a_correlation():
    # One positional head (stability 0.9) among heads near 0.45, and the layer's ΔPPL dominated by that same head
    # (205 against at most 10.6): Pearson's t-test calls r = 0.99 significant, but head 0 carries both extremes
    # in 1 pairing of 8, so the exact permutation p is about 2 x 1/8 times the share of those as extreme.
    stability = np.array([[0.9, 0.45, 0.40, 0.50, 0.47, 0.42, 0.44, 0.48]])
    delta = np.array([[205.0, 10.6, 3.0, 1.0, 2.0, 0.5, 4.0, 1.5]])
    table = ablation_table(delta + 10.0, 10.0, _stability(stability), seed=7)
    per_layer, _ = ablation_correlation(table, permutations=50000, seed=1)  # 8! = 40320 pairings: exact
    row = per_layer.iloc[0]
    assert scipy.stats.pearsonr(stability[0], delta[0]).pvalue < 0.001  # the t-test's reading
    assert row["pearson_r"] > 0.95
    assert 0.1 < row["p_value"] <= 0.25
    assert row["spearman_p"] > 0.05


def test_permutation_p_is_exact_over_every_pairing_of_a_few_heads():
    # 4 heads, ranks in the same order: 1 pairing of 24 as extreme on each side, whatever the seed.
    stability = np.array([[0.1, 0.2, 0.3, 0.4]])
    table = ablation_table(np.array([[1.0, 2.0, 4.0, 9.0]]) + 10.0, 10.0, _stability(stability), seed=7)
    for seed in (0, 5):
        per_layer, _ = ablation_correlation(table, permutations=100, seed=seed)
        assert per_layer["p_value"].iloc[0] == pytest.approx(2 / 24)
        assert per_layer["spearman_p"].iloc[0] == pytest.approx(2 / 24)
    assert math.isnan(permutation_p(np.array([1.0, 2.0]), np.array([1.0, 3.0]), 100, 0))
    assert math.isnan(permutation_p(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0]), 100, 0))
    assert math.isnan(permutation_p(np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0]), 100, 0))


def test_random_pairings_are_drawn_per_layer_from_the_seed():
    rng = np.random.default_rng(3)
    stability, delta = rng.random((2, 16)), rng.random((2, 16))
    table = ablation_table(delta + 10.0, 10.0, _stability(stability), seed=7)
    per_layer, _ = ablation_correlation(table, permutations=99, seed=11)
    # 16! pairings: 99 random ones, p = (1 + #extreme) / 100 per side; layer 1 draws with seed 11 + 1
    for layer in (0, 1):
        expected = permutation_p(stability[layer], delta[layer], 99, 11 + layer)
        assert per_layer["p_value"].iloc[layer] == expected
        assert round(expected * 100) == pytest.approx(expected * 100, abs=1e-9)
    assert permutation_p(stability[1], delta[1], 99, 11) != permutation_p(stability[1], delta[1], 99, 12)
    again, _ = ablation_correlation(table, permutations=99, seed=11)
    pd.testing.assert_frame_equal(again, per_layer)


def test_the_layers_are_one_family_and_each_column_says_whether_it_is_calibrated():
    from headstab.statistics.calibration import calibration_label

    per_layer = pd.DataFrame(
        {
            "layer": [0, 1, 2],
            "pearson_r": [0.5, -0.5, np.nan],
            "p_value": [0.01, 0.04, np.nan],
            "spearman_p": [0.03, 0.5, np.nan],
            "n_heads": [8, 8, 8],
        }
    )
    trend = {"slope": -1.0, "intercept": 0.5, "r_value": -1.0, "p_value": np.nan}
    intervals = pd.DataFrame({"layer": [2, 0, 1], "ci_low": [0.0, 0.1, 0.2], "ci_high": [0.9, 0.8, 0.7], "n_boot": 9})
    table = correlation_table(per_layer, trend, seed=3, intervals=intervals)
    # Benjamini-Hochberg over the 2 finite p-values of each test: (0.01, 0.04) -> (0.02, 0.04); (0.03, 0.5) ->
    # (0.06, 0.5)
    np.testing.assert_allclose(table["q_value"], [0.02, 0.04, np.nan], rtol=1e-12)
    np.testing.assert_allclose(table["spearman_q_value"], [0.06, 0.5, np.nan], rtol=1e-12)
    assert table["ci_low"].tolist() == [0.1, 0.2, 0.0]  # merged by layer
    assert (table["p_calibration"] == calibration_label("permutation_pearson_ablation_heads", 8)).all()
    assert (table["ci_calibration"] == calibration_label("head_bootstrap_pearson_ablation", 8)).all()
    # the trend is over the 2 layers with a finite r
    assert (table["trend_calibration"] == calibration_label("linregress_trend_ablation", 2)).all()
    assert "ci_low" not in correlation_table(per_layer, trend, seed=3).columns


def _min_n(monkeypatch, method, min_n):
    """Set `method`'s min_n in the registry the section reads."""
    from dataclasses import replace

    from headstab.statistics import calibration

    monkeypatch.setitem(calibration.METHODS, method, replace(calibration.METHODS[method], min_n=min_n))


def test_labels_are_taken_at_the_layers_heads_and_at_the_layers_with_a_finite_r(monkeypatch):
    rng = np.random.default_rng(9)
    stability, delta = rng.random((5, 4)), rng.random((5, 4))  # 5 layers of 4 heads
    delta[4] = 1.0  # layer 4: constant ΔPPL, no r: the trend is over 4 layers
    table = ablation_table(delta + 10.0, 10.0, _stability(stability), seed=7)
    per_layer, trend = ablation_correlation(table, permutations=30, seed=0)
    for method in (
        "permutation_pearson_ablation_heads",
        "head_bootstrap_pearson_ablation",
        "linregress_trend_ablation",
    ):
        _min_n(monkeypatch, method, 4)
    at_4 = correlation_table(per_layer, trend, seed=7)
    assert (at_4[["p_calibration", "ci_calibration", "trend_calibration"]] == "calibrated").all().all()
    for method in (
        "permutation_pearson_ablation_heads",
        "head_bootstrap_pearson_ablation",
        "linregress_trend_ablation",
    ):
        _min_n(monkeypatch, method, 5)
    at_5 = correlation_table(per_layer, trend, seed=7)
    assert (at_5[["p_calibration", "ci_calibration", "trend_calibration"]] == "descriptive").all().all()


def _two_anchors(rng, layers=3, heads=6):
    """Rows of anchors 5 (first) and 3: layer, head, stability, delta_ppl drawn independently per anchor."""
    rows = [(s, layer, head, rng.random(), rng.lognormal()) for s in (5, 3) for layer in range(layers)
            for head in range(heads)]  # fmt: skip
    return pd.DataFrame(rows, columns=["seed", "layer", "head", "stability", "delta_ppl"])


def test_the_trend_over_three_layers_has_its_linregress_p():
    table = _two_anchors(np.random.default_rng(11))
    per_layer, trend = ablation_correlation(table, permutations=20, seed=0)
    fit = scipy.stats.linregress(per_layer["layer"].to_numpy(float), per_layer["pearson_r"].to_numpy(float))
    assert np.isfinite(trend["p_value"]) and trend["p_value"] == pytest.approx(fit.pvalue, rel=1e-12)


def test_the_default_anchor_is_the_first_seed_and_the_default_draws_are_seed_0():
    table = _two_anchors(np.random.default_rng(12))
    default, _ = ablation_correlation(table, permutations=30)
    pd.testing.assert_frame_equal(default, ablation_correlation(table, anchor_seed=5, permutations=30, seed=0)[0])
    other = ablation_correlation(table, anchor_seed=3, permutations=30, seed=0)[0]
    assert not np.allclose(default["pearson_r"], other["pearson_r"])
    intervals = ablation_correlation_intervals(table, n_boot=20, seed=0, confidence=0.9)
    pd.testing.assert_frame_equal(intervals, ablation_correlation_intervals(table, 20, 0, 0.9, anchor_seed=5))
    one = table[table["seed"] == 5].drop(columns="seed")
    pd.testing.assert_frame_equal(ablation_correlation_intervals(one, 20, 0, 0.9), intervals)
    alone, _ = ablation_correlation(one, permutations=30, seed=0)
    assert alone["pearson_r"].tolist() == default["pearson_r"].tolist()
    assert (alone["n_anchors"] == 1).all()


def test_the_default_permutations_are_10000():
    rng = np.random.default_rng(13)
    table = pd.DataFrame({"seed": 1, "layer": 0, "head": range(8), "stability": rng.random(8)})
    table["delta_ppl"] = rng.lognormal(size=8)
    default, _ = ablation_correlation(table)
    pd.testing.assert_frame_equal(default, ablation_correlation(table, permutations=10000, seed=0)[0])


def test_the_default_anchor_is_the_first_row_of_a_table_whose_anchors_interleave():
    table = _two_anchors(np.random.default_rng(14)).sort_values(["layer", "head"], kind="stable")  # 5, 3, 5, 3, ...
    default, _ = ablation_correlation(table, permutations=30)
    pd.testing.assert_frame_equal(default, ablation_correlation(table, anchor_seed=5, permutations=30)[0])
    intervals = ablation_correlation_intervals(table, n_boot=20, seed=0, confidence=0.9)
    pd.testing.assert_frame_equal(intervals, ablation_correlation_intervals(table, 20, 0, 0.9, anchor_seed=5))
    assert intervals["layer"].tolist() == [0, 1, 2]
    other = ablation_correlation_intervals(table, 20, 0, 0.9, anchor_seed=3)  # an anchor given is the one read
    assert not np.allclose(other[["ci_low", "ci_high"]], intervals[["ci_low", "ci_high"]])


def test_a_table_without_seeds_is_the_one_anchor_seed_0():
    table = _two_anchors(np.random.default_rng(15))
    one = table[table["seed"] == 5]
    expected, _ = ablation_correlation(one, permutations=30)
    got, _ = ablation_correlation(one.drop(columns="seed"), anchor_seed=0, permutations=30)
    pd.testing.assert_frame_equal(got, expected)


def test_pooled_r_without_spread_is_nan_without_a_division_by_zero():
    from headstab.sections.ablation import _pooled_r

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(_pooled_r(np.zeros(3), np.array([1.0, -1.0, 0.0])))


def test_a_layer_without_an_interval_keeps_its_row():
    table = _two_anchors(np.random.default_rng(16))
    per_layer, trend = ablation_correlation(table, permutations=20)
    intervals = ablation_correlation_intervals(table, n_boot=20, seed=0, confidence=0.9)
    merged = correlation_table(per_layer, trend, seed=5, intervals=intervals[intervals["layer"] != 1])
    assert merged["layer"].tolist() == [0, 1, 2] and merged["ci_low"].isna().tolist() == [False, True, False]
