"""Jackknife-t intervals of stability: leave-one-group-out best matches, each level's parts by hand, the
interval's formula, and coverage where the percentile multi-bootstrap misses (docs/statistics.md)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers.tolerances import reduction_atol
from scipy import stats

from headstab.similarity.prompt_groups import GroupedSimilarity
from headstab.statistics.bootstrap import draw_resamples, percentile_interval, stability_replicates
from headstab.statistics.hypothesis import pair_pseudo_values
from headstab.statistics.jackknife import (
    JACKKNIFE_COLUMNS,
    jackknife_columns,
    jackknife_parts,
    jackknife_scope,
    jackknife_t_interval,
    leave_one_group_out,
)

ATOL = reduction_atol(np.float64, 64)


def grouped_tensor(rng, n_groups=4, n_seeds=4, n_layers=2, n_heads=3):
    values = rng.random((n_groups, n_seeds, n_seeds, n_layers, n_heads, n_heads))
    return (values + values.transpose(0, 2, 1, 3, 5, 4)) / 2


def test_leave_one_group_out_is_the_best_match_of_the_other_groups_weighted_by_size():
    rng = np.random.default_rng(0)
    grouped, sizes = grouped_tensor(rng).astype(np.float32), np.array([1, 2, 3, 4])
    loo = leave_one_group_out(grouped, sizes)
    assert loo.shape == (4, 4, 4, 2, 3) and loo.dtype == np.float64
    for g in range(4):
        keep = [k for k in range(4) if k != g]
        mean = sum(sizes[k] * grouped[k].astype(np.float64) for k in keep) / sizes[keep].sum()
        np.testing.assert_allclose(loo[g], mean.max(axis=-1), atol=reduction_atol(np.float32, 4))
    with pytest.raises(ValueError, match="at least 2 groups; got 1"):
        leave_one_group_out(grouped[:1], sizes[:1])


def test_pooled_parts_are_the_pair_pseudo_values_and_the_pooled_statistic_without_each_group():
    rng = np.random.default_rng(1)
    pair_best, loo = rng.random((5, 5, 2, 3)), rng.random((6, 5, 5, 2, 3))
    parts = jackknife_parts(pair_best, loo, "pooled")
    pseudo = pair_pseudo_values(pair_best.mean(axis=-1))
    off = ~np.eye(5, dtype=bool)
    np.testing.assert_allclose(parts["estimate"], pair_best[off].mean(axis=(0, 2)), atol=ATOL)
    np.testing.assert_allclose(parts["refit_var"], pseudo.var(axis=0, ddof=1) / 5, atol=ATOL)
    assert parts["refit_df"] == 4
    np.testing.assert_allclose(parts["groups"], np.stack([g[off].mean(axis=(0, 2)) for g in loo]), atol=ATOL)


def test_per_anchor_parts_keep_the_anchor_and_treat_its_pair_refits_as_the_sample():
    rng = np.random.default_rng(2)
    pair_best, loo = rng.random((4, 4, 2, 3)), rng.random((5, 4, 4, 2, 3))
    head = jackknife_parts(pair_best, loo, "head")
    partners = pair_best[1, [0, 2, 3]]  # anchor 1's values against refits 0, 2, 3: [partner, layer, head]
    np.testing.assert_allclose(head["estimate"][1], partners.mean(axis=0), atol=ATOL)
    np.testing.assert_allclose(head["refit_var"][1], partners.var(axis=0, ddof=1) / 3, atol=ATOL)
    np.testing.assert_allclose(head["groups"][:, 1], loo[:, 1, [0, 2, 3]].mean(axis=1), atol=ATOL)
    assert head["refit_df"] == 2
    layer = jackknife_parts(pair_best, loo, "layer")
    np.testing.assert_allclose(layer["estimate"][1], partners.mean(axis=(0, 2)), atol=ATOL)
    np.testing.assert_allclose(layer["refit_var"][1], partners.mean(axis=-1).var(axis=0, ddof=1) / 3, atol=ATOL)
    np.testing.assert_allclose(layer["groups"][:, 1], loo[:, 1, [0, 2, 3]].mean(axis=(1, 3)), atol=ATOL)
    with pytest.raises(ValueError, match="level must be one of"):
        jackknife_parts(pair_best, loo, "anchor")
    with pytest.raises(ValueError, match="at least 3 refits; got 2"):
        jackknife_parts(pair_best[:2, :2], loo[:, :2, :2], "pooled")


def test_the_interval_is_the_bias_corrected_estimate_plus_minus_t_of_satterthwaite_degrees():
    estimate, refit_var, refit_df = np.array([0.5]), np.array([0.0004]), 4.0
    groups = np.array([[0.52], [0.50], [0.51], [0.49]])  # 4 groups: mean 0.505
    out = jackknife_t_interval(estimate, refit_var, refit_df, groups, 0.9)
    group_var = 3 / 4 * ((groups - 0.505) ** 2).sum()  # 0.000375
    corrected = 0.5 - 3 * (0.505 - 0.5)
    total = 0.0004 + group_var
    df = total**2 / (0.0004**2 / 4 + group_var**2 / 3)
    half = stats.t.ppf(0.95, df) * np.sqrt(total)
    np.testing.assert_allclose(out["estimate"], corrected, atol=ATOL)
    np.testing.assert_allclose(out["df"], df, rtol=1e-12)
    np.testing.assert_allclose(out["se"], np.sqrt(total), rtol=1e-12)
    np.testing.assert_allclose([out["ci_low"][0], out["ci_high"][0]], [corrected - half, corrected + half], atol=ATOL)


def test_without_spread_the_interval_has_zero_width_and_the_level_is_checked():
    out = jackknife_t_interval(np.array([0.3]), np.array([0.0]), 2.0, np.full((5, 1), 0.3), 0.95)
    assert out["ci_low"][0] == out["ci_high"][0] == pytest.approx(0.3)
    only_groups = jackknife_t_interval(np.array([0.3]), np.array([0.0]), 2.0, np.array([[0.2], [0.4]]), 0.95)
    assert only_groups["df"][0] == pytest.approx(1.0)  # the groups' own G - 1 degrees
    for confidence in (0.0, 1.0):
        with pytest.raises(ValueError, match="statistics.confidence"):
            jackknife_t_interval(np.array([0.3]), np.array([0.0]), 2.0, np.full((5, 1), 0.3), confidence)


def test_table_columns_give_stability_null_and_their_difference_at_every_level():
    rng = np.random.default_rng(3)
    observed, null, sizes = grouped_tensor(rng), grouped_tensor(rng) * 0.5, np.array([2, 1, 3, 1])
    grouped = GroupedSimilarity(observed, null, sizes, [1, 2, 3, 4], np.zeros(7, int), np.full(7, 5))
    best = {
        kind: (np.tensordot(sizes / 7, x, axes=1)).max(axis=-1) for kind, x in (("observed", observed), ("null", null))
    }
    columns = jackknife_columns(grouped, best, 0.95)
    assert set(columns) == {"head", "layer", "pooled"}
    assert all(list(level) == JACKKNIFE_COLUMNS for level in columns.values())
    assert columns["head"]["jackknife"].shape == (4, 2, 3) and columns["pooled"]["jackknife_ci_low"].shape == (2,)
    loo = {kind: leave_one_group_out(x, sizes) for kind, x in (("observed", observed), ("null", null))}
    for level in ("head", "layer", "pooled"):
        for prefix, values, groups in (
            ("null_", best["null"], loo["null"]),
            ("above_null_", best["observed"] - best["null"], loo["observed"] - loo["null"]),
        ):
            parts = jackknife_parts(values, groups, level)
            interval = jackknife_t_interval(
                parts["estimate"], parts["refit_var"], parts["refit_df"], parts["groups"], 0.95
            )
            np.testing.assert_allclose(columns[level][f"{prefix}jackknife_ci_high"], interval["ci_high"], atol=ATOL)
    above = columns["pooled"]["above_null_jackknife"]
    np.testing.assert_allclose(above, columns["pooled"]["jackknife"] - columns["pooled"]["null_jackknife"], atol=ATOL)


def test_two_refits_or_one_group_give_nan_columns_and_cross_layer_rows_none():
    rng = np.random.default_rng(4)
    observed = grouped_tensor(rng, n_groups=1)
    grouped = GroupedSimilarity(observed, observed, np.array([3]), [1, 2, 3, 4], np.zeros(3, int), np.full(3, 5))
    best = {"observed": observed[0].max(axis=-1), "null": observed[0].max(axis=-1)}
    columns = jackknife_columns(grouped, best, 0.95)
    assert all(np.isnan(v).all() for level in columns.values() for v in level.values())
    assert columns["layer"]["jackknife"].shape == (4, 2)
    two = grouped_tensor(rng, n_seeds=2)
    grouped = GroupedSimilarity(two, two, np.ones(4, int), [1, 2], np.zeros(4, int), np.full(4, 5))
    best = {"observed": two.mean(axis=0).max(axis=-1), "null": two.mean(axis=0).max(axis=-1)}
    assert np.isnan(jackknife_columns(grouped, best, 0.95)["pooled"]["jackknife"]).all()
    same = {"jackknife": np.ones(2)}
    assert jackknife_scope(same, "same_layer", (2,)) is same
    cross = jackknife_scope(same, "cross_layer", (2,))
    assert list(cross) == JACKKNIFE_COLUMNS and np.isnan(cross["jackknife"]).all() and cross["jackknife"].shape == (2,)
    assert np.isnan(jackknife_scope(None, "same_layer", (3,))["null_jackknife_ci_low"]).all()


def test_the_jackknife_interval_covers_tied_candidates_at_5_refits_where_the_percentile_interval_does_not():
    # Candidate heads tie up to the partner heads' own levels (s.d. 0.01): the max of prompt means lies above
    # the max of the true means, the resampled maxima higher still, and 5 refits spread too little in a
    # bootstrap (docs/statistics.md, "Upward bias for a max of means"). Truth: 0.5 + 0.01 E max of 4 normals.
    n_groups, n_seeds, n_heads = 20, 5, 4
    truth = 0.5 + 0.01 * 1.0293753730039637
    rng = np.random.default_rng(5)
    covered = {"percentile": 0, "jackknife": 0}
    for dataset in range(60):
        refit, head = rng.normal(scale=0.01, size=n_seeds), rng.normal(scale=0.01, size=(n_seeds, n_heads))
        z = rng.standard_normal((n_groups, n_seeds, n_seeds, 1, n_heads, n_heads))
        grouped = (
            (0.5 + refit[:, None] + refit[None, :])[None, :, :, None, None, None]
            + head[:, None, None, :, None]
            + head[None, :, None, None, :]
            + 0.03 * (z + z.transpose(0, 2, 1, 3, 5, 4)) / np.sqrt(2)
            + rng.normal(scale=0.015, size=n_groups)[:, None, None, None, None, None]
        )
        sizes = np.full(n_groups, 5)
        reps = stability_replicates(draw_resamples(100, n_seeds, n_groups, seed=dataset), grouped, sizes)
        low, high = percentile_interval(reps["layer"], 0.95)
        covered["percentile"] += bool(low[0] <= truth <= high[0])
        parts = jackknife_parts(reps["pair_best"], leave_one_group_out(grouped, sizes), "pooled")
        out = jackknife_t_interval(parts["estimate"], parts["refit_var"], parts["refit_df"], parts["groups"], 0.95)
        covered["jackknife"] += bool(out["ci_low"][0] <= truth <= out["ci_high"][0])
    # measured 47 and 55 of 60 (0.78, 0.92); binomial s.d. about 3 and 2
    assert covered["percentile"] <= 51 and covered["jackknife"] >= 54, covered


def test_the_t_test_is_the_p_at_which_the_interval_reaches_zero():
    estimate, refit_var, groups = np.array([0.02, -0.01, 0.0]), np.array([1e-4, 4e-4, 1e-4]), np.zeros((5, 3))
    groups[:, 0] = [0.021, 0.019, 0.02, 0.022, 0.018]  # mean 0.02: no bias correction
    out = jackknife_t_interval(estimate, refit_var, 3.0, groups, 0.95)
    se = np.sqrt(refit_var + 4 / 5 * ((groups - groups.mean(axis=0)) ** 2).sum(axis=0))
    np.testing.assert_allclose(out["p_value"], 2 * stats.t.sf(np.abs(out["estimate"]) / se, out["df"]), rtol=1e-12)
    at_p = jackknife_t_interval(estimate[:1], refit_var[:1], 3.0, groups[:, :1], 1 - out["p_value"][0])
    assert at_p["ci_low"][0] == pytest.approx(0.0, abs=1e-12)  # the interval at level 1 - p just reaches 0
    flat = jackknife_t_interval(np.array([0.0, 0.2]), np.zeros(2), 3.0, np.array([[0.0, 0.2], [0.0, 0.2]]), 0.95)
    assert flat["p_value"].tolist() == [1.0, 0.0]  # nothing varies: 0 is the value, or it is not


def test_the_jackknife_t_test_holds_its_level_where_a_test_over_seeds_alone_does_not():
    """Two optimizer-pair members of one population answer the same prompts alike but not identically (group
    effects correlated 0.8): a sign-flip test of the seeds' pseudo-value differences holds the prompts fixed and takes their
    difference for the optimizer's; the jackknife-t test leaves the groups out of both members at once."""
    from headstab.statistics.hypothesis import sign_flip_test

    rng = np.random.default_rng(6)
    n_seeds, n_groups, n_heads, datasets = 20, 20, 3, 150
    sizes = np.full(n_groups, 5)
    rejected = {"sign_flip": 0, "jackknife": 0}
    for dataset in range(datasets):
        shared_refits, shared_groups = rng.normal(size=n_seeds), rng.normal(size=n_groups)
        members = []
        for _ in range(2):
            refit = 0.004 * (0.5 * shared_refits + np.sqrt(0.75) * rng.normal(size=n_seeds))
            group = 0.02 * (0.8 * shared_groups + 0.6 * rng.normal(size=n_groups))
            z = rng.standard_normal((n_groups, n_seeds, n_seeds, 1, n_heads, n_heads))
            values = (refit[:, None] + refit[None, :])[None, :, :, None, None, None] + group[
                :, None, None, None, None, None
            ]
            members.append(0.5 + values + 0.03 * (z + z.transpose(0, 2, 1, 3, 5, 4)) / np.sqrt(2))
        best = [np.tensordot(sizes / sizes.sum(), m, axes=1).max(axis=-1) for m in members]
        pseudo = [pair_pseudo_values(b.mean(axis=-1)) for b in best]
        d = pseudo[1] - pseudo[0]
        rejected["sign_flip"] += sign_flip_test(d, 999, dataset)["p_value"][0] < 0.05
        parts = [jackknife_parts(b, leave_one_group_out(m, sizes), "pooled") for b, m in zip(best, members)]
        difference = parts[1]["estimate"] - parts[0]["estimate"]
        test = jackknife_t_interval(difference, d.var(axis=0, ddof=1) / n_seeds, n_seeds - 1,
                                    parts[1]["groups"] - parts[0]["groups"], 0.95)  # fmt: skip
        rejected["jackknife"] += test["p_value"][0] < 0.05
    # measured: the sign-flip test rejected in 46 of 150 (0.31), the jackknife-t test in 10 (0.067)
    assert rejected["sign_flip"] / datasets > 0.2, rejected
    assert 0.01 <= rejected["jackknife"] / datasets <= 0.1, rejected  # binomial range of a 5% test, 150 datasets


def test_three_refits_and_two_groups_are_enough_for_finite_columns():
    rng = np.random.default_rng(5)
    observed, null, sizes = (
        grouped_tensor(rng, n_groups=2, n_seeds=3),
        grouped_tensor(rng, n_groups=2, n_seeds=3),
        [2, 1],
    )
    grouped = GroupedSimilarity(observed, null, np.array(sizes), [1, 2, 3], np.zeros(3, int), np.full(3, 5))
    best = {
        kind: np.tensordot(np.array(sizes) / 3, x, axes=1).max(axis=-1)
        for kind, x in (("observed", observed), ("null", null))
    }
    columns = jackknife_columns(grouped, best, 0.95)
    assert all(np.isfinite(v).all() for level in columns.values() for v in level.values())
    assert leave_one_group_out(observed, sizes).shape == (2, 3, 3, 2, 3)
    for level in ("head", "layer", "pooled"):
        assert np.isfinite(
            jackknife_parts(best["observed"], leave_one_group_out(observed, sizes), level)["estimate"]
        ).all()
    with pytest.raises(ValueError, match="at least 3 refits; got 2"):
        jackknife_parts(best["observed"][:2, :2], leave_one_group_out(observed, sizes)[:, :2, :2], "pooled")


def test_nan_columns_keep_each_levels_name_and_shape():
    rng = np.random.default_rng(6)
    two = grouped_tensor(rng, n_groups=3, n_seeds=2)
    grouped = GroupedSimilarity(two, two, np.ones(3, int), [1, 2], np.zeros(3, int), np.full(3, 5))
    best = {"observed": two.mean(axis=0).max(axis=-1), "null": two.mean(axis=0).max(axis=-1)}
    columns = jackknife_columns(grouped, best, 0.95)
    assert {level: columns[level]["jackknife"].shape for level in columns} == {
        "head": (2, 2, 3),
        "layer": (2, 2),
        "pooled": (2,),
    }


def test_group_sizes_must_match_the_groups_and_any_integer_dtype_weighs_exactly():
    rng = np.random.default_rng(7)
    grouped = grouped_tensor(rng, n_groups=3).astype(np.float32)
    with pytest.raises(ValueError):
        leave_one_group_out(grouped, np.array([1, 2]))  # a size short: zip(strict=True) refuses
    expected = leave_one_group_out(grouped, np.array([1.0, 2.0, 3.0]))
    for dtype in (np.uint8, np.int32, np.int64):  # float32 group times size is exact in float64, not in float32
        np.testing.assert_array_equal(leave_one_group_out(grouped, np.array([1, 2, 3], dtype=dtype)), expected)
    np.testing.assert_array_equal(leave_one_group_out(grouped, [1, 2, 3]), expected)


def test_the_interval_reads_every_input_in_float64_and_warns_of_nothing():
    rng = np.random.default_rng(8)
    estimate, refit_var, groups = rng.random(3), rng.random(3) / 100, rng.random((4, 3))
    expected = jackknife_t_interval(estimate, refit_var, 2.0, groups, 0.9)
    wide = jackknife_t_interval(*(np.asarray(x, dtype=np.longdouble) for x in (estimate, refit_var)), 2.0,
                                groups.astype(np.longdouble), 0.9)  # fmt: skip
    for key, value in wide.items():
        assert value.dtype == np.float64, key
        np.testing.assert_array_equal(value, expected[key])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no spread anywhere: 0 / 0 degrees of freedom, no warning
        flat = jackknife_t_interval(np.array([0.5, 0.0]), np.zeros(2), 2.0, np.array([[0.5, 0.0]] * 3), 0.95)
    np.testing.assert_array_equal(flat["p_value"], [0.0, 1.0])
    assert np.isnan(flat["df"]).all() and (flat["se"] == 0).all()


def test_an_undefined_estimate_or_variance_has_no_p_value_and_no_interval():
    # an estimate, a refit variance, a left-out group NaN: before, the last two read as p = 0 with a zero-width interval
    out = jackknife_t_interval(np.array([np.nan, 0.5, 0.5]), np.array([0.01, np.nan, 0.0]), 2.0,
                               np.array([[0.4, 0.5, np.nan], [0.5, 0.5, 0.5], [0.6, 0.5, 0.5]]), 0.95)  # fmt: skip
    for key in ("p_value", "ci_low", "ci_high"):
        assert np.isnan(out[key]).all(), key
