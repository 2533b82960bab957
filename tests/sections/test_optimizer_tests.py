"""Adam vs AdamW tested paired by seed: pseudo-values, the sign-flip test, the paired bootstrap and TOST."""

from __future__ import annotations

import dataclasses
import logging
import warnings

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol, reduction_rtol
from scipy import stats

from headstab.sections.optimizer_tests import OPTIMIZER_TEST_COLUMNS, optimizer_tests
from headstab.similarity.prompt_groups import GroupedSimilarity
from headstab.statistics.bootstrap import draw_resamples, stability_replicates
from headstab.statistics.calibration import calibration_label
from headstab.statistics.hypothesis import pair_pseudo_values, permutation_test, sign_flip_test
from headstab.statistics.jackknife import leave_one_group_out
from headstab.statistics.resampling import partial_correlation

SEEDS = [1, 2, 3, 4, 5, 6]


def test_partial_correlation_removes_what_the_control_explains():
    rng = np.random.default_rng(1)
    z = rng.normal(size=400)
    x = z + 0.3 * rng.normal(size=400)
    y = z + 0.3 * rng.normal(size=400)  # x and y related only through z
    assert np.corrcoef(x, y)[0, 1] > 0.8 and abs(partial_correlation(x, y, z)) < 0.15
    residual = lambda v: v - np.polyval(np.polyfit(z, v, 1), z)  # noqa: E731
    expected = np.corrcoef(residual(x), residual(y))[0, 1]
    # rounding of the three correlations, amplified by 1 / ((1 - r_xz^2)(1 - r_yz^2))
    atol = reduction_atol(np.float64, 400) / ((1 - np.corrcoef(x, z)[0, 1] ** 2) * (1 - np.corrcoef(y, z)[0, 1] ** 2))
    assert partial_correlation(x, y, z) == pytest.approx(expected, abs=atol)
    weights = np.ones((3, 400))
    np.testing.assert_allclose(partial_correlation(x, y, z, weights), expected, atol=atol)
    assert np.isnan(partial_correlation(x, y, x))  # nothing of x left once x is controlled for


def optimizer_pair(rng, shift=0.02, n_layers=2, n_heads=3, sizes=(2, 3, 1), refit_sd=0.2):
    """Adam with refits that differ a lot, and AdamW = the same refits' similarities + shift."""
    sizes = np.asarray(sizes)
    n = len(SEEDS)
    refit = rng.normal(0.0, refit_sd, size=n)  # each refit's own level, shared by its pairs
    values = rng.random((len(sizes), n, n, n_layers, n_heads, n_heads)) * 0.1 + 0.5
    values += (refit[:, None] + refit[None, :])[None, :, :, None, None, None]
    values = ((values + values.transpose(0, 2, 1, 3, 5, 4)) / 2).astype(np.float32)
    lengths = np.full(sizes.sum(), 5)
    entropy = rng.random((n, n_layers, n_heads))
    adam = GroupedSimilarity(
        values, values * 0.5, sizes, SEEDS, np.roll(np.arange(lengths.size), 1), lengths, entropy=entropy,
        content_observed=values * 0.25, content_null=values * 0.125,
    )  # fmt: skip
    adamw = dataclasses.replace(
        adam, observed=values + np.float32(shift), content_observed=values * 0.25 + np.float32(shift)
    )
    return adam, adamw


def test_a_small_shift_shared_by_every_seed_is_found_paired_and_missed_unpaired():
    adam, adamw = optimizer_pair(np.random.default_rng(2))
    spread = np.array([20.0, 24.0, 19.0, 27.0, 22.0, 25.0])
    ppl_adam = pd.Series(spread, index=SEEDS)
    ppl_adamw = pd.Series(spread + np.array([0.05, -0.02, 0.03, 0.0, 0.04, -0.01]), index=SEEDS)
    table = optimizer_tests(adam, adamw, ppl_adam, ppl_adamw, n_boot=200, permutations=999, seed=0,
                            confidence=0.95, perplexity_margin=0.02, paired=True)  # fmt: skip
    assert list(table.columns) == OPTIMIZER_TEST_COLUMNS and (table["design"] == "paired").all()
    layers = table[table["statistic"] == "layer_stability"].set_index("layer")
    atol = reduction_atol(np.float32, 6 + len(SEEDS))
    np.testing.assert_allclose(layers["difference"], 0.02, atol=atol)
    assert (layers["test"] == "jackknife_t").all() and (layers["n_pairs"] == 6).all()
    np.testing.assert_allclose(layers["sign_flip_p_value"], 2 / 64)  # every per-seed difference 0.02: 2 of 64 signs
    # the members' groups differ by the same 0.02 too: nothing varies but the shift, so the jackknife-t p is 0
    np.testing.assert_allclose(layers["p_value"], 0.0, atol=1e-12)
    assert (layers["ci_low"] > 0.015).all()  # the paired interval: seed levels cancel
    assert (layers["unpaired_p_value"] > 0.3).all() and (layers["unpaired_ci_low"] < 0).all()
    above = table[table["statistic"] == "layer_above_null"].set_index("layer")
    np.testing.assert_allclose(above["difference"], 0.02, atol=atol)  # the null did not move
    content = table[table["statistic"] == "layer_stability_content"].set_index("layer")
    np.testing.assert_allclose(content["difference"], 0.02, atol=atol)
    assert set(table["statistic"]) == {"layer_stability", "layer_above_null", "layer_stability_content",
                                       "layer_content_above_null", "perplexity"}  # fmt: skip
    ppl = table[table["statistic"] == "perplexity"].iloc[0]
    assert ppl["test"] == "paired_tost" and ppl["equivalent"] and ppl["n_pairs"] == 6
    assert ppl["unpaired_test"] == "tost" and not ppl["unpaired_equivalent"]  # the spread hides parity unpaired
    np.testing.assert_allclose(layers["entropy_adam"], adam.entropy.mean(axis=(0, 2)))


def test_the_paired_interval_uses_the_same_resamples_for_both_members():
    adam, adamw = optimizer_pair(np.random.default_rng(3), shift=0.0)
    adamw = dataclasses.replace(adamw, observed=adam.observed * np.float32(1.1))
    table = optimizer_tests(adam, adamw, np.full(6, 20.0) + np.arange(6) * 0.01, np.full(6, 20.0),
                            n_boot=40, permutations=99, seed=4, confidence=0.9, perplexity_margin=0.02,
                            paired=True)  # fmt: skip
    draws = draw_resamples(40, len(SEEDS), 3, 4)
    reps = [stability_replicates(draws, grouped.observed, grouped.group_sizes) for grouped in (adam, adamw)]
    low, high = np.quantile(reps[1]["layer"] - reps[0]["layer"], [0.05, 0.95], axis=0)
    layers = table[table["statistic"] == "layer_stability"]
    atol = reduction_atol(np.float32, 6 + len(SEEDS))
    np.testing.assert_allclose(layers["ci_low"], low, atol=2 * atol)
    np.testing.assert_allclose(layers["ci_high"], high, atol=2 * atol)
    pseudo = [pair_pseudo_values(r["pair_best"].mean(axis=-1)) for r in reps]
    np.testing.assert_allclose(layers["sign_flip_p_value"], sign_flip_test(pseudo[1] - pseudo[0], 99, 4)["p_value"])


def test_pairs_that_cannot_be_paired_are_tested_unpaired_and_say_why(caplog):
    adam, adamw = optimizer_pair(np.random.default_rng(5))
    other = dataclasses.replace(adamw, seeds=[1, 2, 3, 4, 5, 7])
    with caplog.at_level(logging.WARNING):
        table = optimizer_tests(adam, other, np.full(6, 20.0), np.full(6, 20.1) + np.arange(6) * 0.01, n_boot=20,
                                permutations=99, seed=0, confidence=0.9, perplexity_margin=0.02, paired=True)  # fmt: skip
    assert (table["design"] == "unpaired").all() and "other refits" in caplog.text
    layers = table[table["statistic"] == "layer_stability"]
    assert (layers["test"] == "jackknife_welch").all() and (layers["n_pairs"] == 0).all()
    np.testing.assert_array_equal(layers["p_value"], layers["unpaired_p_value"])
    assert layers["sign_flip_p_value"].isna().all() and layers["permutation_p_value"].notna().all()
    assert table[table["statistic"] == "perplexity"]["test"].iloc[0] == "tost"


def test_optimizer_partial_r_given_entropy_drops_a_difference_that_sharpness_explains():
    rng = np.random.default_rng(6)
    adam, adamw = optimizer_pair(rng, shift=0.05, refit_sd=0.01)
    draws = draw_resamples(2, len(SEEDS), 3, 0)
    entropy = {}  # sharper heads match better: entropy a decreasing function of head stability, AdamW's sharper
    for name, grouped in (("adam", adam), ("adamw", adamw)):
        head = stability_replicates(draws, grouped.observed, grouped.group_sizes)["head_estimate"]
        entropy[name] = 1.0 - head + 0.002 * rng.normal(size=head.shape)
    adam, adamw = (
        dataclasses.replace(adam, entropy=entropy["adam"]),
        dataclasses.replace(adamw, entropy=entropy["adamw"]),
    )
    table = optimizer_tests(adam, adamw, np.full(6, 20.0), np.full(6, 20.0) + np.arange(6) * 0.01, n_boot=50,
                            permutations=99, seed=0, confidence=0.9, perplexity_margin=0.02, paired=True)  # fmt: skip
    layers = table[table["statistic"] == "layer_stability"]
    assert (layers["optimizer_r"] > 0.8).all()  # AdamW's heads are more stable ...
    assert (layers["optimizer_partial_r"].abs() < 0.3).all()  # ... as far as their sharpness says
    assert (layers["optimizer_partial_r_ci_low"] <= layers["optimizer_partial_r"] + 1e-12).all()
    assert (layers["entropy_adamw"] < layers["entropy_adam"]).all()


def test_q_values_are_benjamini_hochberg_within_the_pairs_layer_tests_and_labels_follow_the_design():
    adam, adamw = optimizer_pair(np.random.default_rng(8), shift=0.01)
    ppl = pd.Series(np.array([20.0, 24.0, 19.0, 27.0, 22.0, 25.0]), index=SEEDS)
    table = optimizer_tests(adam, adamw, ppl, ppl + 0.05, n_boot=40, permutations=999, seed=0, confidence=0.95,
                            perplexity_margin=0.02, paired=True)  # fmt: skip
    layers = table[table["statistic"] != "perplexity"]
    assert len(layers) == 8  # 4 statistics x 2 layers: one family
    np.testing.assert_allclose(layers["q_value"], stats.false_discovery_control(layers["p_value"]), rtol=1e-12)
    np.testing.assert_allclose(
        layers["unpaired_q_value"], stats.false_discovery_control(layers["unpaired_p_value"]), rtol=1e-12
    )
    ppl_row = table[table["statistic"] == "perplexity"].iloc[0]
    assert np.isnan(ppl_row["q_value"]) and np.isnan(ppl_row["unpaired_q_value"])  # an equivalence test: no family
    expected = {
        "ci_calibration": ("multibootstrap_paired_difference", "tost_paired"),
        "p_calibration": ("jackknife_paired_p", "tost_paired"),
        "sign_flip_calibration": ("sign_flip_paired", None),
        "permutation_calibration": ("permutation_unpaired", None),
        "unpaired_ci_calibration": ("multibootstrap_unpaired_difference", "tost_welch"),
        "unpaired_p_calibration": ("jackknife_unpaired_p", "tost_welch"),
        "jackknife_calibration": ("jackknife_paired_difference", None),
        "partial_r_calibration": ("partial_r_optimizer", None),
    }
    for column, (layer_method, ppl_method) in expected.items():
        assert set(layers[column]) == {calibration_label(layer_method, 6)}, column
        if ppl_method is None:
            assert pd.isna(ppl_row[column]), column  # no such interval on the perplexity row
        else:
            assert ppl_row[column] == calibration_label(ppl_method, 6), column
    other = dataclasses.replace(adamw, seeds=[1, 2, 3, 4, 5, 7])  # unpaired: every label of the unpaired methods
    unpaired = optimizer_tests(adam, other, ppl, ppl.set_axis(other.seeds) + 0.05, n_boot=20, permutations=99,
                               seed=0, confidence=0.95, perplexity_margin=0.02, paired=True)  # fmt: skip
    rows = unpaired[unpaired["statistic"] != "perplexity"]
    assert set(rows["ci_calibration"]) == {calibration_label("multibootstrap_unpaired_difference", 6)}
    assert set(rows["p_calibration"]) == {calibration_label("jackknife_unpaired_p", 6)}
    assert set(rows["jackknife_calibration"]) == {calibration_label("jackknife_unpaired_difference", 6)}
    assert rows["sign_flip_calibration"].isna().all()  # no sign-flip test without pairs
    assert unpaired[unpaired["statistic"] == "perplexity"]["p_calibration"].iloc[0] == calibration_label(
        "tost_welch", 6
    )


def test_the_paired_jackknife_interval_is_the_t_interval_of_the_seed_differences_with_the_groups_left_out():
    adam, adamw = optimizer_pair(np.random.default_rng(9), shift=0.02, refit_sd=0.02)
    adamw = dataclasses.replace(adamw, observed=adamw.observed + np.float32(0.01) * adam.observed)
    table = optimizer_tests(adam, adamw, np.full(6, 20.0), np.full(6, 20.0), n_boot=20, permutations=99, seed=0,
                            confidence=0.9, perplexity_margin=0.02, paired=True)  # fmt: skip
    layers = table[table["statistic"] == "layer_stability"].set_index("layer")
    sizes = adam.group_sizes
    best = [
        np.tensordot(sizes / sizes.sum(), g.observed.astype(np.float64), axes=1).max(axis=-1) for g in (adam, adamw)
    ]
    loo = [leave_one_group_out(g.observed, sizes) for g in (adam, adamw)]
    off = ~np.eye(6, dtype=bool)
    pooled_loo = [np.stack([x[off].mean(axis=(0, 2)) for x in groups]) for groups in loo]  # [group, layer]
    d = pair_pseudo_values(best[1].mean(axis=-1)) - pair_pseudo_values(best[0].mean(axis=-1))
    difference = best[1][off].mean(axis=(0, 2)) - best[0][off].mean(axis=(0, 2))
    groups = pooled_loo[1] - pooled_loo[0]
    corrected = difference - 2 * (groups.mean(axis=0) - difference)  # 3 groups: (G - 1) = 2
    refit_var, group_var = d.var(axis=0, ddof=1) / 6, 2 / 3 * ((groups - groups.mean(axis=0)) ** 2).sum(axis=0)
    df = (refit_var + group_var) ** 2 / (refit_var**2 / 5 + group_var**2 / 2)
    half = stats.t.ppf(0.95, df) * np.sqrt(refit_var + group_var)
    atol = reduction_atol(np.float32, 6 * 6 * 3)
    np.testing.assert_allclose(layers["jackknife"], corrected, atol=atol)
    np.testing.assert_allclose(layers["jackknife_ci_low"], corrected - half, atol=atol)
    np.testing.assert_allclose(layers["jackknife_ci_high"], corrected + half, atol=atol)
    se = np.sqrt(refit_var + group_var)
    np.testing.assert_allclose(layers["p_value"], 2 * stats.t.sf(np.abs(corrected) / se, df), rtol=1e-6)
    # unpaired: each member's pseudo-values, Welch's degrees, the same groups left out of both
    variances = [pair_pseudo_values(b.mean(axis=-1)).var(axis=0, ddof=1) / 6 for b in best]
    df = sum(variances) ** 2 / sum(v**2 / 5 for v in variances)
    total = sum(variances) + group_var
    df = total**2 / (sum(variances) ** 2 / df + group_var**2 / 2)
    half = stats.t.ppf(0.95, df) * np.sqrt(total)
    np.testing.assert_allclose(layers["unpaired_jackknife_ci_high"], corrected + half, atol=atol)
    np.testing.assert_allclose(
        layers["unpaired_p_value"], 2 * stats.t.sf(np.abs(corrected) / np.sqrt(total), df), rtol=1e-6
    )


FOUR_SEEDS = [3, 5, 8, 13]


def grouped_and_pair_tensor(rng, n_groups=5, n_layers=2, n_heads=3, scale=1.0):
    n = len(FOUR_SEEDS)
    observed = rng.random((n_groups, n, n, n_layers, n_heads, n_heads)).astype(np.float32) * scale
    observed = (observed + observed.transpose(0, 2, 1, 3, 5, 4)) / 2
    sizes = np.arange(1, n_groups + 1)
    mean = np.tensordot(sizes / sizes.sum(), observed.astype(np.float64), axes=1).astype(np.float32)
    pair = rng.random((n, n, n_layers, n_heads, n_layers, n_heads)).astype(np.float32) * 0.1
    for layer in range(n_layers):
        pair[:, :, layer, :, layer, :] = mean[:, :, layer]
    lengths = np.full(sizes.sum(), 6)
    grouped = GroupedSimilarity(
        observed, observed * 0.5, sizes, FOUR_SEEDS, np.roll(np.arange(lengths.size), 1), lengths
    )
    return grouped, pair


def quantiles(replicates, confidence):
    alpha = (1 - confidence) / 2
    return np.quantile(replicates, alpha, axis=0), np.quantile(replicates, 1 - alpha, axis=0)


def test_optimizer_tests_find_a_layer_difference_and_equivalent_perplexities():
    rng = np.random.default_rng(2)
    adam, _ = grouped_and_pair_tensor(rng, scale=0.5)
    shifted = adam.observed.copy()
    shifted[:, :, :, 1] += 0.4  # AdamW's second layer more stable, first unchanged
    adamw = GroupedSimilarity(shifted, adam.null, adam.group_sizes, FOUR_SEEDS, adam.partners, adam.lengths)
    table = optimizer_tests(adam, adamw, np.array([20.0, 20.2, 19.9, 20.1]), np.array([20.1, 20.0, 20.2, 20.0]),
                            n_boot=200, permutations=999, seed=0, confidence=0.95, perplexity_margin=0.02)  # fmt: skip
    layers = table[table["statistic"] == "layer_stability"].set_index("layer")
    assert layers.loc[0, "difference"] == pytest.approx(0.0, abs=1e-6)
    assert layers.loc[1, "difference"] == pytest.approx(0.4, abs=1e-5)
    assert layers.loc[1, "ci_low"] > 0.3 and layers.loc[0, "ci_low"] <= 0 <= layers.loc[0, "ci_high"]
    assert layers.loc[1, "permutation_p_value"] == pytest.approx(2 / 70, abs=0.02)  # 4 vs 4: the most extreme split
    assert layers.loc[1, "p_value"] < 1e-3 and layers.loc[0, "p_value"] > 0.05  # jackknife-t, unpaired: Welch
    perplexity = table[table["statistic"] == "perplexity"].iloc[0]
    assert (
        perplexity["test"] == "tost"
        and perplexity["equivalent"]
        and perplexity["margin"] == pytest.approx(0.02 * 20.05)
    )


def grouped_of(rng, n_seeds, sizes, layer1_shift=0.0):
    values = rng.random((len(sizes), n_seeds, n_seeds, 2, 3, 3)).astype(np.float32)
    values = (values + values.transpose(0, 2, 1, 3, 5, 4)) / 2
    values[:, :, :, 1] += np.float32(layer1_shift)
    lengths = np.full(sizes.sum(), 4)
    return GroupedSimilarity(values, values, sizes, list(range(n_seeds)), np.roll(np.arange(lengths.size), 1), lengths)


def test_optimizer_rows_are_each_members_bootstrap_the_permutation_test_and_welch_tost():
    rng = np.random.default_rng(9)
    sizes = np.array([2, 1, 3])
    adam, adamw = grouped_of(rng, 4, sizes), grouped_of(rng, 3, sizes, layer1_shift=0.3)  # layers differ
    # float32 perplexities: the table averages them in float64
    ppl_adam, ppl_adamw = np.array([20.0, 20.3, 19.8, 20.1], np.float32), np.array([20.4, 20.1, 20.5], np.float32)
    table = optimizer_tests(adam, adamw, ppl_adam, ppl_adamw, n_boot=30, permutations=99, seed=5, confidence=0.9,
                            perplexity_margin=0.03)  # fmt: skip
    assert list(table.columns) == OPTIMIZER_TEST_COLUMNS
    members = [
        stability_replicates(draw_resamples(30, 4, 3, 5), adam.observed, sizes),
        stability_replicates(draw_resamples(30, 3, 3, 6), adamw.observed, sizes),  # its own stream: seed + 1
    ]
    layers = table[table["statistic"] == "layer_stability"]
    atol = reduction_atol(np.float32, 3 + 4)
    for name, grouped in (("adam", adam), ("adamw", adamw)):
        n = len(grouped.seeds)
        best = np.tensordot(sizes / sizes.sum(), grouped.observed.astype(np.float64), axes=1).max(axis=-1)
        np.testing.assert_allclose(layers[name], best[~np.eye(n, dtype=bool)].mean(axis=(0, 2)), atol=atol)
    np.testing.assert_allclose(layers["difference"], layers["adamw"] - layers["adam"], atol=atol)
    low, high = quantiles(members[1]["layer"] - members[0]["layer"], 0.9)
    np.testing.assert_allclose(layers["ci_low"], low, atol=2 * atol)
    np.testing.assert_allclose(layers["ci_high"], high, atol=2 * atol)
    # the refits' pseudo-values are the permuted units, not the per-anchor means that share partners
    units = [pair_pseudo_values(member["pair_best"].mean(axis=-1)) for member in members]
    expected = permutation_test(units[0], units[1], 99, 5)["p_value"]
    np.testing.assert_array_equal(layers["permutation_p_value"], expected)
    np.testing.assert_array_equal(layers["p_value"], layers["unpaired_p_value"])  # unpaired: the Welch jackknife-t
    assert (
        layers["test"].eq("jackknife_welch").all()
        and layers["equivalent"].isna().all()
        and layers["margin"].isna().all()
    )
    assert layers["confidence"].eq(0.9).all() and layers["n_resamples"].eq(30).all()
    assert layers["n_adam"].eq(4).all() and layers["n_adamw"].eq(3).all() and list(layers["layer"]) == [0, 1]

    assert layers["permutation_p_value"].iloc[1] < layers["permutation_p_value"].iloc[0]  # per layer
    row = table[table["statistic"] == "perplexity"].iloc[0]
    ppl_adam, ppl_adamw = ppl_adam.astype(np.float64), ppl_adamw.astype(np.float64)
    margin = 0.03 * ppl_adam.mean()
    # TOST by scipy's Welch t-tests of the difference shifted by -margin and +margin
    p_lower = stats.ttest_ind(ppl_adamw + margin, ppl_adam, equal_var=False, alternative="greater").pvalue
    p_upper = stats.ttest_ind(ppl_adamw - margin, ppl_adam, equal_var=False, alternative="less").pvalue
    interval = stats.ttest_ind(ppl_adamw, ppl_adam, equal_var=False).confidence_interval(0.8)  # 1 - 2 alpha
    rtol = reduction_rtol(np.float64, 16)
    assert row["p_value"] == pytest.approx(max(p_lower, p_upper), rel=rtol)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((interval.low, interval.high), rel=rtol)
    assert (row["adam"], row["adamw"]) == pytest.approx((ppl_adam.mean(), ppl_adamw.mean()), rel=rtol)
    assert row["difference"] == pytest.approx(ppl_adamw.mean() - ppl_adam.mean(), rel=rtol)
    assert row["margin"] == pytest.approx(margin, rel=rtol) and row["confidence"] == pytest.approx(0.8, rel=rtol)
    assert row["layer"] == -1 and row["test"] == "tost" and row["n_resamples"] == 0
    assert (row["n_adam"], row["n_adamw"]) == (4, 3)
    assert row["equivalent"] is bool(max(p_lower, p_upper) < 0.1)  # alpha = 1 - confidence


def test_pairing_problems_name_what_differs_and_none_is_returned_for_a_seed_paired_pair():
    from headstab.sections.optimizer_tests import pairing_problem

    adam, adamw = optimizer_pair(np.random.default_rng(10))
    assert pairing_problem(adam, adamw) is None
    other = dataclasses.replace(adamw, seeds=[1, 2, 3, 4, 5, 7])
    assert pairing_problem(adam, other) == (
        "the members have other refits (seeds [1, 2, 3, 4, 5, 6] and [1, 2, 3, 4, 5, 7])"
    )
    two = [dataclasses.replace(m, seeds=[1, 2]) for m in (adam, adamw)]
    assert pairing_problem(*two) == "per-seed pseudo-values need at least 3 refits; the members have 2"
    three = [dataclasses.replace(m, seeds=[1, 2, 3]) for m in (adam, adamw)]
    assert pairing_problem(*three) is None
    message = "the members' prompt groups differ (other token lengths or group sizes)"
    assert pairing_problem(adam, dataclasses.replace(adamw, group_sizes=adamw.group_sizes[::-1])) == message
    assert pairing_problem(adam, dataclasses.replace(adamw, lengths=adamw.lengths + 1)) == message


def test_perplexities_given_as_arrays_follow_the_seeds_and_without_entropy_the_partial_r_is_nan():
    adam, adamw = optimizer_pair(np.random.default_rng(11), shift=0.0)
    adam, adamw = (dataclasses.replace(m, entropy=None) for m in (adam, adamw))
    ppl = np.array([20.0, 24.0, 19.0, 27.0, 22.0, 25.0])
    table = optimizer_tests(adam, adamw, ppl, ppl[::-1].copy(), n_boot=20, permutations=99, seed=0,
                            confidence=0.9, perplexity_margin=0.02, paired=True)  # fmt: skip
    by_series = optimizer_tests(adam, adamw, pd.Series(ppl, index=SEEDS), pd.Series(ppl[::-1], index=SEEDS),
                                n_boot=20, permutations=99, seed=0, confidence=0.9, perplexity_margin=0.02,
                                paired=True)  # fmt: skip
    pd.testing.assert_frame_equal(table, by_series)
    row = table[table["statistic"] == "perplexity"].iloc[0]
    d = ppl[::-1] - ppl  # seed by seed
    assert row["difference"] == pytest.approx(d.mean()) and row["n_pairs"] == 6
    assert row["margin"] == pytest.approx(0.02 * ppl.mean())
    layers = table[table["statistic"] != "perplexity"]
    assert layers[["optimizer_r", "optimizer_partial_r", "optimizer_partial_r_ci_low"]].isna().all().all()
    assert layers[["entropy_adam", "entropy_adamw"]].isna().all().all()
    unpaired = optimizer_tests(adam, adamw, ppl, ppl[:5], n_boot=20, permutations=99, seed=0, confidence=0.9,
                               perplexity_margin=0.02, paired=False)  # fmt: skip
    assert unpaired[unpaired["statistic"] == "perplexity"]["n_adamw"].iloc[0] == 5  # an array of other length


def expected_partial_interval(adam, adamw, paired, n_boot, seed, confidence):
    """The partial-r interval by its definition: seeds drawn with `seed` (AdamW's the same draws when paired, its
    own next otherwise), each head weighted by its refit's count, the percentile interval per layer."""
    heads = [
        stability_replicates(draw_resamples(2, len(g.seeds), len(g.group_sizes), 0), g.observed, g.group_sizes)[
            "head_estimate"
        ]
        for g in (adam, adamw)
    ]
    n_a, n_w, n_heads = heads[0].shape[0], heads[1].shape[0], heads[0].shape[2]
    rng = np.random.default_rng(seed)
    draw_a = rng.integers(n_a, size=(n_boot, n_a))
    draw_w = draw_a if paired else rng.integers(n_w, size=(n_boot, n_w))
    counts = [np.stack([np.bincount(row, minlength=n) for row in d]) for d, n in ((draw_a, n_a), (draw_w, n_w))]
    weights = np.repeat(np.concatenate(counts, axis=1), n_heads, axis=1)
    optimizer = np.repeat([0.0] * n_a + [1.0] * n_w, n_heads)
    out = {"r": [], "low": [], "high": []}
    for layer in range(heads[0].shape[1]):
        values = np.concatenate([heads[0][:, layer].ravel(), heads[1][:, layer].ravel()])
        entropy = np.concatenate([adam.entropy[:, layer].ravel(), adamw.entropy[:, layer].ravel()])
        out["r"].append(np.corrcoef(optimizer, values)[0, 1])
        replicates = partial_correlation(optimizer, values, entropy, weights)
        alpha = (1 - confidence) / 2
        out["low"].append(np.quantile(replicates, alpha))
        out["high"].append(np.quantile(replicates, 1 - alpha))
    return {key: np.array(value) for key, value in out.items()}


def test_the_paired_table_keeps_the_unpaired_tests_beside_and_is_seeded():
    adam, adamw = optimizer_pair(np.random.default_rng(12), shift=0.01)
    ppl_adam = pd.Series([20.0, 20.4, 19.8, 20.2, 20.1, 19.9], index=SEEDS)
    ppl_adamw = ppl_adam + np.array([0.05, -0.02, 0.03, 0.0, 0.04, -0.01])
    kwargs = dict(n_boot=30, permutations=20, seed=3, confidence=0.9, perplexity_margin=0.05, paired=True)
    table = optimizer_tests(adam, adamw, ppl_adam, ppl_adamw, **kwargs)
    pd.testing.assert_frame_equal(table, optimizer_tests(adam, adamw, ppl_adam, ppl_adamw, **kwargs))
    assert list(table.index) == list(range(len(table)))  # 4 statistics x 2 layers + perplexity, one index
    layers = table[table["statistic"] == "layer_stability"]
    assert (layers["unpaired_test"] == "jackknife_welch").all() and (layers["test"] == "jackknife_t").all()
    # unpaired: each member's own resamples (AdamW's from seed + 1), the percentile interval of the difference
    reps = [
        stability_replicates(draw_resamples(30, 6, 3, seed), g.observed, g.group_sizes)
        for seed, g in ((3, adam), (4, adamw))
    ]
    low, high = quantiles(reps[1]["layer"] - reps[0]["layer"], 0.9)
    atol = 2 * reduction_atol(np.float32, 6 + len(SEEDS))
    np.testing.assert_allclose(layers["unpaired_ci_low"], low, atol=atol)
    np.testing.assert_allclose(layers["unpaired_ci_high"], high, atol=atol)
    # 2**6 sign vectors > 20 permutations: random signs drawn with the table's seed
    paired_reps = [stability_replicates(draw_resamples(30, 6, 3, 3), g.observed, g.group_sizes) for g in (adam, adamw)]
    pseudo = [pair_pseudo_values(r["pair_best"].mean(axis=-1)) for r in paired_reps]
    np.testing.assert_array_equal(layers["sign_flip_p_value"], sign_flip_test(pseudo[1] - pseudo[0], 20, 3)["p_value"])
    partial = expected_partial_interval(adam, adamw, True, 30, 3, 0.9)
    np.testing.assert_allclose(layers["optimizer_r"], partial["r"], rtol=1e-6)
    np.testing.assert_allclose(layers["optimizer_partial_r_ci_low"], partial["low"], rtol=1e-6)
    np.testing.assert_allclose(layers["optimizer_partial_r_ci_high"], partial["high"], rtol=1e-6)
    # layer rows hold no equivalence test: None, and a NaN margin in a float column
    assert (
        layers["equivalent"].map(lambda v: v is None).all()
        and layers["unpaired_equivalent"].map(lambda v: v is None).all()
    )
    assert table["margin"].dtype == np.float64 and layers["margin"].isna().all()
    row = table[table["statistic"] == "perplexity"].iloc[0]
    # the primary is the paired TOST at alpha = 1 - confidence, Welch's TOST beside it
    d = (ppl_adamw - ppl_adam).to_numpy()
    se = d.std(ddof=1) / np.sqrt(6)
    assert row["ci_high"] == pytest.approx(d.mean() + stats.t.ppf(0.9, 5) * se, rel=1e-12)
    margin = 0.05 * ppl_adam.mean()
    welch = stats.ttest_ind(ppl_adamw.to_numpy(), ppl_adam.to_numpy(), equal_var=False).confidence_interval(0.8)
    assert (row["unpaired_ci_low"], row["unpaired_ci_high"]) == pytest.approx((welch.low, welch.high), rel=1e-12)
    p_lower = stats.ttest_ind(ppl_adamw + margin, ppl_adam, equal_var=False, alternative="greater").pvalue
    p_upper = stats.ttest_ind(ppl_adamw - margin, ppl_adam, equal_var=False, alternative="less").pvalue
    assert row["unpaired_p_value"] == pytest.approx(max(p_lower, p_upper), rel=1e-12)
    assert row["unpaired_equivalent"] is True and row["unpaired_test"] == "tost"


def test_where_entropy_is_the_optimizer_nothing_is_left_for_the_partial_r():
    adam, adamw = optimizer_pair(np.random.default_rng(13), shift=0.05)
    entropy = [m.entropy.copy() for m in (adam, adamw)]
    entropy[0][:, 1], entropy[1][:, 1] = 0.0, 1.0  # layer 1: entropy tells the optimizers apart exactly
    adam, adamw = (dataclasses.replace(m, entropy=e) for m, e in zip((adam, adamw), entropy, strict=True))
    table = optimizer_tests(adam, adamw, np.full(6, 20.0), np.full(6, 20.0) + np.arange(6) * 0.01, n_boot=20,
                            permutations=99, seed=0, confidence=0.9, perplexity_margin=0.02, paired=True)  # fmt: skip
    layers = table[table["statistic"] == "layer_stability"].set_index("layer")
    columns = ["optimizer_partial_r", "optimizer_partial_r_ci_low", "optimizer_partial_r_ci_high"]
    assert layers[[*columns, "optimizer_r"]].dtypes.eq(np.float64).all()
    assert layers.loc[1, columns].isna().all() and layers.loc[0, columns].notna().all()
    assert layers["optimizer_r"].notna().all()


def test_the_unpaired_partial_r_draws_each_members_seeds_on_its_own():
    rng = np.random.default_rng(14)
    sizes = np.array([2, 1, 3])
    adam, adamw = grouped_of(rng, 4, sizes), grouped_of(rng, 3, sizes, layer1_shift=0.3)
    adam = dataclasses.replace(adam, entropy=rng.random((4, 2, 3)))
    adamw = dataclasses.replace(adamw, entropy=rng.random((3, 2, 3)))
    table = optimizer_tests(adam, adamw, np.full(4, 20.0) + np.arange(4) * 0.1, np.full(3, 20.0) + np.arange(3) * 0.1,
                            n_boot=25, permutations=99, seed=2, confidence=0.8, perplexity_margin=0.02)  # fmt: skip
    layers = table[table["statistic"] == "layer_stability"]
    partial = expected_partial_interval(adam, adamw, False, 25, 2, 0.8)
    np.testing.assert_allclose(layers["optimizer_partial_r_ci_low"], partial["low"], rtol=1e-6)
    np.testing.assert_allclose(layers["optimizer_partial_r_ci_high"], partial["high"], rtol=1e-6)
    one_sided = optimizer_tests(adam, dataclasses.replace(adamw, entropy=None), np.full(4, 20.0), np.full(3, 20.1),
                                n_boot=25, permutations=99, seed=2, confidence=0.8, perplexity_margin=0.02)  # fmt: skip
    assert one_sided["optimizer_partial_r"].isna().all()  # one member without entropy: nothing to control for


def run_unpaired(adam, adamw, **kwargs):
    options = dict(n_boot=10, permutations=99, seed=0, confidence=0.9, perplexity_margin=0.02) | kwargs
    return optimizer_tests(adam, adamw, np.full(len(adam.seeds), 20.0) + np.arange(len(adam.seeds)) * 0.1,
                           np.full(len(adamw.seeds), 20.0) + np.arange(len(adamw.seeds)) * 0.1, **options)  # fmt: skip


JACKKNIFE = ["jackknife", "jackknife_ci_low", "jackknife_ci_high", "unpaired_jackknife_ci_low"]
JACKKNIFE += ["unpaired_jackknife_ci_high", "p_value", "unpaired_p_value"]


def test_the_jackknife_needs_the_same_groups_two_of_them_and_three_refits_a_member():
    rng = np.random.default_rng(15)

    def jackknife(adam, adamw):
        layers = run_unpaired(adam, adamw)
        layers = layers[layers["statistic"] != "perplexity"]
        assert layers[JACKKNIFE].dtypes.eq(np.float64).all()
        return layers[JACKKNIFE]

    two_groups = np.array([2, 3])
    assert jackknife(grouped_of(rng, 3, two_groups), grouped_of(rng, 4, two_groups)).notna().all().all()
    assert jackknife(grouped_of(rng, 4, two_groups), grouped_of(rng, 3, two_groups)).notna().all().all()
    assert jackknife(grouped_of(rng, 2, two_groups), grouped_of(rng, 4, two_groups)).isna().all().all()
    assert jackknife(grouped_of(rng, 4, two_groups), grouped_of(rng, 2, two_groups)).isna().all().all()
    one_group = np.array([5])
    assert jackknife(grouped_of(rng, 4, one_group), grouped_of(rng, 4, one_group)).isna().all().all()
    other = grouped_of(rng, 4, np.array([3, 2]))  # other group sizes: no prompt group to leave out of both
    assert jackknife(grouped_of(rng, 4, two_groups), other).isna().all().all()
    assert jackknife(other, grouped_of(rng, 4, two_groups)).isna().all().all()


def test_above_null_rows_subtract_each_members_own_null_also_in_the_left_out_groups():
    adam, adamw = optimizer_pair(np.random.default_rng(16), shift=0.02, refit_sd=0.02)
    adamw = dataclasses.replace(adamw, observed=adamw.observed + np.float32(0.01) * adam.observed)
    adam = dataclasses.replace(adam, null=np.full_like(adam.null, 0.125))  # a flat null: its best match is 0.125
    adamw = dataclasses.replace(adamw, null=np.full_like(adamw.null, 0.375))
    table = optimizer_tests(adam, adamw, np.full(6, 20.0), np.full(6, 20.0), n_boot=20, permutations=99, seed=0,
                            confidence=0.9, perplexity_margin=0.02, paired=True)  # fmt: skip
    raw = table[table["statistic"] == "layer_stability"].set_index("layer")
    above = table[table["statistic"] == "layer_above_null"].set_index("layer")
    atol = reduction_atol(np.float32, 6 * 6 * 3)
    np.testing.assert_allclose(above["adam"], raw["adam"] - 0.125, atol=atol)
    np.testing.assert_allclose(above["adamw"], raw["adamw"] - 0.375, atol=atol)
    for column in ("jackknife", "jackknife_ci_low", "jackknife_ci_high", "unpaired_jackknife_ci_high"):
        np.testing.assert_allclose(above[column], raw[column] - 0.25, atol=atol)


def test_content_rows_need_the_content_variant_in_both_members():
    adam, adamw = optimizer_pair(np.random.default_rng(17))
    for a, w in (
        (adam, dataclasses.replace(adamw, content_null=None)),
        (dataclasses.replace(adam, content_observed=None), adamw),
    ):
        table = run_unpaired(a, w)
        assert set(table["statistic"]) == {"layer_stability", "layer_above_null", "perplexity"}


def test_the_warning_names_the_pairing_problem_only_when_pairing_was_asked_for(caplog):
    adam, adamw = optimizer_pair(np.random.default_rng(18))
    other = dataclasses.replace(adamw, seeds=[1, 2, 3, 4, 5, 7])
    with caplog.at_level(logging.WARNING):
        run_unpaired(adam, other, paired=True)
    assert caplog.messages == [
        "Adam vs AdamW tested unpaired: the members have other refits (seeds [1, 2, 3, 4, 5, 6] and [1, 2, 3, 4, 5, 7])"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        run_unpaired(adam, other, paired=False)
    assert caplog.messages == []


def test_perplexities_mix_series_and_arrays_by_seed_and_are_averaged_in_float64():
    adam, adamw = optimizer_pair(np.random.default_rng(19))
    ppl = np.array([20.1, 24.3, 19.7, 27.2, 22.9, 25.4])
    options = dict(n_boot=10, permutations=99, seed=0, confidence=0.9, perplexity_margin=0.02, paired=True)
    mixed = optimizer_tests(adam, adamw, pd.Series(ppl, index=SEEDS), ppl + 0.01, **options)
    row = mixed[mixed["statistic"] == "perplexity"].iloc[0]
    assert row["n_pairs"] == 6 and row["difference"] == pytest.approx(0.01, rel=1e-9)
    ppl32 = pd.Series(ppl.astype(np.float32), index=SEEDS)
    table = optimizer_tests(adam, adamw, ppl32, ppl32 + np.float32(0.5), **options)
    row = table[table["statistic"] == "perplexity"].iloc[0]
    assert row["adam"] == ppl32.to_numpy(np.float64).mean()
    assert row["margin"] == 0.02 * ppl32.to_numpy(np.float64).mean()
    unpaired = run_unpaired(adam, dataclasses.replace(adamw, seeds=[1, 2, 3, 4, 5, 7]))
    assert unpaired[unpaired["statistic"] == "perplexity"]["n_pairs"].iloc[0] == 0


def test_labels_are_taken_at_the_designs_number_of_refits(monkeypatch):
    from headstab.statistics import calibration

    methods = dict(calibration.METHODS)
    for name in ("jackknife_unpaired_p", "multibootstrap_unpaired_difference", "permutation_unpaired"):
        methods[name] = dataclasses.replace(methods[name], min_n=5)
    monkeypatch.setattr(calibration, "METHODS", methods)
    adam, adamw = optimizer_pair(np.random.default_rng(20))
    for other, label in (([1, 2, 3, 4, 5, 7], "calibrated"), ([1, 2, 3, 4], "descriptive")):
        member = grouped_of(np.random.default_rng(21), len(other), adam.group_sizes)
        member = dataclasses.replace(member, lengths=adam.lengths, partners=adam.partners, seeds=other)
        table = run_unpaired(adam, member, paired=True)
        rows = table[table["statistic"] != "perplexity"]
        for column in ("p_calibration", "ci_calibration", "unpaired_p_calibration", "permutation_calibration"):
            assert set(rows[column]) == {label}, column


def test_members_without_spread_give_a_zero_width_interval_without_warnings():
    adam, adamw = optimizer_pair(np.random.default_rng(22), refit_sd=0.0)
    flat = np.broadcast_to(adam.observed[:, :1, 1:2], adam.observed.shape).copy()  # every pair as pair (0, 1)
    adam, adamw = (dataclasses.replace(m, observed=flat + np.float32(s)) for m, s in ((adam, 0.0), (adamw, 0.02)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        table = run_unpaired(adam, adamw)
    layers = table[table["statistic"] == "layer_stability"]
    np.testing.assert_allclose(layers["difference"], 0.02, atol=reduction_atol(np.float32, 12))


def test_the_jackknife_scales_with_the_similarities():
    adam, adamw = optimizer_pair(np.random.default_rng(23), shift=0.02, refit_sd=0.05)
    scale = np.float32(2.0**-30)  # a power of two: every similarity scaled exactly
    small = [dataclasses.replace(m, observed=m.observed * scale, null=m.null * scale) for m in (adam, adamw)]
    options = dict(n_boot=10, permutations=99, seed=0, confidence=0.9, perplexity_margin=0.02, paired=True)
    ppl = np.full(6, 20.0) + np.arange(6) * 0.1
    tables = [optimizer_tests(a, w, ppl, ppl, **options) for a, w in ((adam, adamw), small)]
    rows = [t[t["statistic"].isin(["layer_stability", "layer_above_null"])] for t in tables]
    for column in ("jackknife", "jackknife_ci_low", "jackknife_ci_high", "unpaired_jackknife_ci_low"):
        np.testing.assert_allclose(rows[1][column], rows[0][column] * float(scale), rtol=1e-6, err_msg=column)
    np.testing.assert_allclose(rows[1]["p_value"], rows[0]["p_value"], rtol=1e-6)


def test_columns_without_a_value_hold_float_nan():
    adam, adamw = optimizer_pair(np.random.default_rng(24))
    adam, adamw = (dataclasses.replace(m, entropy=None) for m in (adam, adamw))
    other = dataclasses.replace(adamw, seeds=[1, 2, 3, 4, 5, 7])
    table = run_unpaired(adam, other, paired=True)  # no sign-flip test unpaired, no partial r without entropy
    columns = ["sign_flip_p_value", "entropy_adam", "entropy_adamw", "optimizer_r", "optimizer_partial_r"]
    columns += ["optimizer_partial_r_ci_low", "optimizer_partial_r_ci_high"]
    assert table[columns].dtypes.eq(np.float64).all() and table[columns].isna().all().all()
    two = grouped_of(np.random.default_rng(25), 2, np.array([2, 3]))  # two refits: no pseudo-values to permute
    table = run_unpaired(two, grouped_of(np.random.default_rng(26), 4, np.array([2, 3])))
    assert table["permutation_p_value"].dtype == np.float64 and table["permutation_p_value"].isna().all()


def test_a_layer_whose_heads_all_agree_alike_has_no_correlation_with_the_optimizer():
    adam, adamw = optimizer_pair(np.random.default_rng(13), shift=0.0)
    observed = adam.observed.copy()
    observed[:, :, :, 1] = np.float32(0.5)  # layer 1: every head of every refit matches at 0.5
    adam, adamw = (dataclasses.replace(m, observed=observed) for m in (adam, adamw))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no correlation of a constant is attempted
        table = run_unpaired(adam, adamw, paired=True)
    layers = table[table["statistic"] == "layer_stability"].set_index("layer")
    assert np.isnan(layers.loc[1, "optimizer_r"]) and np.isfinite(layers.loc[0, "optimizer_r"])
