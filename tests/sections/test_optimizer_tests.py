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
from headstab.statistics.hypothesis import pair_pseudo_values, paired_tost, sign_flip_test
from headstab.statistics.resampling import partial_correlation

SEEDS = [1, 2, 3, 4, 5, 6]


def test_pseudo_values_average_to_the_pair_mean_and_leave_one_refit_out_by_hand():
    values = np.array([[0.0, 1.0, 2.0], [3.0, 0.0, 5.0], [6.0, 7.0, 0.0]])  # the diagonal is never read
    pseudo = pair_pseudo_values(values + np.diag([9.0, 9.0, 9.0]))
    mean = (1 + 2 + 3 + 5 + 6 + 7) / 6
    without = {0: (5 + 7) / 2, 1: (2 + 6) / 2, 2: (1 + 3) / 2}  # mean over the pairs left without refit s
    np.testing.assert_allclose(
        pseudo, [3 * mean - 2 * without[s] for s in range(3)], atol=reduction_atol(np.float64, 6, 7)
    )
    assert pseudo.mean() == pytest.approx(mean, abs=reduction_atol(np.float64, 6, 7))
    with pytest.raises(ValueError, match="at least 3 refits"):
        pair_pseudo_values(np.ones((2, 2)))


def test_sign_flip_enumerates_every_sign_vector_when_they_are_few():
    out = sign_flip_test(np.array([1.0, 1.0, 1.0]), 999, seed=0)
    assert out["n_signs"] == 8 and out["p_value"] == pytest.approx(2 / 8)  # all +, all -
    out = sign_flip_test(np.array([[1.0, 1.0], [1.0, -1.0], [1.0, 0.0]]), 999, seed=0)
    assert out["p_value"].tolist() == pytest.approx([2 / 8, 1.0])  # trailing axes tested separately
    out = sign_flip_test(np.full(12, 0.5), 999, seed=1)  # 4,096 sign vectors > 999: Monte Carlo
    assert out["n_signs"] == 999 and out["p_value"] == pytest.approx(1 / 1000, abs=2 / 1000)
    with pytest.raises(ValueError, match="at least two paired differences"):
        sign_flip_test(np.array([1.0]), 99, seed=0)


def test_sign_flip_of_pseudo_values_holds_its_level_where_per_anchor_means_do_not():
    """Null model: each refit's agreement = its anchor effect + its partner's effect + noise, both members
    drawn alike, the pairing shared. Per-anchor means share the partners and reject too often."""
    rng = np.random.default_rng(0)
    n, sims, off = 8, 300, ~np.eye(8, dtype=bool)
    rejected = {"anchor": 0, "pseudo": 0}
    for sim in range(sims):
        shared = rng.normal(size=n)
        members = []
        for _ in range(2):
            anchor, partner = 0.5 * shared + rng.normal(size=n), 0.5 * shared + rng.normal(size=n)
            members.append(anchor[:, None] + partner[None, :] + 0.5 * rng.normal(size=(n, n)))
        per_anchor = [np.where(off, m, 0).sum(axis=1) / (n - 1) for m in members]
        pseudo = [pair_pseudo_values(m) for m in members]
        rejected["anchor"] += sign_flip_test(per_anchor[1] - per_anchor[0], 256, sim)["p_value"] < 0.05
        rejected["pseudo"] += sign_flip_test(pseudo[1] - pseudo[0], 256, sim)["p_value"] < 0.05
    assert 0.02 <= rejected["pseudo"] / sims <= 0.09  # binomial 95% range of a 5% test over 300 datasets
    assert rejected["anchor"] / sims > 0.09


def test_paired_tost_is_two_one_sample_t_tests_of_the_differences():
    x = np.array([20.0, 25.0, 18.0, 30.0, 22.0])
    y = x + np.array([0.1, -0.05, 0.08, 0.02, 0.0])
    out = paired_tost(x, y, margin=0.4, alpha=0.05)
    d = y - x
    p_lower = stats.ttest_1samp(d + 0.4, 0.0, alternative="greater").pvalue
    p_upper = stats.ttest_1samp(d - 0.4, 0.0, alternative="less").pvalue
    interval = stats.ttest_1samp(d, 0.0).confidence_interval(0.9)
    rtol = reduction_rtol(np.float64, 16)
    assert out["p_value"] == pytest.approx(max(p_lower, p_upper), rel=rtol) and out["equivalent"]
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((interval.low, interval.high), rel=rtol)
    with pytest.raises(ValueError, match="two equal-length series"):
        paired_tost(x, y[:-1], margin=0.4)


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
    assert (layers["test"] == "sign_flip").all() and (layers["n_pairs"] == 6).all()
    np.testing.assert_allclose(layers["p_value"], 2 / 64)  # every per-seed difference 0.02: the extreme 2 of 64
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
    np.testing.assert_allclose(layers["p_value"], sign_flip_test(pseudo[1] - pseudo[0], 99, 4)["p_value"])


def test_twins_that_cannot_be_paired_are_tested_unpaired_and_say_why(caplog):
    adam, adamw = twins(np.random.default_rng(5))
    other = dataclasses.replace(adamw, seeds=[1, 2, 3, 4, 5, 7])
    with caplog.at_level(logging.WARNING):
        table = optimizer_tests(adam, other, np.full(6, 20.0), np.full(6, 20.1) + np.arange(6) * 0.01, n_boot=20,
                                permutations=99, seed=0, confidence=0.9, perplexity_margin=0.02, paired=True)  # fmt: skip
    assert (table["design"] == "unpaired").all() and "other refits" in caplog.text
    layers = table[table["statistic"] == "layer_stability"]
    assert (layers["test"] == "permutation").all() and (layers["n_pairs"] == 0).all()
    np.testing.assert_array_equal(layers["p_value"], layers["unpaired_p_value"])
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
