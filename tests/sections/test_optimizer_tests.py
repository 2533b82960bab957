"""Adam vs AdamW tested paired by seed: pseudo-values, the sign-flip test, the paired bootstrap and TOST."""

from __future__ import annotations

import dataclasses
import logging

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


def twins(rng, shift=0.02, n_layers=2, n_heads=3, sizes=(2, 3, 1), refit_sd=0.2):
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
    adam, adamw = twins(np.random.default_rng(2))
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
    adam, adamw = twins(np.random.default_rng(3), shift=0.0)
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


def test_twins_that_cannot_be_paired_are_tested_unpaired_and_say_why(caplog):
    adam, adamw = twins(np.random.default_rng(5))
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
    adam, adamw = twins(rng, shift=0.05, refit_sd=0.01)
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
    adam, adamw = twins(np.random.default_rng(8), shift=0.01)
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
    adam, adamw = twins(np.random.default_rng(9), shift=0.02, refit_sd=0.02)
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


def test_pairing_problems_name_what_differs_and_none_is_returned_for_true_twins():
    from headstab.sections.optimizer_tests import pairing_problem

    adam, adamw = twins(np.random.default_rng(10))
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
    adam, adamw = twins(np.random.default_rng(11), shift=0.0)
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
