import math

import numpy as np
import pandas as pd
import pytest
import torch

from headstab.analyses import (
    activation_norms,
    attention_output_from_z,
    layer_weight_norms,
    mean_token_norm,
    norm_stability_correlation,
    output_weights,
    perplexity_comparison,
    prompt_length_table,
    stability_gap_table,
)
from tolerances import reduction_atol, reduction_rtol


def _bridge(attn_only: bool):
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    cfg = TransformerBridgeConfig(
        n_layers=2, n_heads=4, d_model=32, d_head=8, d_mlp=None if attn_only else 64, n_ctx=32,
        d_vocab=50, act_fn="gelu", normalization_type="LN", positional_embedding_type="standard",
        init_mode="gpt2", seed=3, attn_only=attn_only,
    )
    return TransformerBridge.boot_native(cfg)


@pytest.fixture(scope="module")
def bridge():
    return _bridge(attn_only=False)


def _layer_stability(means_by_anchor, promptset="primary", scope="same_layer"):
    rows = []
    for anchor, means in means_by_anchor.items():
        for layer, m in enumerate(means):
            rows.append((promptset, scope, anchor, layer, m, 0.1))
    return pd.DataFrame(rows, columns=["promptset", "scope", "anchor_seed", "layer", "mean", "std"])


# --- §4.4.1 weight norms -------------------------------------------------------------------------


def test_weight_norms_by_hand():
    n_heads, d_head, d_model = 2, 3, 4
    q = np.zeros((n_heads * d_head, d_model))
    q[:d_head] = 1.0  # head 0: all ones, norm sqrt(12); head 1: zeros
    o = np.zeros((d_model, n_heads * d_head))
    o[:, d_head:] = 2.0  # head 1 only: norm 2 * sqrt(12)
    state = {
        "blocks.0.attn.q.weight": q,
        "blocks.0.attn.k.weight": q,
        "blocks.0.attn.v.weight": 3 * q,
        "blocks.0.attn.o.weight": o,
        "blocks.0.ln1.weight": np.array([3.0, 4.0, 0.0, 0.0]),
    }
    norms = layer_weight_norms(state, n_layers=1, n_heads=n_heads, d_head=d_head)
    got = norms.set_index("matrix")["frobenius_norm"]
    assert list(norms.columns) == ["layer", "matrix", "frobenius_norm"]
    assert set(got.index) == {"W_Q", "W_K", "W_V", "W_O", "ln1_w"}  # no MLP, no ln2 given
    assert got["W_Q"] == pytest.approx(math.sqrt(12) / 2)
    assert got["W_V"] == pytest.approx(3 * math.sqrt(12) / 2)
    assert got["W_O"] == pytest.approx(2 * math.sqrt(12) / 2)
    assert got["ln1_w"] == pytest.approx(5.0)
    # The authors' code: one Frobenius norm over the whole layer's matrix (all heads together).
    whole = layer_weight_norms(state, n_layers=1, n_heads=n_heads, d_head=d_head, attention_norm="layer")
    whole = whole.set_index("matrix")["frobenius_norm"]
    assert whole["W_Q"] == pytest.approx(math.sqrt(12), rel=reduction_rtol(np.float64, 24))  # sqrt(12 + 0)
    assert whole["W_O"] == pytest.approx(2 * math.sqrt(12), rel=reduction_rtol(np.float64, 24))
    assert whole["ln1_w"] == pytest.approx(5.0, rel=reduction_rtol(np.float64, 4))  # not per head: unchanged
    with pytest.raises(ValueError, match="analysis.attention_norm"):
        layer_weight_norms(state, 1, n_heads, d_head, attention_norm="sum")


def test_weight_norms_match_bridge_per_head_matrices(bridge):
    norms = layer_weight_norms(bridge, n_layers=2, n_heads=4, d_head=8)
    got = norms.set_index(["layer", "matrix"])["frobenius_norm"]
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        per_head = getattr(bridge, name).detach().numpy()  # [layer, head, ., .]
        expected = np.linalg.norm(per_head, axis=(2, 3)).mean(axis=1)
        # numpy's norm sums a head's 32 x 8 squares in float32
        np.testing.assert_allclose([got[(l, name)] for l in range(2)], expected, rtol=reduction_rtol(np.float32, 32 * 8))
    np.testing.assert_allclose(
        got[(1, "W_in")], np.linalg.norm(bridge.W_in[1].detach().numpy()), rtol=reduction_rtol(np.float32, 32 * 64)
    )
    assert set(norms["matrix"]) == {"W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "ln1_w", "ln2_w"}
    # the plain NativeModel's state dict (nested names) gives the same table
    native = layer_weight_norms(bridge.original_model.state_dict(), 2, 4, 8)
    pd.testing.assert_frame_equal(native, norms)


def test_weight_norms_attention_only_skip_mlp():
    norms = layer_weight_norms(_bridge(attn_only=True), 2, 4, 8)
    assert set(norms["matrix"]) == {"W_Q", "W_K", "W_V", "W_O", "ln1_w"}
    assert len(norms) == 2 * 5


def test_weight_norms_wrong_head_shape_names_key():
    with pytest.raises(ValueError, match="blocks.0.attn.q.weight"):
        layer_weight_norms({f"blocks.0.attn.{m}.weight": np.zeros((6, 4)) for m in "qkvo"}, 1, 4, 2)


def test_norm_stability_correlation_by_hand():
    norms = pd.DataFrame(
        [(s, l, m, v) for s in (1, 2) for l in range(3) for m, v in
         (("W_Q", 1.0 + l), ("W_K", 5.0 - 2 * l), ("ln1_w", 1.0))],
        columns=["seed", "layer", "matrix", "frobenius_norm"],
    )
    stab = _layer_stability({1: [0.9, 0.6, 0.3], 2: [0.1, 0.2, 0.3], 3: [0.5, 0.5, 0.4]})
    stab = pd.concat([stab, stab.assign(promptset="len5", mean=0.0)])
    corr = norm_stability_correlation(norms, stab)
    got = corr.set_index(["anchor_seed", "matrix"])
    assert sorted(corr["anchor_seed"].unique()) == [1, 2]  # anchor 3 has no weights
    assert got.loc[(1, "W_Q"), "pearson_r"] == pytest.approx(-1.0)
    assert got.loc[(2, "W_Q"), "pearson_r"] == pytest.approx(1.0)
    assert got.loc[(2, "W_K"), "pearson_r"] == pytest.approx(-1.0)
    assert math.isnan(got.loc[(1, "ln1_w"), "pearson_r"])  # constant norm
    assert corr["n_layers"].eq(3).all()


def test_norm_stability_correlation_refuses_ambiguous_promptsets():
    norms = pd.DataFrame({"seed": [1], "layer": [0], "matrix": ["W_Q"], "frobenius_norm": [1.0]})
    stab = pd.concat([_layer_stability({1: [0.5]}), _layer_stability({1: [0.5]}, promptset="x")])
    with pytest.raises(ValueError, match="promptset"):
        norm_stability_correlation(norms, stab, promptset=None)


# --- §4.4.2 prompt length ------------------------------------------------------------------------


def test_prompt_length_table_picks_first_anchor_and_len_sets():
    stab = pd.concat(
        [
            _layer_stability({2: [0.5, 0.4], 1: [0.2, 0.1]}, promptset="len10"),
            _layer_stability({2: [0.7, 0.6], 1: [0.3, 0.35]}, promptset="len5"),
            _layer_stability({1: [0.9, 0.9]}, promptset="primary"),
        ]
    )
    table = prompt_length_table(stab)
    assert list(table.columns) == ["prompt_length", "layer", "mean", "std", "anchor_seed"]
    assert table["prompt_length"].tolist() == [5, 5, 10, 10]
    assert table["mean"].tolist() == [0.3, 0.35, 0.2, 0.1]
    assert prompt_length_table(stab, anchor_seed=2)["mean"].tolist() == [0.7, 0.6, 0.5, 0.4]
    with pytest.raises(ValueError, match="length_sweep"):
        prompt_length_table(stab[stab.promptset == "primary"])


# --- §4.5 Adam vs AdamW --------------------------------------------------------------------------


def test_attention_output_from_z_matches_hook_attn_out(bridge):
    tokens = torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(0))
    lengths = np.array([7, 4, 2])
    with torch.no_grad():
        _, cache = bridge.run_with_cache(tokens)
    z = np.stack([cache[f"blocks.{l}.attn.hook_z"].numpy() for l in range(2)])
    attn_out = np.stack([cache[f"blocks.{l}.hook_attn_out"].numpy() for l in range(2)])
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


# --- §4.6 stability gap --------------------------------------------------------------------------


def test_stability_gap_by_hand():
    stab = _layer_stability({1: [0.2, 0.9, 0.5, 0.1], 2: [0.4, 0.4, 0.3, 0.8]})
    stab = stab.sample(frac=1.0, random_state=0)  # row order must not matter
    gap = stability_gap_table(stab, n_layers=4).set_index("anchor_seed")
    assert gap.loc[1, "delta_s"] == pytest.approx(0.8)
    assert (gap.loc[1, "l_max"], gap.loc[1, "l_min"]) == (2, 4)
    assert (gap.loc[1, "r_max"], gap.loc[1, "r_min"]) == (0.5, 1.0)
    assert gap.loc[2, "delta_s"] == pytest.approx(0.5)
    assert (gap.loc[2, "l_max"], gap.loc[2, "l_min"]) == (4, 3)
    assert gap.loc[2, "r_min"] == 0.75


def test_stability_gap_rejects_missing_layers():
    with pytest.raises(ValueError, match="anchor 1 has layers"):
        stability_gap_table(_layer_stability({1: [0.2, 0.9]}), n_layers=3)
