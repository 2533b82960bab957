"""headstab.sections.optimizers: §4.5 activation norms, validation perplexity and the perplexity comparison (§B.7 figures)."""

import logging
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import torch
from helpers.tolerances import reduction_atol, reduction_rtol

from headstab.sections import optimizers
from headstab.sections.optimizers import (
    ACTIVATION_NORM_COLUMNS,
    PERPLEXITY_COLUMNS,
    SEPARATED,
    activation_norm_table,
    activation_norms,
    attention_output_from_z,
    brunner_munzel_test,
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
    # a complete separation: the most extreme of the 20 splits of 3 + 3 labels, on each side
    assert result["brunner_munzel_w"] == SEPARATED
    assert result["brunner_munzel_p"] == pytest.approx(2 / 20)
    with pytest.raises(ValueError, match="two refits"):
        perplexity_comparison([1.0], [2.0, 3.0])
    with pytest.raises(ValueError, match=r"got \(2, 1\) \(Adam\) and \(2,\) \(AdamW\)"):
        perplexity_comparison([[1.0], [2.0]], [2.0, 3.0])


def test_a_difference_of_spread_alone_is_no_difference_for_the_rank_test():
    # AdamW's 20 refits sit at one perplexity; Adam's spread widely around it, 14 below and 6 above. Their
    # medians agree, yet Mann-Whitney (null: one distribution) rejects, reading the wide spread as a shift.
    # Brunner-Munzel's null is P(Adam < AdamW) = 1/2 whatever the spreads: 0.7 here, within its chance.
    adamw = 30.0 + np.linspace(-0.001, 0.001, 20)
    adam = 30.0 + np.r_[-np.linspace(1, 2, 14), np.linspace(1, 2, 6)]
    assert scipy.stats.mannwhitneyu(adam, adamw).pvalue < 0.05
    result = perplexity_comparison(adam, adamw, permutations=2000, seed=0)
    assert result["brunner_munzel_p"] > 0.05
    assert result["brunner_munzel_w"] == pytest.approx(scipy.stats.brunnermunzel(adam, adamw).statistic)
    assert result["brunner_munzel_w"] > 0  # Adam below AdamW in 14 of 20: P(Adam < AdamW) = 0.7
    shifted = perplexity_comparison(adam, adamw + 5.0, permutations=2000, seed=0)
    assert shifted["brunner_munzel_p"] < 0.01 and shifted["brunner_munzel_w"] == SEPARATED


def test_the_rank_test_permutes_the_labels_exactly_when_the_splits_are_few_and_else_from_the_seed():
    adam, adamw = np.array([30.1, 29.5, 30.8, 30.2]), np.array([30.5, 31.0, 29.9, 30.4])
    w, p = brunner_munzel_test(adam, adamw, permutations=100, seed=0)
    # 70 splits of 4 + 4: exact, the same whatever the seed
    assert (w, p) == brunner_munzel_test(adam, adamw, permutations=100, seed=9)
    assert round(p * 70) == pytest.approx(p * 70, abs=1e-9)
    many = np.linspace(29.0, 31.0, 12)
    drawn = [brunner_munzel_test(many[::2], many[1::2] + 0.05, 99, seed)[1] for seed in range(4)]
    assert len(set(drawn)) > 1  # 924 splits, 99 random ones
    assert all(round(p * 100) == pytest.approx(p * 100, abs=1e-9) for p in drawn)  # (1 + #extreme) / 100 a side
    tied = brunner_munzel_test(np.array([1.0, 1.0]), np.array([1.0, 1.0]), 10, 0)
    assert tied[0] == 0.0  # no spread in either group: no evidence


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
    from headstab.refits.models import build_model, save_weights

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
    monkeypatch.setattr(optimizers, "open_cache", lambda path: caches[str(path)])  # the section's own name
    refits = {seed: (tmp_path / f"seed{seed}.pt", tmp_path / f"seed{seed}.h5") for seed in (2, 1)}
    table = activation_norm_table(spec, refits, "primary", ())
    assert list(table.columns) == ACTIVATION_NORM_COLUMNS and table.index.tolist() == list(range(8))
    assert table["seed"].tolist() == [2] * 4 + [1] * 4
    first = refit_activation_norms(
        caches[str(tmp_path / "seed2.h5")], build_model(spec, 2).state_dict(), "primary", spec
    )
    np.testing.assert_array_equal(table["mean_norm"].to_numpy()[:4], first["mean_norm"].to_numpy())


def test_validation_perplexity_of_every_refit(tiny_spec, tmp_path):
    from headstab.evaluation import perplexity
    from headstab.refits.models import build_model, save_weights

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
    assert PERPLEXITY_COLUMNS[-2:] == ["q_value", "calibration"]
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
    assert pair["statistic"].tolist() == ["difference", "welch_t", "welch_p", "brunner_munzel_w", "brunner_munzel_p"]


def test_the_two_perplexity_tests_are_one_family_with_their_calibration_at_the_smaller_member():
    from headstab.statistics.calibration import calibration_label

    ppl = pair_frame(
        pd.DataFrame({"seed": [1, 2, 3], "perplexity": [1.0, 2.0, 3.0]}),
        pd.DataFrame({"seed": [1, 2, 3, 4, 5], "perplexity": [4.0, 6.0, 5.0, 7.0, 8.0]}),
    )
    comparison = perplexity_comparison([1.0, 2.0, 3.0], [4.0, 6.0, 5.0, 7.0, 8.0], permutations=1000, seed=0)
    table = perplexity_table(ppl, comparison, {"Adam": "l2", "AdamW": "l2_wd"}).set_index("statistic")
    welch, rank = table.loc["welch_p", "value"], table.loc["brunner_munzel_p", "value"]
    assert welch < rank  # Benjamini-Hochberg of 2 by hand: the larger keeps its p, the smaller min(2 p, the larger)
    assert table.loc["brunner_munzel_p", "q_value"] == pytest.approx(rank)
    assert table.loc["welch_p", "q_value"] == pytest.approx(min(2 * welch, rank))
    assert table.loc["welch_p", "calibration"] == calibration_label("welch_t_perplexity", 3)
    assert table.loc["brunner_munzel_p", "calibration"] == calibration_label("brunner_munzel_perplexity", 3)
    others = table.drop(index=["welch_p", "brunner_munzel_p"])
    assert others["q_value"].isna().all() and others["calibration"].isna().all()


def _output_state(d_model=5, n_heads=2, d_head=3, bias=True):
    """A state dict of 2 layers whose W_O differ per layer, d_model != n_heads * d_head."""
    rng = np.random.default_rng(0)
    state = {f"blocks.{layer}.attn.o.weight": rng.normal(size=(d_model, n_heads * d_head)) for layer in range(2)}
    if bias:
        state |= {f"blocks.{layer}.attn.o.bias": rng.normal(size=d_model) for layer in range(2)}
    return state


def test_output_weights_by_hand_with_and_without_bias():
    state = _output_state()
    W_O, b_O = output_weights(state, 2, 2, 3)
    assert (W_O.dtype, b_O.dtype) == (np.float32, np.float32)
    assert W_O.shape == (2, 2, 3, 5)
    # head h, row i of its [d_head, d_model] block is column h * d_head + i of the Linear weight
    np.testing.assert_array_equal(W_O[1, 1, 2], state["blocks.1.attn.o.weight"][:, 1 * 3 + 2].astype(np.float32))
    np.testing.assert_array_equal(b_O[1], state["blocks.1.attn.o.bias"].astype(np.float32))
    _, no_bias = output_weights(_output_state(bias=False), 2, 2, 3)
    np.testing.assert_array_equal(no_bias, np.zeros((2, 5)))


def test_output_weights_refusals_name_the_key_and_the_expected_size():
    with pytest.raises(ValueError, match=r"^blocks.0.attn.o.weight has shape \(5, 6\); expected \[d_model, 8\]$"):
        output_weights(_output_state(), 2, 2, 4)
    state = {"a": 0, "b": 0, "c": 0, "d": 0, "e": 0}
    with pytest.raises(KeyError, match=r"lacks blocks.0.attn.o.weight; keys look like \['a', 'b', 'c', 'd'\]\"$"):
        output_weights(state, 2, 2, 3)


def test_attention_output_adds_the_bias_at_real_tokens_only():
    W_O, b_O = output_weights(_output_state(), 2, 2, 3)
    z = np.random.default_rng(1).normal(size=(2, 2, 4, 2, 3)).astype(np.float32)
    lengths = np.array([4, 2])
    z[:, 1, 2:] = 0.0
    out = attention_output_from_z(z, W_O, b_O, lengths)
    assert out.dtype == np.float32
    expected = np.einsum("lpshd,lhdm->lpsm", z.astype(np.float64), W_O.astype(np.float64)) + b_O[:, None, None, :]
    atol = reduction_atol(np.float32, 2 * 3, float(np.abs(z).max() * np.abs(W_O).max()) + float(np.abs(b_O).max()))
    np.testing.assert_allclose(out[:, 0], expected[:, 0], atol=atol)
    np.testing.assert_allclose(out[:, 1, :2], expected[:, 1, :2], atol=atol)
    assert (out[:, 1, 2:] == 0).all()
    # Without lengths the padding holds the bias
    np.testing.assert_allclose(attention_output_from_z(z, W_O, b_O)[:, 1, 2:], np.broadcast_to(b_O[:, None], (2, 2, 5)))


def test_half_precision_hook_z_is_summed_in_float32():
    # A cache written with cache.dtype float16 holds hook_z in half precision.
    W_O, b_O = output_weights(_output_state(), 2, 2, 3)
    z16 = np.random.default_rng(2).normal(size=(2, 1, 3, 2, 3)).astype(np.float16)
    out = attention_output_from_z(z16, W_O, b_O)
    expected = attention_output_from_z(z16.astype(np.float32), W_O, b_O)
    np.testing.assert_allclose(out, expected, rtol=reduction_rtol(np.float32, 2 * 3), atol=0)


def test_no_prompts_and_no_positions_are_accepted():
    W_O, b_O = output_weights(_output_state(), 2, 2, 3)
    out = attention_output_from_z(np.zeros((2, 0, 0, 2, 3), np.float32), W_O, b_O, np.zeros(0, int))
    assert out.shape == (2, 0, 0, 5)


def test_attention_output_refusals_name_the_shapes():
    W_O, b_O = output_weights(_output_state(), 2, 2, 3)
    z = np.zeros((2, 1, 3, 2, 3), np.float32)
    message = r"^hook_z \(2, 1, 3, 2\) \[layer, prompt, pos, head, d_head\] and W_O \(2, 2, 3, 5\) \[layer, head, d_head, d_model\] disagree$"
    with pytest.raises(ValueError, match=message):
        attention_output_from_z(z[..., 0], W_O, b_O)
    W_O3, b_O3 = output_weights(_output_state(n_heads=3, d_head=2), 2, 3, 2)  # 3 heads, 2 layers
    with pytest.raises(ValueError, match=r"^b_O must be \[layer, d_model\] = \(2, 5\), got \(2, 4\)$"):
        attention_output_from_z(np.zeros((2, 1, 3, 3, 2), np.float32), W_O3, b_O3[:, :4])
    for lengths in (np.array([[1]]), np.array([4]), np.array([-1])):
        with pytest.raises(ValueError, match=r"^lengths must be \[prompt\] with values in \[0, 3\]"):
            attention_output_from_z(z, W_O, b_O, lengths)


def test_mean_token_norm_is_float64_and_refuses_other_shapes():
    acts = (1 + 1e-3 * np.random.default_rng(3).normal(size=(1, 2, 3, 64))).astype(np.float32)
    lengths = np.array([3, 2])
    got = mean_token_norm(acts, lengths)
    norms = np.sqrt((acts.astype(np.float64) ** 2).sum(axis=-1))
    expected = (norms[0, 0].sum() + norms[0, 1, :2].sum()) / 5
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, [expected], rtol=reduction_rtol(np.float64, 64 + 5), atol=0)
    with pytest.raises(
        ValueError, match=r"^acts must be \[layer, prompt, pos, d_model\] with 2 prompts, got \(1, 3, 3, 64\)$"
    ):
        mean_token_norm(np.zeros((1, 3, 3, 64)), lengths)
    with pytest.raises(ValueError, match=r"with 2 prompts, got \(2, 3, 64\)$"):
        mean_token_norm(np.zeros((2, 3, 64)), lengths)


def test_norm_tables_number_their_rows_and_name_each_layer(bridge, tiny_spec, fake_cache):
    acts = np.ones((2, 2, 3, 4))
    assert activation_norms(acts, acts, np.array([3, 1])).index.tolist() == list(range(4))
    tokens = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(2))
    lengths = np.array([5, 3])
    cached = _cached(bridge, tokens, lengths)
    cache = fake_cache(
        "s.h5", lengths, hook_z=cached["attn.hook_z"], resid={"hook_resid_mid": cached["hook_resid_mid"]}
    )
    spec = tiny_spec(n_layers=2, n_heads=4, d_head=8, d_model=32)
    table = refit_activation_norms(cache, bridge.state_dict(), "primary", spec)
    assert table["layer"].tolist() == [0, 0, 1, 1] and table.index.tolist() == [0, 1, 2, 3]
    ppl = pair_frame(pd.DataFrame({"seed": [1], "perplexity": [2.0]}), pd.DataFrame({"seed": [1], "perplexity": [3.0]}))
    assert ppl.index.tolist() == [0, 1]


def test_welch_comparison_by_hand_with_unequal_variances():
    a, b = np.array([10.0, 11.0, 12.5]), np.array([9.0, 13.0, 16.0, 20.0])
    result = perplexity_comparison(a, b)
    va, vb = a.var(ddof=1) / 3, b.var(ddof=1) / 4
    t = (a.mean() - b.mean()) / np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)  # Welch-Satterthwaite
    assert result["welch_t"] == pytest.approx(t, rel=reduction_rtol(np.float64, 8))
    assert result["welch_p"] == pytest.approx(2 * scipy.stats.t.sf(abs(t), df), rel=1e-9)
    assert result["std_adamw"] == pytest.approx(
        np.sqrt(np.sum((b - b.mean()) ** 2) / 3), rel=reduction_rtol(np.float64, 4)
    )
    assert (result["n_adam"], result["n_adamw"]) == (3, 4)
    with pytest.raises(ValueError, match=r"got \(2, 3\) \(Adam\) and \(4,\) \(AdamW\)$"):
        perplexity_comparison(np.stack([a, a]), b)


def test_refit_rows_are_perplexities():
    ppl = pair_frame(
        pd.DataFrame({"seed": [1, 2], "perplexity": [1.0, 2.0]}),
        pd.DataFrame({"seed": [3, 4], "perplexity": [4.0, 6.0]}),
    )
    table = perplexity_table(ppl, perplexity_comparison([1.0, 2.0], [4.0, 6.0]), {"Adam": "l2", "AdamW": "l2_wd"})
    refits = table[table["scope"] == "refit"]
    assert refits["statistic"].tolist() == ["perplexity"] * 4 and refits["seed"].tolist() == [1, 2, 3, 4]


def test_validation_perplexity_passes_device_batch_size_and_processing_and_logs(monkeypatch, caplog):
    import headstab.refits.models
    import headstab.sections.optimizers as optimizers

    calls = []
    monkeypatch.setattr(
        headstab.refits.models, "load_trained_model", lambda *args, **kwargs: calls.append((args, kwargs)) or "model"
    )

    def summed(model, windows, lengths, batch_size=16):
        calls.append((model, lengths.tolist(), batch_size))
        return 10 * math.log(4.0), 10

    monkeypatch.setattr(optimizers, "summed_token_loss", summed)
    windows = np.zeros((2, 6), dtype=int)
    with caplog.at_level(logging.INFO, logger="headstab.sections.optimizers"):
        table = validation_perplexity_table(
            "spec", {7: "w.pt"}, windows, "cuda:1", batch_size=3, weight_processing=("fold",)
        )
    assert calls == [(("spec", "w.pt", "cuda:1"), {"weight_processing": ("fold",)}), ("model", [6, 6], 3)]
    assert table["perplexity"].tolist() == pytest.approx([4.0])
    assert caplog.messages == ["seed 7: validation perplexity 4.000 over 10 predicted tokens"]


def _min_n(monkeypatch, method, min_n):
    """Set `method`'s min_n in the registry the section reads."""
    from dataclasses import replace

    from headstab.statistics import calibration

    monkeypatch.setitem(calibration.METHODS, method, replace(calibration.METHODS[method], min_n=min_n))


def test_the_tests_are_labelled_at_the_smaller_members_refits(monkeypatch):
    ppl = pair_frame(
        pd.DataFrame({"seed": [1, 2, 3, 4, 5], "perplexity": [1.0, 2.0, 3.0, 2.5, 1.5]}),
        pd.DataFrame({"seed": [1, 2, 3, 4], "perplexity": [4.0, 6.0, 5.0, 7.0]}),
    )
    comparison = perplexity_comparison([1.0, 2.0, 3.0, 2.5, 1.5], [4.0, 6.0, 5.0, 7.0], permutations=50, seed=0)
    for min_n, label in ((4, "calibrated"), (5, "descriptive")):
        for method in ("welch_t_perplexity", "brunner_munzel_perplexity"):
            _min_n(monkeypatch, method, min_n)
        table = perplexity_table(ppl, comparison, {"Adam": "a", "AdamW": "b"}).set_index("statistic")
        assert table.loc[["welch_p", "brunner_munzel_p"], "calibration"].tolist() == [label, label]


def test_the_rank_test_samples_10000_seeded_splits_by_default():
    rng = np.random.default_rng(1)
    adam, adamw = rng.normal(20.0, 1.0, size=8), rng.normal(20.5, 1.0, size=8)  # 12870 splits: sampled
    comparison = perplexity_comparison(adam, adamw)
    w, p = brunner_munzel_test(adam, adamw, 10000, 0)
    assert (comparison["brunner_munzel_w"], comparison["brunner_munzel_p"]) == (w, p)
    assert brunner_munzel_test(adam, adamw, 10000, 0) == (w, p)  # seeded: the same draws
    assert (p * 10001) == pytest.approx(round(p * 10001))  # (k + 1) / (10000 + 1)
    assert brunner_munzel_test(adam, adamw, 10000, 1)[1] != p


def test_a_complete_separation_is_the_most_extreme_statistic_either_way():
    low, high = np.array([0.0, 1.0, 2.0]), np.array([3.0, 4.0, 5.0])
    assert optimizers._brunner_munzel(low, high) == SEPARATED
    assert optimizers._brunner_munzel(high, low) == -SEPARATED


def test_the_q_values_of_the_perplexity_table_are_floats():
    ppl = pair_frame(
        pd.DataFrame({"seed": [1, 2], "perplexity": [1.0, 2.0]}),
        pd.DataFrame({"seed": [1, 2], "perplexity": [4.0, 6.0]}),
    )
    table = perplexity_table(ppl, perplexity_comparison([1.0, 2.0], [4.0, 6.0]), {"Adam": "l2", "AdamW": "l2_wd"})
    assert table["q_value"].dtype == np.float64
