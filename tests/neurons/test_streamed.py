"""Streamed neuron statistics: one pass equals the covariances of the stored activations, shards merge into one
pass, float16 chunks are summed in float64 (a float32 sum fails at 1e5 tokens), and mistakes name the refit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.tolerances import reduction_atol

from headstab.neurons import streamed
from headstab.neurons.streamed import PairStatistics, accumulator_bytes

N_LAYERS, D_MLP = 3, 5


def activations(rng: np.random.Generator, n_tokens: int, n_layers: int = N_LAYERS, d_mlp: int = D_MLP) -> np.ndarray:
    """GELU-like activations [token, layer, d_mlp]: a mean of the size of the spread, which a raw sum of
    squares would cancel against."""
    x = rng.normal(size=(n_tokens, n_layers, d_mlp)) + rng.normal(size=(n_layers, d_mlp))
    return np.maximum(x, -0.2) + 3.0


def covariance(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Population cross-covariance of the columns of x [token, p] and y [token, q] -> [p, q]."""
    return (x - x.mean(axis=0)).T @ (y - y.mean(axis=0)) / x.shape[0]


def streamed_pass(a: np.ndarray, b: np.ndarray, scope: str, chunk: int) -> PairStatistics:
    stats = PairStatistics.empty("s1", "s2", a.shape[1], a.shape[2], scope)
    for start in range(0, a.shape[0], chunk):
        stats.update(a[start : start + chunk], b[start : start + chunk])
    return stats


def atol_of(*arrays: np.ndarray, n_tokens: int, dtype=np.float64) -> float:
    """Twice the rounding bound of a covariance of n_tokens products of the arrays' largest size: the
    accumulator and the reference each err by at most one bound."""
    magnitude = max(float(np.abs(x).max()) for x in arrays) ** 2
    return 2 * reduction_atol(dtype, n_tokens, magnitude)


@pytest.mark.parametrize("scope", ["same_layer", "cross_layer"])
def test_one_streamed_pass_equals_the_covariances_of_the_stored_activations(scope):
    rng = np.random.default_rng(0)
    a, b = activations(rng, 1000), activations(rng, 1000)
    stats = streamed_pass(a, b, scope, chunk=97)
    sigma_a, sigma_b, cross = (t.numpy() for t in stats.covariances())
    atol = atol_of(a, b, n_tokens=1000)
    assert stats.n_tokens == 1000
    np.testing.assert_allclose(stats.mean_a.numpy(), a.mean(axis=0), rtol=0, atol=atol)
    np.testing.assert_allclose(stats.mean_b.numpy(), b.mean(axis=0), rtol=0, atol=atol)
    for layer in range(N_LAYERS):
        np.testing.assert_allclose(sigma_a[layer], covariance(a[:, layer], a[:, layer]), rtol=0, atol=atol)
        np.testing.assert_allclose(sigma_b[layer], covariance(b[:, layer], b[:, layer]), rtol=0, atol=atol)
    flat_a, flat_b = a.reshape(1000, -1), b.reshape(1000, -1)
    if scope == "cross_layer":
        np.testing.assert_allclose(cross, covariance(flat_a, flat_b), rtol=0, atol=atol)
    else:
        for layer in range(N_LAYERS):
            np.testing.assert_allclose(cross[layer], covariance(a[:, layer], b[:, layer]), rtol=0, atol=atol)


@pytest.mark.parametrize("scope", ["same_layer", "cross_layer"])
def test_two_merged_half_streams_equal_one_pass(scope):
    rng = np.random.default_rng(1)
    a, b = activations(rng, 600), activations(rng, 600)
    whole = streamed_pass(a, b, scope, chunk=600)
    first, second = streamed_pass(a[:250], b[:250], scope, 50), streamed_pass(a[250:], b[250:], scope, 70)
    merged = first.merged(second)
    atol = atol_of(a, b, n_tokens=600) * 600  # comoments: sums over the tokens, not means
    assert merged.n_tokens == 600 and first.n_tokens == 250  # merging leaves its inputs as they were
    for name in ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross"):
        np.testing.assert_allclose(getattr(merged, name).numpy(), getattr(whole, name).numpy(), rtol=0, atol=atol)
    empty = PairStatistics.empty("s1", "s2", N_LAYERS, D_MLP, scope)
    for one in (empty.merged(whole), whole.merged(empty)):
        assert one.n_tokens == 600 and torch.equal(one.cross, whole.cross) and torch.equal(one.mean_b, whole.mean_b)


def test_swapped_makes_the_other_refit_the_anchor():
    rng = np.random.default_rng(2)
    a, b = activations(rng, 200), activations(rng, 200)
    for scope in ("same_layer", "cross_layer"):
        swapped = streamed_pass(a, b, scope, 64).swapped()
        direct = streamed_pass(b, a, scope, 64)
        assert (swapped.anchor, swapped.other) == ("s2", "s1")
        for name in ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross"):
            np.testing.assert_allclose(getattr(swapped, name).numpy(), getattr(direct, name).numpy(), atol=1e-9)


def test_float16_chunks_are_summed_in_float64_and_a_float32_sum_fails_at_1e5_tokens(monkeypatch):
    n_tokens = 100_000
    rng = np.random.default_rng(3)
    a = activations(rng, n_tokens, 2, 4).astype(np.float16)
    b = activations(rng, n_tokens, 2, 4).astype(np.float16)
    exact_a, exact_b = a.astype(np.float64), b.astype(np.float64)
    reference = covariance(exact_a.reshape(n_tokens, -1), exact_b.reshape(n_tokens, -1))
    atol = atol_of(exact_a, exact_b, n_tokens=n_tokens)

    def cross_error() -> float:
        stats = PairStatistics.empty("s1", "s2", 2, 4, "cross_layer")
        for start in range(0, n_tokens, 8192):
            stats.update(a[start : start + 8192], b[start : start + 8192])
        return float(np.abs(stats.covariances()[2].double().numpy() - reference).max())

    assert cross_error() <= atol
    monkeypatch.setattr(streamed, "ACCUMULATOR_DTYPE", torch.float32)
    assert cross_error() > atol  # the same accumulator summing in float32 misses the float64 bound


def test_memory_of_gpt2_small_accumulators():
    layer_block = 12 * 3072**2 * 8  # 0.91 GB
    assert accumulator_bytes(12, 3072, "same_layer") == 3 * layer_block
    assert accumulator_bytes(12, 3072, "cross_layer") == (12 * 3072) ** 2 * 8 + 2 * layer_block
    assert round((12 * 3072) ** 2 * 8 / 1e9, 1) == 10.9
    stats = PairStatistics.empty("s1", "s2", 2, 3, "cross_layer")
    held = sum(getattr(stats, n).numel() * 8 for n in ("comoment_a", "comoment_b", "cross"))
    assert held == accumulator_bytes(2, 3, "cross_layer")
    with pytest.raises(ValueError, match="neuron scope 'all' is not one of same_layer, cross_layer"):
        accumulator_bytes(2, 3, "all")


def test_mismatched_token_counts_name_both_refits_and_the_fix():
    stats = PairStatistics.empty("seed1", "seed2", 2, 4, "same_layer")
    with pytest.raises(ValueError, match=r"10 tokens of refit 'seed1' but 9 of refit 'seed2'; feed both refits"):
        stats.update(np.zeros((10, 2, 4), np.float16), np.zeros((9, 2, 4), np.float16))
    assert stats.n_tokens == 0


def test_a_chunk_of_another_shape_names_the_refit_and_the_expected_shape():
    stats = PairStatistics.empty("seed1", "seed2", 2, 4, "same_layer")
    with pytest.raises(ValueError, match=r"refit 'seed2' has shape \(10, 3, 4\), not \[token, layer, d_mlp\] = "):
        stats.update(np.zeros((10, 2, 4)), np.zeros((10, 3, 4)))
    with pytest.raises(ValueError, match=r"refit 'seed1' has shape \(10, 8\).*blocks.\{layer\}.mlp.hook_post"):
        stats.update(np.zeros((10, 8)), np.zeros((10, 2, 4)))


def test_an_overflowed_float16_activation_names_the_refit_and_layer():
    stats = PairStatistics.empty("seed1", "seed2", 3, 4, "cross_layer")
    other = np.ones((5, 3, 4), np.float16)
    other[2, 2, 1] = np.inf  # what float16 holds of a value beyond its 65504
    with pytest.raises(ValueError, match=r"refit 'seed2' has a non-finite activation in layer 2 .*capture in float32"):
        stats.update(np.ones((5, 3, 4), np.float16), other)


def test_merging_statistics_of_other_refits_or_shapes_fails_naming_them():
    stats = PairStatistics.empty("seed1", "seed2", 2, 4, "same_layer")
    with pytest.raises(ValueError, match="different others: 'seed2' and 'seed3'"):
        stats.merged(PairStatistics.empty("seed1", "seed3", 2, 4, "same_layer"))
    with pytest.raises(ValueError, match="different scopes: 'same_layer' and 'cross_layer'"):
        stats.merged(PairStatistics.empty("seed1", "seed2", 2, 4, "cross_layer"))
    with pytest.raises(ValueError, match="layer x d_mlp 2 x 4 and 3 x 4; merge shards of one architecture"):
        stats.merged(PairStatistics.empty("seed1", "seed2", 3, 4, "same_layer"))


def test_a_covariance_of_one_token_is_refused():
    stats = PairStatistics.empty("seed1", "seed2", 1, 2, "same_layer")
    stats.update(np.ones((1, 1, 2)), np.ones((1, 1, 2)))
    with pytest.raises(ValueError, match="hold 1 token\\(s\\); a covariance needs at least 2"):
        stats.covariances()


def test_statistics_update_on_their_own_device_whatever_torchs_default_device():
    # A session that set another default device (torch.set_default_device) still sums on the accumulators' device.
    rng = np.random.default_rng(4)
    a, b = activations(rng, 30), activations(rng, 30)
    expected = streamed_pass(a, b, "same_layer", chunk=30)
    stats = PairStatistics.empty("s1", "s2", N_LAYERS, D_MLP, "same_layer", device="cpu")
    with torch.device("meta"):
        stats.update(a, b)
    assert stats.cross.device.type == "cpu" and stats.n_tokens == 30
    for name in ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross"):
        assert torch.equal(getattr(stats, name), getattr(expected, name))


def test_statistics_of_no_token_live_on_the_device_asked_for():
    stats = PairStatistics.empty("s1", "s2", 2, 3, "cross_layer", device="meta")
    assert {getattr(stats, name).device.type for name in ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross")} == {
        "meta"
    }


def test_an_empty_chunk_changes_nothing():
    # A batch whose every position is padding or a skipped token yields a chunk of no token.
    rng = np.random.default_rng(5)
    a, b = activations(rng, 20), activations(rng, 20)
    stats = streamed_pass(a, b, "same_layer", chunk=20)
    before = {name: getattr(stats, name).clone() for name in ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross")}
    stats.update(np.zeros((0, N_LAYERS, D_MLP), np.float16), np.zeros((0, N_LAYERS, D_MLP), np.float16))
    assert stats.n_tokens == 20
    for name, value in before.items():
        assert torch.equal(getattr(stats, name), value)
    fresh = PairStatistics.empty("s1", "s2", N_LAYERS, D_MLP, "same_layer")
    fresh.update(np.zeros((0, N_LAYERS, D_MLP)), np.zeros((0, N_LAYERS, D_MLP)))
    assert fresh.n_tokens == 0 and not fresh.cross.any()


@pytest.mark.parametrize("scope", ["same_layer", "cross_layer"])
def test_merging_a_one_token_shard_keeps_its_token_and_never_touches_the_inputs(scope):
    rng = np.random.default_rng(6)
    a, b = activations(rng, 40), activations(rng, 40)
    whole = streamed_pass(a, b, scope, chunk=40)
    one, rest = streamed_pass(a[:1], b[:1], scope, 1), streamed_pass(a[1:], b[1:], scope, 39)
    names = ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross")
    kept = {id(stats): {name: getattr(stats, name).clone() for name in names} for stats in (one, rest)}
    merged = one.merged(rest)
    atol = atol_of(a, b, n_tokens=40) * 40  # comoments: sums over the tokens, not means
    assert merged.n_tokens == 40
    for name in names:
        np.testing.assert_allclose(getattr(merged, name).numpy(), getattr(whole, name).numpy(), rtol=0, atol=atol)
    empty = PairStatistics.empty("s1", "s2", N_LAYERS, D_MLP, scope)
    for merged in (one.merged(rest), empty.merged(rest), rest.merged(empty)):
        merged.update(a[:3], b[:3])  # the merged statistics go on streaming: their inputs must not
    for stats in (one, rest):
        for name in names:
            assert torch.equal(getattr(stats, name), kept[id(stats)][name])


def test_a_covariance_of_two_tokens_is_computed():
    stats = PairStatistics.empty("seed1", "seed2", 1, 2, "same_layer")
    stats.update(np.array([[[1.0, 0.0]], [[3.0, 2.0]]]), np.array([[[0.0, 1.0]], [[0.0, 5.0]]]))
    sigma_a, _, cross = stats.covariances()
    # a = (1, 0), (3, 2) about its mean (2, 1): deviations -+1 each, population covariance 1 everywhere.
    assert sigma_a.tolist() == [[[1.0, 1.0], [1.0, 1.0]]]
    assert cross.tolist() == [[[0.0, 2.0], [0.0, 2.0]]]  # b's second neuron deviates by -+2, its first not at all


def test_the_shape_and_token_messages_name_the_fix_in_full():
    stats = PairStatistics.empty("seed1", "seed2", 2, 4, "same_layer")
    with pytest.raises(
        ValueError,
        match=r"= \[token, 2, 4\]; capture blocks.\{layer\}.mlp.hook_post of every layer of a model of this "
        "architecture$",
    ):
        stats.update(np.zeros((10, 2, 4)), np.zeros((10, 3, 4)))
    with pytest.raises(ValueError, match="feed both refits the same token batches in the same order$"):
        stats.update(np.zeros((10, 2, 4), np.float16), np.zeros((9, 2, 4), np.float16))


def test_a_non_finite_activation_names_its_layer_not_its_token():
    stats = PairStatistics.empty("seed1", "seed2", 3, 4, "same_layer")
    anchor = np.ones((6, 3, 4), np.float16)
    anchor[4, 1, 0] = np.nan
    with pytest.raises(ValueError, match=r"refit 'seed1' has a non-finite activation in layer 1 \(blocks.1.mlp"):
        stats.update(anchor, np.ones((6, 3, 4), np.float16))
