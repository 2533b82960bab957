"""headstab.sections.optimizers: §4.5 activation norms, validation perplexity and Table B.7."""

import math
import sys
import types

import numpy as np
import pandas as pd
import pytest
import torch
from tolerances import reduction_atol, reduction_rtol

from headstab.sections.optimizers import (
    ACTIVATION_NORM_COLUMNS,
    PERPLEXITY_COLUMNS,
    activation_norm_table,
    activation_norms,
    attention_output_from_z,
    mean_token_norm,
    output_weights,
    pair_frame,
    perplexity_comparison,
    perplexity_table,
    refit_activation_norms,
    validation_perplexity_table,
)


def test_attention_output_from_z_matches_hook_attn_out(bridge):
    tokens = torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(0))
    lengths = np.array([7, 4, 2])
    with torch.no_grad():
        _, cache = bridge.run_with_cache(tokens)
    z = np.stack([cache[f"blocks.{layer}.attn.hook_z"].numpy() for layer in range(2)])
    attn_out = np.stack([cache[f"blocks.{layer}.hook_attn_out"].numpy() for layer in range(2)])
    real = np.arange(7)[None, :] < lengths[:, None]
    z[:, ~real] = 0.0  # as cached: zero-padded
    W_O, b_O = output_weights({k: v for k, v in bridge.state_dict().items()}, 2, 4, 8)
    np.testing.assert_array_equal(W_O, bridge.W_O.detach().numpy())  # a reshape: exact
    np.testing.assert_array_equal(b_O, bridge.b_O.detach().numpy())
    got = attention_output_from_z(z, W_O, b_O, lengths)
    assert got.shape == (2, 3, 7, 32)
    # float32 sums over 4 heads x 8 dims, each term at most max|z| max|W_O|
    terms = np.abs(z).max() * np.abs(W_O).max() * 4 * 8
    np.testing.assert_allclose(got[:, real], attn_out[:, real], atol=reduction_atol(np.float32, 4 * 8, terms))
    assert np.all(got[:, ~real] == 0)


def test_activation_norms_by_hand_exclude_padding():
    acts = np.zeros((2, 2, 3, 2))
    acts[0, 0, :2] = [3.0, 4.0]  # norm 5 at two real tokens
    acts[0, 1, 0] = [0.0, 2.0]  # norm 2, one real token
    acts[0, 1, 1:] = 100.0  # padding garbage
    acts[1] = acts[0] * 2
    lengths = np.array([2, 1])
    np.testing.assert_allclose(mean_token_norm(acts, lengths), [4.0, 8.0])
    table = activation_norms(acts, acts / 2, lengths)
    assert list(table.columns) == ["layer", "activation", "mean_norm"]
    got = table.set_index(["activation", "layer"])["mean_norm"]
    assert got[("attn_out", 1)] == pytest.approx(8.0)
    assert got[("resid_mid", 0)] == pytest.approx(2.0)


def test_perplexity_comparison_by_hand():
    result = perplexity_comparison([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert result["mean_adam"] == 2.0 and result["std_adam"] == 1.0
    assert result["difference"] == 3.0
    assert result["welch_t"] == pytest.approx(-3 / math.sqrt(2 / 3))
    assert result["mannwhitney_u"] == 0.0
    assert result["mannwhitney_p"] == pytest.approx(0.1)  # exact: 2 of 20 orderings
    with pytest.raises(ValueError, match="two refits"):
        perplexity_comparison([1.0], [2.0, 3.0])


def _cached(bridge, tokens, lengths):
    """hook_z, hook_attn_out and hook_resid_mid of the bridge on tokens, zero-padded as cached."""
    with torch.no_grad():
        _, cache = bridge.run_with_cache(tokens)
    real = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
    out = {}
    for name in ("attn.hook_z", "hook_attn_out", "hook_resid_mid"):
        acts = np.stack([cache[f"blocks.{layer}.{name}"].numpy() for layer in range(2)])
        acts[:, ~real] = 0.0
        out[name] = acts
    return out


def test_refit_activation_norms_from_a_cache_reader_match_the_models_own_activations(bridge, tiny_spec, fake_cache):
    tokens = torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(1))
    lengths = np.array([7, 5, 2])
    acts = _cached(bridge, tokens, lengths)
    cache = fake_cache(
        "seed1.h5", lengths, hook_z=acts["attn.hook_z"], resid={"hook_resid_mid": acts["hook_resid_mid"]}
    )
    spec = tiny_spec(n_layers=2, n_heads=4, d_head=8, d_model=32)
    table = refit_activation_norms(cache, bridge.state_dict(), "primary", spec)
    assert sorted(set(cache.reads)) == [("hook_resid_mid", 0), ("hook_resid_mid", 1), ("hook_z", 0), ("hook_z", 1)]
    expected = activation_norms(acts["hook_attn_out"], acts["hook_resid_mid"], lengths)
    got = table.set_index(["activation", "layer"])["mean_norm"].sort_index()
    want = expected.set_index(["activation", "layer"])["mean_norm"].sort_index()
    # the attention output is rebuilt from hook_z: float32 sums over 4 heads x 8 dims per entry, 32 entries per norm
    np.testing.assert_allclose(got, want, rtol=reduction_rtol(np.float32, 4 * 8 + 32))


def test_activation_norm_table_reads_each_refits_weights_and_cache_in_seed_order(
    monkeypatch, tiny_spec, tmp_path, fake_cache
):
    from headstab.models import build_model, save_weights

    spec = tiny_spec(seeds=(2, 1))
    lengths = np.array([3, 2])
    caches = {}
    for seed in (2, 1):
        save_weights(build_model(spec, seed), tmp_path / f"seed{seed}.pt")
        rng = np.random.default_rng(seed)
        caches[str(tmp_path / f"seed{seed}.h5")] = fake_cache(
            f"seed{seed}.h5",
            lengths,
            hook_z=rng.normal(size=(2, 2, 4, 2, 8)).astype(np.float32),
            resid={"hook_resid_mid": rng.normal(size=(2, 2, 4, 16)).astype(np.float32)},
        )
    reader = types.ModuleType("headstab.activations.reader")
    reader.open_cache = lambda path: caches[str(path)]
    monkeypatch.setitem(sys.modules, "headstab.activations", types.ModuleType("headstab.activations"))
    monkeypatch.setitem(sys.modules, "headstab.activations.reader", reader)
    refits = {seed: (tmp_path / f"seed{seed}.pt", tmp_path / f"seed{seed}.h5") for seed in (2, 1)}
    table = activation_norm_table(spec, refits, "primary", ())
    assert list(table.columns) == ACTIVATION_NORM_COLUMNS
    assert table["seed"].tolist() == [2] * 4 + [1] * 4
    first = refit_activation_norms(
        caches[str(tmp_path / "seed2.h5")], build_model(spec, 2).state_dict(), "primary", spec
    )
    np.testing.assert_array_equal(table["mean_norm"].to_numpy()[:4], first["mean_norm"].to_numpy())


def test_validation_perplexity_of_every_refit(tiny_spec, tmp_path):
    from headstab.evaluation import perplexity
    from headstab.models import build_model, save_weights

    spec = tiny_spec(seeds=(1, 2))
    weights = {}
    for seed in (1, 2):
        weights[seed] = tmp_path / f"seed{seed}.pt"
        save_weights(build_model(spec, seed), weights[seed])
    windows = np.random.default_rng(0).integers(0, spec.d_vocab, size=(3, 16))
    table = validation_perplexity_table(spec, weights, windows, "cpu", batch_size=2, weight_processing=())
    assert list(table.columns) == ["seed", "perplexity", "n_tokens"]
    assert table["seed"].tolist() == [1, 2] and (table["n_tokens"] == 3 * 15).all()
    expected = perplexity(build_model(spec, 2).eval(), windows, np.full(3, 16), batch_size=2)
    assert table["perplexity"].iloc[1] == pytest.approx(expected, rel=reduction_rtol(np.float32, 3 * 15))


def test_perplexity_table_is_long_and_tidy():
    ppl = pair_frame(
        pd.DataFrame({"seed": [1, 2], "perplexity": [1.0, 2.0]}),
        pd.DataFrame({"seed": [1, 2], "perplexity": [4.0, 6.0]}),
    )
    assert ppl["optimizer"].tolist() == ["Adam", "Adam", "AdamW", "AdamW"]
    comparison = perplexity_comparison([1.0, 2.0], [4.0, 6.0])
    table = perplexity_table(ppl, comparison, {"Adam": "l2", "AdamW": "l2_wd"})
    assert list(table.columns) == PERPLEXITY_COLUMNS and str(table["seed"].dtype) == "Int64"
    refits = table[table["scope"] == "refit"]
    assert refits["architecture"].tolist() == ["l2", "l2", "l2_wd", "l2_wd"] and refits["value"].tolist() == [
        1.0,
        2.0,
        4.0,
        6.0,
    ]
    stats = table[table["scope"] == "optimizer"].set_index(["optimizer", "statistic"])["value"]
    assert (stats[("Adam", "mean")], stats[("AdamW", "n")]) == (1.5, 2)
    assert table[table["scope"] == "optimizer"]["seed"].isna().all()
    pair = table[table["scope"] == "comparison"]
    assert set(pair["architecture"]) == {"l2 vs l2_wd"} and set(pair["optimizer"]) == {"AdamW - Adam"}
    assert pair.set_index("statistic").loc["difference", "value"] == 3.5
    assert pair["statistic"].tolist() == ["difference", "welch_t", "welch_p", "mannwhitney_u", "mannwhitney_p"]
