"""headstab.sections.effective_rank: participation ratio of hook_z, position pooling, tables (issue 14 part 2)."""

import numpy as np
import pandas as pd
import pytest
from tolerances import reduction_atol, reduction_rtol

from headstab.sections.effective_rank import (
    effective_rank_table,
    head_outputs,
    matched_rank_table,
    participation_ratio,
    rank_correlation_table,
)
from headstab.sections.refit_weights import refit_interval, row_weights, weighted_pearson

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
