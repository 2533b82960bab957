"""headstab.sections.effective_rank: participation ratio of hook_z, position pooling, tables (issue 14 part 2)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol, reduction_rtol

from headstab.sections.effective_rank import (
    effective_rank_table,
    head_outputs,
    matched_rank_table,
    participation_ratio,
    rank_correlation_table,
)
from headstab.statistics.refit_weights import refit_interval, row_weights, weighted_pearson

D_HEAD = 8
N_TOKENS = 4000


def _orthonormal_centred(rng, n_tokens, d_head):
    """Columns centred and orthonormal: every singular value of the matrix is exactly 1."""
    x = rng.standard_normal((n_tokens, d_head))
    q, _ = np.linalg.qr(x - x.mean(axis=0))
    return q


def test_isotropic_outputs_have_pr_d_head():
    outputs = _orthonormal_centred(np.random.default_rng(0), N_TOKENS, D_HEAD)
    np.testing.assert_allclose(participation_ratio(outputs), D_HEAD, rtol=reduction_rtol(np.float64, N_TOKENS))


def test_gaussian_outputs_have_pr_near_d_head():
    # Sample covariance eigenvalues spread by ~sqrt(d/n); exp(H) loses ~ d/(2n) of d_head, 10x margin.
    outputs = np.random.default_rng(1).standard_normal((N_TOKENS, D_HEAD))
    assert participation_ratio(outputs) == pytest.approx(D_HEAD, rel=10 * D_HEAD / (2 * N_TOKENS))


def test_fixed_vector_plus_noise_has_uncentred_pr_one():
    rng = np.random.default_rng(2)
    noise = 1e-4
    outputs = rng.standard_normal(D_HEAD)[None, :] + noise * rng.standard_normal((N_TOKENS, D_HEAD))
    # Noise energy share p ~ noise^2 d per direction; H ~ sum p (1 - log p): far below 1e-5 here.
    assert participation_ratio(outputs, centre=False) == pytest.approx(1.0, abs=1e-5)
    # Centring removes the fixed vector: the isotropic noise is all that is left.
    assert participation_ratio(outputs) == pytest.approx(D_HEAD, rel=10 * D_HEAD / (2 * N_TOKENS))


def test_one_direction_with_varying_scale_has_centred_pr_one():
    rng = np.random.default_rng(3)
    direction = rng.standard_normal(D_HEAD)
    outputs = rng.standard_normal((N_TOKENS, 1)) * direction[None, :]
    assert participation_ratio(outputs) == pytest.approx(1.0, abs=reduction_atol(np.float64, N_TOKENS))


def test_two_equal_directions_have_pr_two():
    outputs = _orthonormal_centred(np.random.default_rng(4), N_TOKENS, 2) @ np.eye(2, D_HEAD)
    assert participation_ratio(outputs) == pytest.approx(2.0, rel=reduction_rtol(np.float64, N_TOKENS))


def test_constant_outputs_have_undefined_pr():
    assert np.isnan(participation_ratio(np.ones((10, D_HEAD))))


def test_participation_ratio_rejects_a_single_token():
    with pytest.raises(ValueError, match="n_tokens >= 2"):
        participation_ratio(np.ones((1, D_HEAD)))


def _hook_z():
    """[prompt, pos, head, d_head] with value = 100 prompt + pos, zero padded after each length."""
    lengths = np.array([3, 5])
    z = np.zeros((2, 6, 2, 1))
    for p, n in enumerate(lengths):
        z[p, :n] = (100 * p + np.arange(n))[:, None, None]
    return z, lengths


def test_all_positions_exclude_bos_and_padding_by_default():
    z, lengths = _hook_z()
    rows = head_outputs(z, lengths, "all", prepend_bos=True)
    assert rows.shape == (2, 2 + 4, 1)
    assert rows[0, :, 0].tolist() == [1, 2, 101, 102, 103, 104]


def test_all_positions_keep_bos_when_asked_or_absent():
    z, lengths = _hook_z()
    expected = [0, 1, 2, 100, 101, 102, 103, 104]
    assert head_outputs(z, lengths, "all", prepend_bos=True, include_bos=True)[0, :, 0].tolist() == expected
    assert head_outputs(z, lengths, "all", prepend_bos=False)[0, :, 0].tolist() == expected


def test_last_position_is_each_prompts_last_real_token():
    z, lengths = _hook_z()
    assert head_outputs(z, lengths, "last", prepend_bos=True)[1, :, 0].tolist() == [2, 104]


def test_unknown_pooling_is_refused():
    z, lengths = _hook_z()
    with pytest.raises(ValueError, match="positions must be one of"):
        head_outputs(z, lengths, "first", prepend_bos=True)


def _pr_and_stability(n_seeds=4, n_layers=2, n_heads=6):
    """PR tables whose PR is an exact linear function of stability, and matches that pair head h with head h."""
    rng = np.random.default_rng(5)
    hook_z = rng.standard_normal((n_layers, 3, 12, n_heads, D_HEAD))
    lengths = np.array([12, 10, 8])
    pr = pd.concat([effective_rank_table(hook_z, lengths, s, prepend_bos=True) for s in range(1, n_seeds + 1)])
    stability = pr[pr["positions"] == "all"][["seed", "layer", "head"]].rename(columns={"seed": "anchor_seed"})
    stability = stability.assign(stability=rng.uniform(0.3, 0.9, len(stability)))
    # Tie PR to stability exactly: the correlation is 1 in every layer and resample.
    pr = pr.merge(stability.rename(columns={"anchor_seed": "seed"}), on=["seed", "layer", "head"])
    pr = pr.assign(pr=1 + 5 * pr["stability"]).drop(columns="stability")
    seeds = range(1, n_seeds + 1)
    pairs = pd.DataFrame(
        [
            (a, b, layer, h, layer, h, 0.5)
            for a in seeds
            for b in seeds
            if a != b
            for layer in range(n_layers)
            for h in range(n_heads)
        ],
        columns=["anchor_seed", "pair_seed", "layer", "head", "best_layer", "best_head", "similarity"],
    ).assign(promptset="primary", scope="same_layer")
    return pr, stability, pairs


def test_table_has_every_refit_pooling_layer_and_head():
    pr, _, _ = _pr_and_stability()
    assert len(pr) == 4 * 2 * 2 * 6
    assert set(pr["n_tokens"]) == {3, 11 + 9 + 7}


def test_pr_tied_to_stability_correlates_at_one_in_every_resample():
    pr, stability, pairs = _pr_and_stability()
    matched = matched_rank_table(pr, pairs)
    table = rank_correlation_table(pr, stability, matched, n_boot=200, seed=0, confidence=0.95)
    rows = table[table["statistic"] == "pr_vs_stability"]
    tolerance = reduction_atol(np.float64, 48, magnitude=6.0)
    np.testing.assert_allclose(rows[["estimate", "ci_low", "ci_high"]].to_numpy(), 1.0, atol=tolerance)


def test_match_pr_is_the_pair_refits_pr_of_the_matched_head():
    pr, _, pairs = _pr_and_stability()
    matched = matched_rank_table(pr, pairs)
    assert len(matched) == len(pairs) * 2
    lookup = pr.set_index(["positions", "seed", "layer", "head"])["pr"]
    expected = lookup.loc[list(zip(matched["positions"], matched["pair_seed"], matched["layer"], matched["head"]))]
    np.testing.assert_array_equal(matched["pr_match"].to_numpy(), expected.to_numpy())


def test_matches_of_a_missing_refit_are_refused():
    pr, _, pairs = _pr_and_stability()
    with pytest.raises(ValueError, match="effective rank lacks"):
        matched_rank_table(pr[pr["seed"] != 2], pairs)


def test_unit_weights_give_numpys_pearson():
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal(50), rng.standard_normal(50)
    r = weighted_pearson(x, y, np.ones((1, 50)))[0]
    assert r == pytest.approx(np.corrcoef(x, y)[0, 1], abs=reduction_atol(np.float64, 50, magnitude=4.0))


def test_pair_rows_weigh_the_product_of_refit_counts():
    counts = np.array([[2, 0, 1]])
    assert row_weights(counts, np.array([[0, 2], [1, 0], [0, 0]])).tolist() == [[2.0, 0.0, 4.0]]


def test_mean_interval_of_a_constant_is_that_constant():
    estimate, low, high = refit_interval("mean", np.full(12, 0.25), None, np.arange(12) % 4, 4, 100, 0, 0.95)
    assert (estimate, low, high) == pytest.approx((0.25, 0.25, 0.25))


def _pr_by_svd(x, centre):
    """An independent PR: singular values of the (centred) matrix by SVD, entropy of their energy shares."""
    x = x - x.mean(axis=0) if centre else x
    energy = np.linalg.svd(x, compute_uv=False) ** 2
    p = energy[energy > 1e-12 * energy.sum()] / energy.sum()
    return float(np.exp(-np.sum(p * np.log(p))))


def test_two_tokens_span_one_line():
    # Centred, two tokens differ along one direction only: the smallest matrix PR is defined for.
    assert participation_ratio(np.array([[1.0, 2.0], [3.0, -1.0]])) == pytest.approx(
        1.0, abs=reduction_atol(np.float64, 2)
    )


def test_a_stack_of_matrices_gives_each_matrix_its_own_pr():
    rng = np.random.default_rng(7)
    stack = rng.standard_normal((3, 40, D_HEAD)) * np.array([1.0, 0.1, 3.0])[:, None, None]
    stack[1, :, 2:] = 0.0  # a matrix of two directions beside two full ones
    got = participation_ratio(stack)
    expected = [participation_ratio(matrix) for matrix in stack]
    np.testing.assert_allclose(got, expected, rtol=reduction_rtol(np.float64, 40))
    np.testing.assert_allclose(got, [_pr_by_svd(m, True) for m in stack], rtol=reduction_rtol(np.float64, 40 * D_HEAD))


def test_float32_outputs_are_computed_in_float64():
    x32 = np.random.default_rng(8).standard_normal((30, D_HEAD)).astype(np.float32)
    # Every float32 value is exact in float64, so the two inputs are the same matrix.
    assert participation_ratio(x32) == pytest.approx(
        participation_ratio(x32.astype(np.float64)), rel=reduction_rtol(np.float64, 30)
    )
    assert participation_ratio(x32.astype(np.float16)).dtype == np.float64


def test_rank_one_outputs_never_fall_below_pr_one():
    # Rounding leaves eigenvalues slightly below zero; clipped, the largest share is at most 1, so PR >= 1.
    rng = np.random.default_rng(3)
    outputs = rng.standard_normal((20, 50, 1)) * rng.standard_normal((20, 1, D_HEAD))
    pr = participation_ratio(outputs)
    assert (pr >= 1.0).all()
    np.testing.assert_allclose(pr, 1.0, atol=reduction_atol(np.float64, 50))


def _two_axis_tokens(share, n_tokens=100):
    """Uncentred outputs whose Gram matrix is exactly diag(1, share, 0, ...): one token per axis, then zeros."""
    x = np.zeros((n_tokens, D_HEAD))
    x[0, 0], x[1, 1] = 1.0, np.sqrt(share)
    return x


def test_a_direction_at_rounding_level_of_the_largest_counts_as_none():
    eps = np.finfo(np.float64).eps
    below, above = 2 * eps, 20 * eps  # the cut-off is d_head * eps = 8 eps of the total energy
    pr = participation_ratio(np.stack([_two_axis_tokens(below), _two_axis_tokens(above)]), centre=False)
    # Below the cut-off the share adds no -p log p term (p_1 = 1 / (1 + share) alone); above it does.
    p_below = 1.0 / (1.0 + below)
    p_above = np.array([1.0, above]) / (1.0 + above)
    rtol = reduction_rtol(np.float64, D_HEAD)  # abs=0: approx's default abs of 1e-12 would hide the 1e-14
    assert pr[0] == pytest.approx(np.exp(-p_below * np.log(p_below)), rel=rtol, abs=0)
    assert pr[1] == pytest.approx(np.exp(-np.sum(p_above * np.log(p_above))), rel=rtol, abs=0)


def test_table_pr_columns_match_an_independent_svd_of_each_heads_rows():
    rng = np.random.default_rng(9)
    lengths = np.array([6, 4, 5])
    hook_z = rng.standard_normal((2, 3, 6, 2, 4)) + rng.standard_normal((2, 1, 1, 2, 4))  # a shared part per head
    table = effective_rank_table(hook_z, lengths, "s", prepend_bos=True)
    assert table.index.tolist() == list(range(len(table)))
    for row in table.itertuples():
        z = hook_z[row.layer, :, :, row.head]
        if row.positions == "all":
            x = np.concatenate([z[p, 1 : lengths[p]] for p in range(3)])
        else:
            x = z[np.arange(3), lengths - 1]
        assert row.n_tokens == len(x)
        assert row.pr == pytest.approx(_pr_by_svd(x, True), rel=reduction_rtol(np.float64, 4 * len(x)))
        assert row.pr_uncentred == pytest.approx(_pr_by_svd(x, False), rel=reduction_rtol(np.float64, 4 * len(x)))


def test_table_keeps_bos_when_asked():
    z, lengths = _hook_z()
    table = effective_rank_table(z[None], lengths, 1, prepend_bos=True, include_bos=True)
    assert table.loc[table["positions"] == "all", "n_tokens"].tolist() == [8, 8]


def test_hook_z_of_the_wrong_shape_is_refused_with_both_shapes():
    z, lengths = _hook_z()
    with pytest.raises(ValueError, match=r"got \(2, 6, 2\), \(2,\)"):
        head_outputs(z[..., 0], lengths, "all", prepend_bos=True)
    with pytest.raises(ValueError, match=r"got \(2, 6, 2, 1\), \(3,\)"):
        head_outputs(z, np.array([3, 5, 1]), "all", prepend_bos=True)


def test_pair_rows_of_another_prompt_set_or_scope_are_refused():
    pr, _, pairs = _pr_and_stability()
    two_sets = pd.concat([pairs, pairs.assign(promptset="len5")])
    message = "^pair_stability must hold the rows of one prompt set and scope same_layer$"
    with pytest.raises(ValueError, match=message):
        matched_rank_table(pr, two_sets)
    with pytest.raises(ValueError, match=message):
        matched_rank_table(pr, pairs.assign(scope="cross_layer"))


def test_a_missing_pair_refit_is_refused_naming_its_first_three_rows():
    # Every anchor is found (refit 1); refit 3 is missing as a match only. A pair row appears per pooling.
    pr, _, pairs = _pr_and_stability()
    pairs = pairs[pairs["anchor_seed"] == 1]
    message = r"\(anchor, pair, layer, head\) \[\[1, 3, 0, 0\], \[1, 3, 0, 0\], \[1, 3, 0, 1\]\]$"
    with pytest.raises(ValueError, match=message):
        matched_rank_table(pr[pr["seed"] != 3], pairs)


def test_missing_head_stability_is_refused_naming_its_first_three_heads():
    pr, stability, pairs = _pr_and_stability()
    matched = matched_rank_table(pr, pairs)
    lacking = stability[~((stability["anchor_seed"] == 2) & (stability["layer"] == 1))]
    with pytest.raises(ValueError, match=r"lacks \(seed, layer, head\) \[\[2, 1, 0\], \[2, 1, 1\], \[2, 1, 2\]\]$"):
        rank_correlation_table(pr, lacking, matched, n_boot=10, seed=0, confidence=0.95)


def test_correlation_table_estimates_by_hand_in_sorted_order_whatever_the_row_order():
    pr, stability, pairs = _pr_and_stability()
    pr = pr.assign(pr=pr["pr"] + np.random.default_rng(11).uniform(0, 1, len(pr)))  # break the exact tie
    matched = matched_rank_table(pr, pairs)
    table = rank_correlation_table(pr, stability, matched, n_boot=50, seed=3, confidence=0.95)
    shuffled = pr.sample(frac=1.0, random_state=1)
    pd.testing.assert_frame_equal(
        rank_correlation_table(shuffled, stability, matched, n_boot=50, seed=3, confidence=0.95), table
    )
    assert list(zip(table["positions"], table["layer"]))[::5] == [("all", 0), ("all", 1), ("last", 0), ("last", 1)]
    assert table["statistic"].tolist()[:5] == [
        "pr_mean", "pr_vs_stability", "pr_anchor_vs_match", "pr_uncentred_mean", "pr_uncentred_vs_stability"]  # fmt: skip
    atol = reduction_atol(np.float64, len(pr), magnitude=10.0)
    for row in table.itertuples():
        group = pr[(pr["positions"] == row.positions) & (pr["layer"] == row.layer)]
        rows = matched[(matched["positions"] == row.positions) & (matched["layer"] == row.layer)]
        joined = group.merge(stability.rename(columns={"anchor_seed": "seed"}), on=["seed", "layer", "head"])
        expected = {
            "pr_mean": group["pr"].mean(),
            "pr_vs_stability": np.corrcoef(joined["pr"], joined["stability"])[0, 1],
            "pr_anchor_vs_match": np.corrcoef(rows["pr_anchor"], rows["pr_match"])[0, 1],
            "pr_uncentred_mean": group["pr_uncentred"].mean(),
            "pr_uncentred_vs_stability": np.corrcoef(joined["pr_uncentred"], joined["stability"])[0, 1],
        }[row.statistic]
        assert row.estimate == pytest.approx(expected, abs=atol)
        assert row.n_rows == (len(rows) if row.statistic == "pr_anchor_vs_match" else len(group))


def test_a_missing_anchor_head_is_refused_naming_its_pair_rows():
    # Refit 1's head 0 of layer 0 is missing: its rows as anchor (once each, no pooling found) are named.
    pr, _, pairs = _pr_and_stability()
    pairs = pairs[pairs["anchor_seed"] == 1]
    lacking = pr[~((pr["seed"] == 1) & (pr["layer"] == 0) & (pr["head"] == 0))]
    message = r"\(anchor, pair, layer, head\) \[\[1, 2, 0, 0\], \[1, 3, 0, 0\], \[1, 4, 0, 0\]\]$"
    with pytest.raises(ValueError, match=message):
        matched_rank_table(lacking, pairs)


def test_the_content_independence_reading_is_made_on_the_uncentred_rank(tmp_path):
    from headstab.plots.effective_rank import plot_rank_vs_stability

    # Head 0 writes one fixed vector plus small noise (content-independent), head 1 isotropic noise.
    rng = np.random.default_rng(2)
    n_prompts, n_pos = 2, 200
    fixed = np.ones(D_HEAD) + 0.01 * rng.standard_normal((n_prompts, n_pos, D_HEAD))
    noise = rng.standard_normal((n_prompts, n_pos, D_HEAD))
    hook_z = np.stack([fixed, noise], axis=2)[None]  # [layer 1, prompt, pos, head 2, d_head]
    pr = effective_rank_table(hook_z, np.full(n_prompts, n_pos), 1, prepend_bos=False)
    heads = pd.DataFrame({"anchor_seed": 1, "layer": 0, "head": [0, 1], "stability": [0.9, 0.4]})
    drawn = plot_rank_vs_stability(pr, heads, tmp_path / "pr.png", "toy").set_index("head")
    assert drawn.loc[0, "effective_rank"] == pytest.approx(1.0, abs=0.01)  # the reading holds uncentred
    assert pr[(pr["positions"] == "all") & (pr["head"] == 0)]["pr"].item() > D_HEAD / 2  # centred: the noise's rank
    assert drawn.loc[1, "effective_rank"] > D_HEAD / 2


def test_the_docs_and_caption_name_the_entropy_effective_rank_and_cite_it():
    repo = Path(__file__).resolve().parents[2]
    for path in ("docs/beyond_the_paper.md", "workflow/report/effective_rank_stability.rst"):
        text = " ".join((repo / path).read_text().split())
        assert "entropy effective rank" in text and "Roy & Vetterli 2007" in text, path
        assert "pr_uncentred" in text, path


def test_each_interval_is_labelled_by_its_kind_at_the_number_of_refits():
    from headstab.sections.effective_rank import CORRELATION_COLUMNS
    from headstab.statistics.calibration import calibration_label

    pr, stability, pairs = _pr_and_stability(n_seeds=5, n_layers=1, n_heads=3)
    table = rank_correlation_table(pr, stability, matched_rank_table(pr, pairs), n_boot=20, seed=0, confidence=0.9)
    assert list(table.columns) == CORRELATION_COLUMNS and CORRELATION_COLUMNS[-1] == "calibration"
    means = table["statistic"].str.endswith("_mean")
    assert (table.loc[means, "calibration"] == calibration_label("refit_bootstrap_mean_effective_rank", 5)).all()
    assert (table.loc[~means, "calibration"] == calibration_label("refit_bootstrap_pearson_effective_rank", 5)).all()
    assert means.sum() == 4 and (~means).sum() == 6  # 2 positions x (2 means, 3 correlations)


def _min_n(monkeypatch, method, min_n):
    """Set `method`'s min_n in the registry the section reads."""
    from dataclasses import replace

    from headstab.statistics import calibration

    monkeypatch.setitem(calibration.METHODS, method, replace(calibration.METHODS[method], min_n=min_n))


def test_the_labels_are_taken_at_the_refits(monkeypatch):
    pr, stability, pairs = _pr_and_stability(n_seeds=4, n_layers=1, n_heads=3)
    matched = matched_rank_table(pr, pairs)
    for min_n, label in ((4, "calibrated"), (5, "descriptive")):
        _min_n(monkeypatch, "refit_bootstrap_mean_effective_rank", min_n)
        _min_n(monkeypatch, "refit_bootstrap_pearson_effective_rank", min_n)
        table = rank_correlation_table(pr, stability, matched, n_boot=10, seed=0, confidence=0.9)
        assert (table["calibration"] == label).all()


def test_means_and_correlations_take_their_own_methods_label(monkeypatch):
    pr, stability, pairs = _pr_and_stability(n_seeds=4, n_layers=1, n_heads=3)
    _min_n(monkeypatch, "refit_bootstrap_mean_effective_rank", 4)
    _min_n(monkeypatch, "refit_bootstrap_pearson_effective_rank", 5)
    table = rank_correlation_table(pr, stability, matched_rank_table(pr, pairs), n_boot=10, seed=0, confidence=0.9)
    means = table["statistic"].str.endswith("_mean")
    assert (table.loc[means, "calibration"] == "calibrated").all()
    assert (table.loc[~means, "calibration"] == "descriptive").all()
