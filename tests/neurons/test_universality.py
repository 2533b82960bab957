"""Neuron universality from streamed statistics: the analytic correlations of mapped neurons equal a pass over
the mapped activations, a permuted copy of a refit finds every neuron at 1 (in its own or another layer), and
a dead neuron has no correlation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.tolerances import reduction_atol

from headstab.neurons.rotations import draw_maps
from headstab.neurons.streamed import PairStatistics
from headstab.neurons.universality import (
    correlation_matrix,
    direction_seed,
    max_correlations,
    null_max_correlations,
    pair_universality,
    rotated_correlation,
)

N_TOKENS, N_LAYERS, D_MLP = 2000, 3, 6


def correlated_refits(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two refits [token, layer, d_mlp] sharing a latent signal, GELU-like (means of the spread's size)."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(N_TOKENS, N_LAYERS, D_MLP))
    a = latent @ rng.normal(size=(D_MLP, D_MLP)) + rng.normal(size=(N_TOKENS, N_LAYERS, D_MLP)) + 2.0
    b = latent @ rng.normal(size=(D_MLP, D_MLP)) + rng.normal(size=(N_TOKENS, N_LAYERS, D_MLP)) - 1.0
    return a, b


def statistics_of(a: np.ndarray, b: np.ndarray, scope: str) -> PairStatistics:
    stats = PairStatistics.empty("seed1", "seed2", a.shape[1], a.shape[2], scope)
    for start in range(0, a.shape[0], 512):
        stats.update(a[start : start + 512], b[start : start + 512])
    return stats


# A correlation of N_TOKENS products, its variances summed the same way: float64 rounding far inside 1e-10.
ATOL = reduction_atol(np.float64, N_TOKENS * D_MLP)


@pytest.mark.parametrize("kind", ["haar", "gurnee"])
@pytest.mark.parametrize("scope", ["same_layer", "cross_layer"])
def test_analytic_mapped_correlations_equal_a_pass_over_the_mapped_activations(kind, scope):
    a, b = correlated_refits()
    stats = statistics_of(a, b, scope)
    sigma_a, sigma_b, cross = stats.covariances()
    variance_a = torch.diagonal(sigma_a, dim1=-2, dim2=-1)
    maps = list(draw_maps(kind, 2, N_LAYERS, D_MLP, seed=3))
    null = null_max_correlations(stats, n_draws=2, seed=3, kind=kind)
    assert ATOL < 1e-10
    for draw, mapping in enumerate(maps):
        mapped_b = np.einsum("tlk,ljk->tlj", b, mapping.numpy())  # (M b)_j = sum_k M_jk b_k, per layer
        direct = correlation_matrix(statistics_of(a, mapped_b, scope))
        if scope == "same_layer":
            analytic = rotated_correlation(cross, variance_a, sigma_b, mapping)
            np.testing.assert_allclose(analytic.numpy(), direct.numpy(), rtol=0, atol=ATOL)
            np.testing.assert_allclose(null["same_layer"][draw], direct.amax(dim=-1).numpy(), rtol=0, atol=ATOL)
            continue
        rows = cross.reshape(-1, N_LAYERS, D_MLP)
        for layer in range(N_LAYERS):
            analytic = rotated_correlation(rows[:, layer], variance_a.reshape(-1), sigma_b[layer], mapping[layer])
            block = direct[:, layer * D_MLP : (layer + 1) * D_MLP]
            np.testing.assert_allclose(analytic.numpy(), block.numpy(), rtol=0, atol=ATOL)
        every = direct.amax(dim=-1).reshape(N_LAYERS, D_MLP).numpy()
        np.testing.assert_allclose(null["cross_layer"][draw], every, rtol=0, atol=ATOL)
        same = np.stack([direct.reshape(N_LAYERS, D_MLP, N_LAYERS, D_MLP)[m, :, m].amax(-1) for m in range(3)])
        np.testing.assert_allclose(null["same_layer"][draw], same, rtol=0, atol=ATOL)


def test_correlations_are_pearsons_r_of_the_activations():
    a, b = correlated_refits(1)
    r = correlation_matrix(statistics_of(a, b, "cross_layer")).numpy()
    expected = np.corrcoef(a.reshape(N_TOKENS, -1), b.reshape(N_TOKENS, -1), rowvar=False)[:18, 18:]
    np.testing.assert_allclose(r, expected, rtol=0, atol=ATOL)


@pytest.mark.parametrize("kind", ["haar", "gurnee"])
def test_a_refit_against_its_permuted_copy_finds_every_neuron_at_one(kind):
    a, _ = correlated_refits(2)
    permutation = np.random.default_rng(0).permutation(D_MLP)
    stats = statistics_of(a, a[:, :, permutation], "same_layer")  # neuron j of the copy is neuron perm[j] of a
    found = max_correlations(stats)
    np.testing.assert_allclose(found["same_layer"], 1.0, rtol=0, atol=ATOL)
    inverse = np.argsort(permutation)
    np.testing.assert_array_equal(found["same_layer_neuron"], np.broadcast_to(inverse, (N_LAYERS, D_MLP)))
    null = null_max_correlations(stats, n_draws=4, seed=0, kind=kind)["same_layer"].mean(axis=0)
    excess = found["same_layer"] - null
    np.testing.assert_allclose(excess, 1.0 - null, rtol=0, atol=ATOL)
    assert np.all(null < 1.0 - 1e-3)  # a random map of the copy is no neuron of a


def test_a_copy_in_another_layer_is_found_in_the_cross_layer_scope_only():
    a, b = correlated_refits(3)
    b[:, 2] = a[:, 0, ::-1]  # layer 2 of b is layer 0 of a, neurons reversed
    found = max_correlations(statistics_of(a, b, "cross_layer"))
    np.testing.assert_allclose(found["cross_layer"][0], 1.0, rtol=0, atol=ATOL)
    np.testing.assert_array_equal(found["cross_layer_layer"][0], 2)
    np.testing.assert_array_equal(found["cross_layer_neuron"][0], np.arange(D_MLP)[::-1])
    assert np.all(found["same_layer"][0] < 0.99) and np.all(found["cross_layer"][1:] < 0.99)
    same_scope = max_correlations(statistics_of(a, b, "same_layer"))["same_layer"]
    np.testing.assert_allclose(found["same_layer"], same_scope, rtol=0, atol=ATOL)


def test_a_dead_neuron_has_no_correlation_and_is_nobodys_maximum():
    a, b = correlated_refits(4)
    a[:, 1, 3] = 0.0  # anchor neuron (1, 3) never fires
    b[:, 0, :] = b[:, 0, :1]  # every neuron of b's layer 0 is neuron 0: constant columns would be NaN
    b[:, 0, 2] = 5.0  # neuron (0, 2) of b is dead
    found = max_correlations(statistics_of(a, b, "cross_layer"))
    assert np.isnan(found["same_layer"][1, 3]) and np.isnan(found["cross_layer"][1, 3])
    assert np.isfinite(np.delete(found["same_layer"].ravel(), 1 * D_MLP + 3)).all()
    assert not np.any((found["cross_layer_layer"] == 0) & (found["cross_layer_neuron"] == 2))
    null = null_max_correlations(statistics_of(a, b, "cross_layer"), n_draws=2)
    assert np.isnan(null["same_layer"][:, 1, 3]).all() and np.isfinite(null["cross_layer"][:, 0]).all()


def test_pair_universality_gives_both_directions_with_their_own_null_draws():
    a, b = correlated_refits(5)
    stats = statistics_of(a, b, "cross_layer")
    both = pair_universality(stats, n_draws=3, seed=7)
    assert set(both) == {("seed1", "seed2"), ("seed2", "seed1")}
    forward, backward = both[("seed1", "seed2")], both[("seed2", "seed1")]
    assert set(forward) == {"max_same_layer", "max_cross_layer", "null_same_layer", "null_cross_layer"}
    np.testing.assert_array_equal(forward["max_cross_layer"], max_correlations(stats)["cross_layer"])
    np.testing.assert_array_equal(backward["max_same_layer"], max_correlations(stats.swapped())["same_layer"])
    null = null_max_correlations(stats, 3, direction_seed(7, "seed1", "seed2"))["same_layer"].mean(axis=0)
    np.testing.assert_array_equal(forward["null_same_layer"], null)
    seeds = {
        direction_seed(7, "seed1", "seed2"),
        direction_seed(7, "seed2", "seed1"),
        direction_seed(8, "seed1", "seed2"),
    }
    assert len(seeds) == 3 and direction_seed(7, "seed1", "seed2") == direction_seed(7, "seed1", "seed2")


def test_statistics_of_one_token_give_no_correlation_and_name_the_refits():
    stats = PairStatistics.empty("seed1", "seed2", 1, 2, "cross_layer")
    stats.update(np.ones((1, 1, 2)), np.ones((1, 1, 2)))
    for compute in (max_correlations, null_max_correlations):
        with pytest.raises(ValueError, match="refit 'seed1' against 'seed2' hold 1 token\\(s\\)"):
            compute(stats)


@pytest.mark.parametrize("kind", ["haar", "gurnee"])
def test_independent_refits_sit_at_their_null(kind):
    """Negative control: no shared signal. Each maximum is over D_MLP correlations of s.d. 1/sqrt(N_TOKENS)
    (0.022), observed and null alike; the mean excess over 18 neurons has a s.e. near 0.002."""
    rng = np.random.default_rng(6)
    a = rng.normal(size=(N_TOKENS, N_LAYERS, D_MLP)) + 1.0
    b = rng.normal(size=(N_TOKENS, N_LAYERS, D_MLP)) - 2.0
    stats = statistics_of(a, b, "cross_layer")
    found, null = max_correlations(stats), null_max_correlations(stats, n_draws=20, seed=2, kind=kind)
    for scope in ("same_layer", "cross_layer"):
        excess = found[scope] - null[scope].mean(axis=0)
        assert abs(float(excess.mean())) < 0.01 and found[scope].max() < 0.15


def test_neurons_of_small_variance_keep_their_correlation():
    """Pearson's r does not depend on scale: activations times 1e-3 (sums of centred squares near 0.01, not 0)
    give the same maxima and null maxima as the originals."""
    a, b = correlated_refits(7)
    stats, small = statistics_of(a, b, "cross_layer"), statistics_of(a * 1e-3, b * 1e-3, "cross_layer")
    assert float(torch.diagonal(small.comoment_a, dim1=-2, dim2=-1).max()) < 1.0
    assert float(torch.diagonal(small.comoment_b, dim1=-2, dim2=-1).max()) < 1.0
    found, found_small = max_correlations(stats), max_correlations(small)
    null, null_small = null_max_correlations(stats, 2, 3), null_max_correlations(small, 2, 3)
    for scope in ("same_layer", "cross_layer"):
        assert np.isfinite(found_small[scope]).all() and np.isfinite(null_small[scope]).all()
        np.testing.assert_allclose(found_small[scope], found[scope], rtol=0, atol=ATOL)
        np.testing.assert_allclose(null_small[scope], null[scope], rtol=0, atol=ATOL)


def test_cross_layer_maxima_also_give_the_same_layer_maxima_and_integer_indices():
    a, b = correlated_refits(8)
    found = max_correlations(statistics_of(a, b, "cross_layer"))
    same_scope = max_correlations(statistics_of(a, b, "same_layer"))
    assert set(found) == {
        "same_layer",
        "same_layer_neuron",
        "cross_layer",
        "cross_layer_layer",
        "cross_layer_neuron",
    }
    np.testing.assert_array_equal(found["same_layer_neuron"], same_scope["same_layer_neuron"])
    for key in ("same_layer_neuron", "cross_layer_layer", "cross_layer_neuron"):
        assert found[key].dtype == np.int64 and found[key].shape == (N_LAYERS, D_MLP), key
    assert found["same_layer"].dtype == np.float64 and found["cross_layer"].dtype == np.float64


@pytest.mark.parametrize("scope", ["same_layer", "cross_layer"])
def test_results_do_not_depend_on_the_default_device(scope):
    """A session whose default device is another (cuda; here meta) gets the same numbers: every tensor is made
    on the statistics' device."""
    a, b = correlated_refits(9)
    stats = statistics_of(a, b, scope)
    found, null = max_correlations(stats), null_max_correlations(stats, 2, 4)
    with torch.device("meta"):
        found_elsewhere, null_elsewhere = max_correlations(stats), null_max_correlations(stats, 2, 4)
    for expected, got in ((found, found_elsewhere), (null, null_elsewhere)):
        assert set(got) == set(expected)
        for key, values in expected.items():
            np.testing.assert_array_equal(got[key], values)


def test_the_null_maps_are_drawn_on_the_statistics_device(monkeypatch):
    """CPU maps of CUDA statistics would fail their product: the device is passed on to draw_maps."""
    from headstab.neurons import universality

    calls = []

    def recording(*args, **kwargs):
        calls.append((args, kwargs))
        return draw_maps(*args, **kwargs)

    monkeypatch.setattr(universality, "draw_maps", recording)
    a, b = correlated_refits(10)
    stats = statistics_of(a, b, "same_layer")
    null_max_correlations(stats, 1, 0)
    ((args, kwargs),) = calls
    assert args == ("haar", 1, N_LAYERS, D_MLP, 0, stats.cross.device) and not kwargs


def test_the_defaults_are_twenty_haar_draws_of_seed_zero():
    a, b = correlated_refits(11)
    stats = statistics_of(a, b, "same_layer")
    null = null_max_correlations(stats)
    assert null["same_layer"].shape == (20, N_LAYERS, D_MLP)
    np.testing.assert_array_equal(null["same_layer"], null_max_correlations(stats, 20, 0, "haar")["same_layer"])
    both, explicit = pair_universality(stats), pair_universality(stats, 20, 0, "haar")
    assert set(both) == set(explicit)
    for key, arrays in explicit.items():
        for name, values in arrays.items():
            np.testing.assert_array_equal(both[key][name], values)


def test_pair_universality_draws_the_kind_of_null_asked_for():
    a, b = correlated_refits(12)
    stats = statistics_of(a, b, "same_layer")
    gurnee = pair_universality(stats, 2, 7, "gurnee")[("seed1", "seed2")]["null_same_layer"]
    expected = null_max_correlations(stats, 2, direction_seed(7, "seed1", "seed2"), "gurnee")["same_layer"]
    np.testing.assert_array_equal(gurnee, expected.mean(axis=0))
    haar = null_max_correlations(stats, 2, direction_seed(7, "seed1", "seed2"), "haar")["same_layer"]
    assert not np.allclose(gurnee, haar.mean(axis=0))
