"""headstab.sections.weight_norms: §4.4.1 weight norms, their correlation with stability, Table B.5."""

import math
import re
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from helpers.tolerances import reduction_atol, reduction_rtol

from headstab.sections.weight_norms import (
    CORRELATION_COLUMNS,
    NORM_COLUMNS,
    bridge_state,
    layer_weight_norms,
    norm_stability_correlation,
    refit_weight_norms,
    to_numpy,
    trained_state,
    weight_norm_summary,
)


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
    assert list(norms.columns) == ["layer", "matrix", "frobenius_norm", "whole_layer_norm"]
    assert set(got.index) == {"W_Q", "W_K", "W_V", "W_O", "ln1_w"}  # no MLP, no ln2 given
    assert got["W_Q"] == pytest.approx(math.sqrt(12) / 2)
    assert got["W_V"] == pytest.approx(3 * math.sqrt(12) / 2)
    assert got["W_O"] == pytest.approx(2 * math.sqrt(12) / 2)
    assert got["ln1_w"] == pytest.approx(5.0)
    # The authors' code: one Frobenius norm over the whole layer's matrix (all heads together).
    whole_table = layer_weight_norms(state, n_layers=1, n_heads=n_heads, d_head=d_head, attention_norm="layer")
    whole = whole_table.set_index("matrix")["frobenius_norm"]
    # Table B.5's norm comes with either setting, and is the configured one under "layer".
    pd.testing.assert_series_equal(norms["whole_layer_norm"], whole_table["frobenius_norm"], check_names=False)
    pd.testing.assert_series_equal(whole_table["whole_layer_norm"], whole_table["frobenius_norm"], check_names=False)
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
        np.testing.assert_allclose(
            [got[(layer, name)] for layer in range(2)], expected, rtol=reduction_rtol(np.float32, 32 * 8)
        )
    np.testing.assert_allclose(
        got[(1, "W_in")], np.linalg.norm(bridge.W_in[1].detach().numpy()), rtol=reduction_rtol(np.float32, 32 * 64)
    )
    assert set(norms["matrix"]) == {"W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "ln1_w", "ln2_w"}
    # the plain NativeModel's state dict (nested names) gives the same table
    native = layer_weight_norms(bridge.original_model.state_dict(), 2, 4, 8)
    pd.testing.assert_frame_equal(native, norms)


def test_weight_norms_attention_only_skip_mlp(attention_only_bridge):
    norms = layer_weight_norms(attention_only_bridge, 2, 4, 8)
    assert set(norms["matrix"]) == {"W_Q", "W_K", "W_V", "W_O", "ln1_w"}
    assert len(norms) == 2 * 5


def test_weight_norms_wrong_head_shape_names_key():
    with pytest.raises(ValueError, match="blocks.0.attn.q.weight"):
        layer_weight_norms({f"blocks.0.attn.{m}.weight": np.zeros((6, 4)) for m in "qkvo"}, 1, 4, 2)


def test_norm_stability_correlation_by_hand(layer_stability):
    norms = pd.DataFrame(
        [
            (s, layer, m, v)
            for s in (1, 2)
            for layer in range(3)
            for m, v in (("W_Q", 1.0 + layer), ("W_K", 5.0 - 2 * layer), ("ln1_w", 1.0))
        ],
        columns=["seed", "layer", "matrix", "frobenius_norm"],
    ).assign(whole_layer_norm=lambda t: t["frobenius_norm"])
    stab = layer_stability({1: [0.9, 0.6, 0.3], 2: [0.1, 0.2, 0.3], 3: [0.5, 0.5, 0.4]})
    stab = pd.concat([stab, stab.assign(promptset="len5", mean=0.0)])
    corr = norm_stability_correlation(norms, stab, "primary")
    got = corr.set_index(["anchor_seed", "matrix"])
    assert sorted(corr["anchor_seed"].unique()) == [1, 2]  # anchor 3 has no weights
    assert got.loc[(1, "W_Q"), "pearson_r"] == pytest.approx(-1.0)
    assert got.loc[(2, "W_Q"), "pearson_r"] == pytest.approx(1.0)
    assert got.loc[(2, "W_K"), "pearson_r"] == pytest.approx(-1.0)
    assert math.isnan(got.loc[(1, "ln1_w"), "pearson_r"])  # constant norm
    assert corr["n_layers"].eq(3).all()


def test_norm_stability_correlation_refuses_ambiguous_promptsets(layer_stability):
    norms = pd.DataFrame(
        {"seed": [1], "layer": [0], "matrix": ["W_Q"], "frobenius_norm": [1.0], "whole_layer_norm": 1.0}
    )
    stab = pd.concat([layer_stability({1: [0.5]}), layer_stability({1: [0.5]}, promptset="x")])
    with pytest.raises(ValueError, match="promptset"):
        norm_stability_correlation(norms, stab, promptset=None)


def _saved_refits(tiny_spec, tmp_path, seeds=(1, 2)):
    from headstab.refits.models import build_model, save_weights

    spec = tiny_spec(seeds=seeds)
    paths = {}
    for seed in seeds:
        paths[seed] = tmp_path / f"seed{seed}" / "final.pt"
        save_weights(build_model(spec, seed), paths[seed])
    return spec, paths


def test_refit_weight_norms_read_every_final_pt(tiny_spec, tmp_path):
    from headstab.refits.models import build_model

    spec, paths = _saved_refits(tiny_spec, tmp_path)
    table = refit_weight_norms(spec, paths, "per_head_mean", ())
    assert list(table.columns) == NORM_COLUMNS and table["seed"].tolist()[:1] == [1]
    for seed in (1, 2):
        expected = layer_weight_norms(build_model(spec, seed), spec.n_layers, spec.n_heads, spec.d_head)
        got = table[table["seed"] == seed].drop(columns="seed").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, expected)  # the same tensors: exact


def test_trained_state_is_processed_as_the_caches_are(tiny_spec, tmp_path):
    import torch

    from headstab.refits.weight_processing import process_weights

    spec, paths = _saved_refits(tiny_spec, tmp_path, seeds=(1,))
    steps = ["center_writing_weights", "fold_value_biases"]
    state = trained_state(spec, paths[1], steps)
    expected = process_weights(torch.load(paths[1], weights_only=True), spec, steps)
    for key in ("blocks.0.attn.o.weight", "blocks.0.attn.o.bias", "blocks.1.attn.v.bias", "embed.weight"):
        assert torch.equal(state[key], expected[key]), key
    assert not torch.equal(
        state["blocks.0.attn.o.weight"], torch.load(paths[1], weights_only=True)["blocks.0.attn.o.weight"]
    )


def test_weight_norm_summary_by_hand():
    correlation = pd.DataFrame(
        {
            "anchor_seed": [1, 1, 2, 2],
            "matrix": ["W_K", "W_Q", "W_Q", "W_K"],
            "pearson_r": [0.5, -1.0, 0.0, math.nan],
            "p_value": [0.2, 0.01, 0.9, math.nan],
            "spearman_r": [0.5, -1.0, 0.5, math.nan],
            "whole_layer_pearson_r": [0.4, -0.8, 0.2, math.nan],
            "n_layers": 3,
            "norm_ss": [1.0, 4.0, 1.0, 0.0],
            "stability_ss": [1.0, 1.0, 4.0, 2.0],
        }
    )
    facts = {"l3": {"n_layers": 3, "n_heads": 2, "optimizer": "Adam", "attention_only": False}}
    summary = weight_norm_summary({"l3": correlation}, facts, {"l3": 2})
    assert summary["matrix"].tolist() == ["W_Q", "W_K"]  # MATRIX_ORDER, not the table's order
    q = summary.iloc[0]
    assert (q["architecture"], q["n_layers"], q["optimizer"], q["attention_only"]) == ("l3", 3, "Adam", False)
    assert (q["mean_pearson_r"], q["std_pearson_r"], q["n_anchors"]) == (-0.5, 0.5, 2)
    assert (q["first_anchor_r"], q["first_anchor_p"]) == (0.0, 0.9)
    assert (q["mean_spearman_r"], q["first_anchor_spearman_r"], q["n_points"], q["by_construction"]) == (
        -0.25,
        0.5,
        6,
        False,
    )
    assert (q["mean_whole_layer_r"], q["first_anchor_whole_layer_r"]) == (pytest.approx(-0.3), 0.2)
    # Cross products -1 * sqrt(4 * 1) + 0 * sqrt(1 * 4) = -2 over sqrt((4 + 1) * (1 + 4)) = 5.
    assert q["pooled_pearson_r"] == pytest.approx(-0.4)
    # W_K: anchor 2's constant norm has no r and no cross product, but its stability spread counts.
    assert summary.iloc[1]["pooled_pearson_r"] == pytest.approx(0.5 * 1 / np.sqrt(1 * 3))
    assert summary.iloc[1]["n_anchors"] == 1  # a NaN r is not an anchor
    missing = weight_norm_summary({"l3": correlation}, facts, {"l3": 9})
    assert missing["first_anchor_r"].isna().all()


def test_weight_norm_summary_interval_resamples_the_anchors():
    correlation = pd.DataFrame(
        {"anchor_seed": [1, 2, 3], "matrix": "W_Q", "pearson_r": [0.2, 0.4, 0.9], "p_value": 0.5, "n_layers": 3}
    ).assign(spearman_r=0.5, whole_layer_pearson_r=0.5, norm_ss=1.0, stability_ss=1.0)
    facts = {"l3": {"n_layers": 3, "n_heads": 2, "optimizer": "Adam", "attention_only": False}}
    row = weight_norm_summary(
        {"l3": correlation}, facts, {"l3": 1}, intervals={"n_boot": 400, "seed": 0, "confidence": 0.9}
    ).iloc[0]
    # Means of 3 draws from {0.2, 0.4, 0.9}: from 0.2 to 0.9; the 90% interval sits strictly inside.
    assert 0.2 <= row["mean_pearson_r_ci_low"] < row["mean_pearson_r"] < row["mean_pearson_r_ci_high"] <= 0.9
    assert row["n_boot"] == 400


def test_wrong_head_shape_message_names_the_expected_size():
    with pytest.raises(ValueError, match=r"shape \(6, 4\); expected n_heads\*d_head = 8 along axis 0"):
        layer_weight_norms({f"blocks.0.attn.{m}.weight": np.zeros((6, 4)) for m in "qkvo"}, 1, 4, 2)


def test_a_missing_attention_matrix_names_the_key_and_the_first_four_keys():
    state = {f"blocks.0.attn.{m}.weight": np.zeros((4, 4)) for m in "kov"} | {"a": 0, "b": 0}
    # str(KeyError) wraps the message in quotes
    keys = r"\['a', 'b', 'blocks.0.attn.k.weight', 'blocks.0.attn.o.weight'\]\"$"
    message = r"lacks 'blocks.0.attn.q.weight' \(needed for W_Q\); keys look like " + keys
    with pytest.raises(KeyError, match=message):
        layer_weight_norms(state, 1, 2, 2)


def test_native_and_wrapped_names_map_onto_block_names():
    keys = {
        "layers.0.attn.q.weight": "blocks.0.attn.q.weight",
        "blocks.0.attn.k._original_component.weight": "blocks.0.attn.k.weight",
        "_original_component.blocks.1.attn.v.weight": "blocks.1.attn.v.weight",
        "layers.1.mlp.fc_in.weight": "blocks.1.mlp.in.weight",
        "layers.1.mlp.fc_out.weight": "blocks.1.mlp.out.weight",
    }
    assert sorted(bridge_state({key: 0 for key in keys})) == sorted(keys.values())


def test_a_mapping_is_read_as_it_is_even_with_a_state_dict_method():
    class Checkpoint(dict):
        def state_dict(self):
            raise AssertionError("a mapping is read as it is")

    assert bridge_state(Checkpoint({"layers.0.ln1.weight": 1})) == {"blocks.0.ln1.weight": 1}


def test_to_numpy_reads_live_tensors_and_casts_to_float64():
    import torch

    weight = torch.nn.Parameter(torch.tensor([[1.5, -2.0]]))  # requires grad, as a live model's weights do
    assert to_numpy(weight).tolist() == [[1.5, -2.0]] and to_numpy(weight).dtype == np.float64
    assert to_numpy(torch.tensor([0.5], dtype=torch.bfloat16)).tolist() == [0.5]
    assert to_numpy(np.array([1, 2], dtype=np.float32)).dtype == np.float64


def test_correlation_rows_by_hand(layer_stability):
    # Rows in no particular matrix order; layer stability of two scopes and two prompt sets.
    norms = pd.DataFrame(
        [
            (s, layer, m, v)
            for s in (2, 1)
            for m, v in (("ln1_w", 1.0), ("W_K", 2.0), ("W_Q", 3.0))
            for layer in range(3)
        ],
        columns=["seed", "layer", "matrix", "frobenius_norm"],
    )
    norms = norms.assign(frobenius_norm=norms["frobenius_norm"] * np.tile([1.0, 1.5, 1.2], 6))
    norms = norms.assign(whole_layer_norm=norms["frobenius_norm"] ** 2)
    stab = layer_stability({1: [0.9, 0.6, 0.3], 2: [0.1, 0.2, 0.4]})
    stab = pd.concat([stab, stab.assign(scope="cross_layer", mean=stab["mean"][::-1].to_numpy())])
    corr = norm_stability_correlation(norms, stab, "primary")
    assert list(zip(corr["anchor_seed"], corr["matrix"])) == [(a, m) for a in (1, 2) for m in ("W_Q", "W_K", "ln1_w")]
    assert corr.index.tolist() == list(range(6))
    assert list(corr.columns) == CORRELATION_COLUMNS
    for row in corr.itertuples():
        rows = norms[(norms["seed"] == row.anchor_seed) & (norms["matrix"] == row.matrix)]
        x = rows["frobenius_norm"].to_numpy()
        y = np.array({1: [0.9, 0.6, 0.3], 2: [0.1, 0.2, 0.4]}[row.anchor_seed])
        r = np.corrcoef(x, y)[0, 1]
        atol = reduction_atol(np.float64, 3, magnitude=16.0)
        assert row.whole_layer_pearson_r == pytest.approx(np.corrcoef(rows["whole_layer_norm"], y)[0, 1], abs=atol)
        assert row.spearman_r == pytest.approx(scipy.stats.spearmanr(x, y).statistic, abs=reduction_atol(np.float64, 3))
        assert row.norm_ss == pytest.approx(((x - x.mean()) ** 2).sum(), abs=atol)
        t = r * np.sqrt(1 / (1 - r**2))  # n - 2 = 1 degree of freedom
        assert row.pearson_r == pytest.approx(r, abs=reduction_atol(np.float64, 3, magnitude=4.0))
        assert row.p_value == pytest.approx(2 * scipy.stats.t.sf(abs(t), 1), rel=1e-6)


def test_correlation_refusals_name_the_table_and_the_refits(layer_stability):
    norms = pd.DataFrame(
        {"seed": [5], "layer": [0], "matrix": ["W_Q"], "frobenius_norm": [1.0], "whole_layer_norm": 1.0}
    )
    stab = layer_stability({1: [0.5], 2: [0.4]})
    with pytest.raises(ValueError, match=r"^norms needs a 'seed' column naming the refit the weights come from$"):
        norm_stability_correlation(norms.drop(columns="seed"), stab, "primary")
    with pytest.raises(
        ValueError, match=r"norms \(seeds \['5'\]\) and as an anchor in layer stability \(anchors \['1', '2'\]\)$"
    ):
        norm_stability_correlation(norms, stab, "primary")
    with pytest.raises(ValueError, match=r"^layer stability has no rows with promptset = 'len5'"):
        norm_stability_correlation(norms, stab, promptset="len5")


def test_refit_weight_norms_pass_the_attention_norm_and_number_rows(tiny_spec, tmp_path):
    from headstab.refits.models import build_model

    spec, paths = _saved_refits(tiny_spec, tmp_path)
    table = refit_weight_norms(spec, paths, "layer", ())
    assert table.index.tolist() == list(range(len(table)))
    expected = layer_weight_norms(build_model(spec, 2), spec.n_layers, spec.n_heads, spec.d_head, "layer")
    got = table[table["seed"] == 2].drop(columns="seed").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected)


def _random_norms(rng, anchors, n_layers):
    return pd.DataFrame(
        [(a, layer, "W_Q", rng.uniform(1, 2), rng.uniform(1, 3)) for a in anchors for layer in range(n_layers)],
        columns=NORM_COLUMNS,
    )


def test_pooled_r_is_pearson_of_the_layer_values_centred_within_each_anchor(layer_stability):
    rng = np.random.default_rng(3)
    anchors, n_layers = (1, 2, 3, 4), 5
    norms = _random_norms(rng, anchors, n_layers)
    stab = layer_stability({a: rng.uniform(0.4, 0.9, n_layers).tolist() for a in anchors})
    corr = norm_stability_correlation(norms, stab, "primary")
    facts = {"l5": {"n_layers": n_layers, "n_heads": 2, "optimizer": "Adam", "attention_only": False}}
    row = weight_norm_summary({"l5": corr}, facts, {"l5": 1}).iloc[0]
    x = norms.groupby("seed")["frobenius_norm"].transform(lambda v: v - v.mean()).to_numpy()
    y = stab.groupby("anchor_seed")["mean"].transform(lambda v: v - v.mean()).to_numpy()  # same (anchor, layer) order
    expected = (x * y).sum() / np.sqrt((x**2).sum() * (y**2).sum())  # no second centring: within-anchor means removed
    assert row["pooled_pearson_r"] == pytest.approx(expected, abs=reduction_atol(np.float64, x.size, magnitude=1.0))
    assert row["n_points"] == len(anchors) * n_layers and not row["by_construction"]
    # Without ties, the centred ranks of every anchor have the same spread: pooled rank r = mean Spearman rho.
    rx = norms.groupby("seed")["frobenius_norm"].rank().to_numpy() - (n_layers + 1) / 2
    ry = stab.groupby("anchor_seed")["mean"].rank().to_numpy() - (n_layers + 1) / 2
    pooled_rank = (rx * ry).sum() / np.sqrt((rx**2).sum() * (ry**2).sum())
    assert row["mean_spearman_r"] == pytest.approx(pooled_rank, abs=reduction_atol(np.float64, x.size, magnitude=1.0))


def test_two_layer_rows_are_plus_or_minus_one_by_construction_and_the_pooled_r_is_not(layer_stability):
    rng = np.random.default_rng(8)
    anchors = tuple(range(1, 9))
    norms = _random_norms(rng, anchors, 2)
    stab = layer_stability({a: rng.uniform(0.4, 0.9, 2).tolist() for a in anchors})
    corr = norm_stability_correlation(norms, stab, "primary")
    assert set(corr["pearson_r"].abs()) == {1.0} and set(corr["spearman_r"].abs()) == {1.0}
    assert corr["p_value"].isna().all()
    facts = {"l2": {"n_layers": 2, "n_heads": 2, "optimizer": "Adam", "attention_only": False}}
    row = weight_norm_summary({"l2": corr}, facts, {"l2": 1}).iloc[0]
    assert row["by_construction"] and abs(row["first_anchor_r"]) == 1.0
    assert abs(row["pooled_pearson_r"]) < 1.0  # signs disagree across the 8 anchors of this draw
    assert set(np.sign(corr["pearson_r"])) == {-1.0, 1.0}


def test_correlation_refuses_norms_without_table_b5s_norm(layer_stability):
    norms = pd.DataFrame({"seed": [1, 1], "layer": [0, 1], "matrix": "W_Q", "frobenius_norm": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"lacks the column whole_layer_norm .* rebuild tables/weight_norms.csv"):
        norm_stability_correlation(norms, layer_stability({1: [0.5, 0.4]}), "primary")


def test_head_weight_norms_by_hand():
    from headstab.sections.weight_norms import head_weight_norms

    n_heads, d_head, d_model = 2, 3, 4
    q = np.zeros((n_heads * d_head, d_model))
    q[:d_head] = 1.0
    o = np.zeros((d_model, n_heads * d_head))
    o[:, d_head:] = 2.0
    state = {"blocks.0.attn.q.weight": q, "blocks.0.attn.k.weight": q, "blocks.0.attn.v.weight": 3 * q,
             "blocks.0.attn.o.weight": o}  # fmt: skip
    norms = head_weight_norms(state, 1, n_heads, d_head).set_index(["matrix", "head"])["frobenius_norm"]
    rtol = reduction_rtol(np.float64, 12)
    assert norms[("W_Q", 0)] == pytest.approx(math.sqrt(12), rel=rtol) and norms[("W_Q", 1)] == 0.0
    assert norms[("W_O", 1)] == pytest.approx(2 * math.sqrt(12), rel=rtol) and norms[("W_O", 0)] == 0.0
    assert norms[("W_V", 0)] == pytest.approx(3 * math.sqrt(12), rel=rtol)
    # the per-head mean of layer_weight_norms is the mean of these
    assert layer_weight_norms(state, 1, n_heads, d_head).set_index("matrix").loc["W_Q", "frobenius_norm"] == (
        pytest.approx(norms[("W_Q", 0)] / 2, rel=rtol)
    )


def _entropy_driven(rng, n):
    """Norm and stability related only through entropy (sharper heads: lower entropy, larger norm, lower cosine)."""
    entropy = rng.random(n)
    return entropy, 5 - 3 * entropy + 0.05 * rng.normal(size=n), 0.3 + 0.5 * entropy + 0.01 * rng.normal(size=n)


def test_correlation_over_layers_comes_with_its_partial_given_layer_entropy():
    rng = np.random.default_rng(0)
    entropy, norm, stability = _entropy_driven(rng, 8)
    norms = pd.DataFrame(
        {"seed": 1, "layer": range(8), "matrix": "W_Q", "frobenius_norm": norm, "whole_layer_norm": norm}
    )
    layers = pd.DataFrame({"promptset": "primary", "scope": "same_layer", "anchor_seed": 1, "layer": range(8),
                           "mean": stability, "entropy": entropy})  # fmt: skip
    row = norm_stability_correlation(norms, layers, "primary").iloc[0]
    assert row["pearson_r"] < -0.99 and row["partial_r_entropy"] > -0.9  # 8 layers: the residuals are noise
    residual = lambda v: v - np.polyval(np.polyfit(entropy, v, 1), entropy)  # noqa: E731
    expected = np.corrcoef(residual(norm), residual(stability))[0, 1]
    # rounding of the three correlations, amplified by 1 / ((1 - r_xz^2)(1 - r_yz^2)) when z explains much
    amplification = 1 / ((1 - np.corrcoef(norm, entropy)[0, 1] ** 2) * (1 - np.corrcoef(stability, entropy)[0, 1] ** 2))
    assert row["partial_r_entropy"] == pytest.approx(expected, abs=reduction_atol(np.float64, 8) * amplification)
    two = norm_stability_correlation(norms[norms["layer"] < 2], layers[layers["layer"] < 2], "primary")
    assert np.isnan(two["partial_r_entropy"]).all()  # under 4 layers nothing is left to correlate
    without = norm_stability_correlation(norms, layers.drop(columns="entropy"), "primary")
    assert without["partial_r_entropy"].isna().all()


def test_per_layer_head_partial_correlation_given_entropy_resamples_anchors():
    from headstab.sections.weight_norms import PARTIAL_COLUMNS, head_norm_partial_table

    rng = np.random.default_rng(1)
    rows_norm, rows_stab = [], []
    for anchor in range(6):
        entropy, norm, stability = _entropy_driven(rng, 8)
        for head in range(8):
            rows_norm.append((anchor, 0, head, "W_Q", norm[head]))
            rows_norm.append((anchor, 0, head, "W_K", 1.0 + head))
            rows_stab.append(("primary", "same_layer", anchor, 0, head, stability[head], entropy[head]))
    norms = pd.DataFrame(rows_norm, columns=["seed", "layer", "head", "matrix", "frobenius_norm"])
    heads = pd.DataFrame(
        rows_stab, columns=["promptset", "scope", "anchor_seed", "layer", "head", "stability", "entropy"]
    )
    table = head_norm_partial_table(norms, heads, promptset="primary", n_boot=200, seed=0, confidence=0.9)
    assert list(table.columns) == PARTIAL_COLUMNS and table["matrix"].tolist() == ["W_Q"]
    row = table.iloc[0]
    assert (row["n_heads"], row["n_anchors"]) == (48, 6)
    assert row["pearson_r"] < -0.9 and row["entropy_r"] > 0.9  # raw: larger norm, lower stability
    assert abs(row["partial_r"]) < 0.5 and row["partial_r_ci_low"] <= row["partial_r"] <= row["partial_r_ci_high"]
    from headstab.statistics.calibration import calibration_label

    assert row["calibration"] == calibration_label("anchor_bootstrap_partial_r_weight_norm", 6)


def test_the_p_values_of_an_architecture_are_one_family_and_a_few_layers_are_descriptive(layer_stability):
    from headstab.statistics.calibration import calibration_label

    norms = pd.DataFrame(
        [
            (s, layer, m, v)
            for s in (1, 2)
            for layer in range(4)
            for m, v in (("W_Q", [1.0, 2.0, 3.5, 3.0][layer] * s), ("W_K", [4.0, 1.0, 2.0, 3.0][layer]))
        ],
        columns=["seed", "layer", "matrix", "frobenius_norm"],
    ).assign(whole_layer_norm=lambda t: t["frobenius_norm"])
    stab = layer_stability({1: [0.9, 0.6, 0.3, 0.35], 2: [0.1, 0.2, 0.3, 0.25]})
    corr = norm_stability_correlation(norms, stab, "primary")
    assert list(corr.columns) == CORRELATION_COLUMNS and CORRELATION_COLUMNS[-2:] == ["q_value", "calibration"]
    # Benjamini-Hochberg over the 4 (anchor, matrix) p-values of the table: q_(k) = min over j >= k of p_(j) 4 / j
    p = corr["p_value"].to_numpy()
    order = np.argsort(p)
    ranked = p[order] * 4 / np.arange(1, 5)
    expected = np.empty(4)
    expected[order] = np.minimum.accumulate(ranked[::-1])[::-1]
    np.testing.assert_allclose(corr["q_value"], np.minimum(expected, 1.0), rtol=1e-12)
    assert (corr["calibration"] == calibration_label("pearson_t_weight_norm_layers", 4)).all()
    assert (corr["calibration"] == "descriptive").all()  # the layers of one refit are no independent points
    summary = weight_norm_summary(
        {"l4": corr}, {"l4": {}}, {"l4": 2}, intervals={"n_boot": 50, "seed": 0, "confidence": 0.9}
    ).set_index("matrix")
    first = corr[corr["anchor_seed"] == 2].set_index("matrix")
    assert summary.loc["W_Q", "first_anchor_q"] == first.loc["W_Q", "q_value"]
    assert summary.loc["W_K", "first_anchor_q"] == first.loc["W_K", "q_value"]
    assert (summary["p_calibration"] == calibration_label("pearson_t_weight_norm_layers", 4)).all()
    assert (summary["ci_calibration"] == calibration_label("anchor_bootstrap_mean_r_weight_norm", 2)).all()
    assert (summary["ci_calibration"] == "descriptive").all()  # a bootstrap of a mean of 2 anchors
    older = weight_norm_summary({"l4": corr.drop(columns="q_value")}, {"l4": {}}, {"l4": 9})
    assert older["first_anchor_q"].isna().all() and "ci_calibration" not in older.columns
    assert (older["p_calibration"] == calibration_label("pearson_t_weight_norm_layers", 0)).all()


def _min_n(monkeypatch, method, min_n):
    """Set `method`'s min_n in the registry the section reads."""
    from dataclasses import replace

    from headstab.statistics import calibration

    monkeypatch.setitem(calibration.METHODS, method, replace(calibration.METHODS[method], min_n=min_n))


def test_labels_are_taken_at_the_anchors_layers_and_at_the_anchors(monkeypatch, layer_stability):
    rng = np.random.default_rng(4)
    anchors = (1, 2, 3, 4)
    norms = pd.DataFrame(
        [(s, layer, "W_Q", v) for s in anchors for layer, v in enumerate(rng.random(5))],
        columns=["seed", "layer", "matrix", "frobenius_norm"],
    ).assign(whole_layer_norm=lambda t: t["frobenius_norm"])
    stab = layer_stability({s: list(rng.random(5)) for s in anchors})  # 4 anchors of 5 layers
    for min_n, label in ((5, "calibrated"), (12, "descriptive")):
        _min_n(monkeypatch, "pearson_t_weight_norm_layers", min_n)
        corr = norm_stability_correlation(norms, stab, "primary")
        assert (corr["calibration"] == label).all()
        assert (weight_norm_summary({"l5": corr}, {"l5": {}}, {"l5": 1})["p_calibration"] == label).all()
    for min_n, label in ((4, "calibrated"), (5, "descriptive")):
        _min_n(monkeypatch, "anchor_bootstrap_mean_r_weight_norm", min_n)
        summary = weight_norm_summary({"l5": corr}, {"l5": {}}, {"l5": 1}, {"n_boot": 20, "seed": 0, "confidence": 0.9})
        assert (summary["ci_calibration"] == label).all()


def test_the_partial_r_interval_is_labelled_at_the_anchors(monkeypatch):
    from headstab.sections.weight_norms import head_norm_partial_table

    rng = np.random.default_rng(2)
    rows_norm, rows_stab = [], []
    for anchor in range(5):
        entropy, norm, stability = _entropy_driven(rng, 8)
        rows_norm += [(anchor, 0, head, "W_Q", norm[head]) for head in range(8)]
        rows_stab += [("primary", "same_layer", anchor, 0, head, stability[head], entropy[head]) for head in range(8)]
    norms = pd.DataFrame(rows_norm, columns=["seed", "layer", "head", "matrix", "frobenius_norm"])
    heads = pd.DataFrame(
        rows_stab, columns=["promptset", "scope", "anchor_seed", "layer", "head", "stability", "entropy"]
    )
    for min_n, label in ((5, "calibrated"), (12, "descriptive")):
        _min_n(monkeypatch, "anchor_bootstrap_partial_r_weight_norm", min_n)
        table = head_norm_partial_table(norms, heads, promptset="primary", n_boot=20, seed=0, confidence=0.9)
        assert table["calibration"].tolist() == [label]


def test_refit_norm_tables_give_every_refits_layer_and_head_norms_as_processed(tiny_spec, tmp_path):
    from headstab.sections.weight_norms import HEAD_NORM_COLUMNS, head_weight_norms, refit_norm_tables

    spec, paths = _saved_refits(tiny_spec, tmp_path)
    steps = ["center_writing_weights"]  # changes W_O: the norms must be those of the processed weights
    layers, heads = refit_norm_tables(spec, paths, "layer", steps)
    assert list(layers.columns) == NORM_COLUMNS and list(heads.columns) == HEAD_NORM_COLUMNS
    assert layers.index.tolist() == list(range(len(layers))) and heads.index.tolist() == list(range(len(heads)))
    assert layers["seed"].unique().tolist() == [1, 2] and heads["seed"].unique().tolist() == [1, 2]
    for seed in (1, 2):
        state = trained_state(spec, paths[seed], steps)
        expected = layer_weight_norms(state, spec.n_layers, spec.n_heads, spec.d_head, "layer")
        got = layers[layers["seed"] == seed].drop(columns="seed").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, expected[NORM_COLUMNS[1:]])  # the same tensors: exact
        expected = head_weight_norms(state, spec.n_layers, spec.n_heads, spec.d_head)
        got = heads[heads["seed"] == seed].drop(columns="seed").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, expected[HEAD_NORM_COLUMNS[1:]])
    unprocessed = refit_weight_norms(spec, paths, "layer", ())
    assert not np.array_equal(unprocessed["frobenius_norm"], layers["frobenius_norm"])


def test_head_weight_norms_columns_and_refusals_name_the_key():
    from headstab.sections.weight_norms import head_weight_norms

    state = {f"blocks.0.attn.{m}.weight": np.ones((4, 3)) for m in "qkv"} | {"blocks.0.attn.o.weight": np.ones((3, 4))}
    assert list(head_weight_norms(state, 1, 2, 2).columns) == ["layer", "head", "matrix", "frobenius_norm"]
    missing = {k: v for k, v in state.items() if ".q." not in k} | {"a": 0, "b": 0, "c": 0}
    keys = r"\['a', 'b', 'blocks.0.attn.k.weight', 'blocks.0.attn.o.weight'\]\"$"  # the first four of five
    with pytest.raises(
        KeyError, match=r"^\"state dict lacks 'blocks.0.attn.q.weight' \(needed for W_Q\); keys look like " + keys
    ):
        head_weight_norms(missing, 1, 2, 2)
    with pytest.raises(ValueError, match=r"^blocks.0.attn.q.weight has shape \(4, 3\); expected n_heads\*d_head = 6"):
        head_weight_norms(state, 1, 2, 3)


def test_partial_r_over_layers_needs_four_layers(layer_stability):
    rng = np.random.default_rng(5)
    for n_layers, finite in ((3, False), (4, True)):
        norms = _random_norms(rng, (1,), n_layers)
        stab = layer_stability({1: rng.uniform(0.4, 0.9, n_layers).tolist()}).assign(entropy=rng.random(n_layers))
        partial = norm_stability_correlation(norms, stab, "primary")["partial_r_entropy"].iloc[0]
        assert np.isfinite(partial) == finite, n_layers  # 3 layers: 1 residual degree of freedom, r = +-1


def test_correlation_refusal_names_table_b5s_norm_and_the_rule(layer_stability):
    norms = pd.DataFrame({"seed": [1, 1], "layer": [0, 1], "matrix": "W_Q", "frobenius_norm": [1.0, 2.0]})
    message = "norms lacks the column whole_layer_norm (Table B.5's norm); rebuild tables/weight_norms.csv (rule weight_norms)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        norm_stability_correlation(norms, layer_stability({1: [0.5, 0.4]}), "primary")


def test_weight_norm_summary_gives_float_nans_the_partial_mean_and_no_warning_for_a_constant_stability():
    correlation = pd.DataFrame(
        {"anchor_seed": [1, 2], "matrix": "W_Q", "pearson_r": math.nan, "p_value": math.nan, "n_layers": 3}
    ).assign(spearman_r=math.nan, whole_layer_pearson_r=math.nan, norm_ss=1.0, stability_ss=0.0)
    facts = {"l3": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0 / 0: a constant stability has no pooled r
        row = weight_norm_summary({"l3": correlation}, facts, {"l3": 9}).iloc[0]
    for column in ("pooled_pearson_r", "first_anchor_r", "first_anchor_p", "first_anchor_whole_layer_r"):
        assert isinstance(row[column], float) and math.isnan(row[column]), column
    assert "mean_partial_r_entropy" not in row.index  # an older table without the partial
    with_partial = correlation.assign(partial_r_entropy=[0.2, 0.6])
    assert weight_norm_summary({"l3": with_partial}, facts, {"l3": 1}).iloc[0]["mean_partial_r_entropy"] == (
        pytest.approx(0.4)
    )


def _head_tables(rng, layers=(0,), anchors=range(5)):
    rows_norm, rows_stab = [], []
    for layer in layers:
        for anchor in anchors:
            entropy, norm, stability = _entropy_driven(rng, 8)
            rows_norm += [(anchor, layer, head, "W_Q", norm[head]) for head in range(8)]
            rows_stab += [("primary", "same_layer", anchor, layer, head, stability[head], entropy[head])
                          for head in range(8)]  # fmt: skip
    norms = pd.DataFrame(rows_norm, columns=["seed", "layer", "head", "matrix", "frobenius_norm"])
    heads = pd.DataFrame(
        rows_stab, columns=["promptset", "scope", "anchor_seed", "layer", "head", "stability", "entropy"]
    )
    return norms, heads


def test_head_partial_table_reads_same_layer_rows_of_its_prompt_set_in_layer_order():
    from headstab.sections.weight_norms import head_norm_partial_table

    norms, heads = _head_tables(np.random.default_rng(6), layers=(1, 0))
    kwargs = {"n_boot": 50, "seed": 3, "confidence": 0.9}
    table = head_norm_partial_table(norms, heads, promptset="primary", **kwargs)
    assert table["layer"].tolist() == [0, 1]  # sorted, whatever the order of the rows
    noisy = heads.assign(stability=heads["stability"][::-1].to_numpy())
    mixed = pd.concat([heads, noisy.assign(scope="cross_layer"), noisy.assign(promptset="len5")])
    pd.testing.assert_frame_equal(head_norm_partial_table(norms, mixed, promptset="primary", **kwargs), table)
    pd.testing.assert_frame_equal(  # seeded: reproducible
        head_norm_partial_table(norms, heads, promptset="primary", **kwargs), table
    )
    with pytest.raises(ValueError, match=r"^head stability has no rows with promptset = 'len9'"):
        head_norm_partial_table(norms, heads, promptset="len9", **kwargs)


def test_head_partial_intervals_nest_by_confidence_and_are_nan_without_a_partial():
    from headstab.sections.weight_norms import head_norm_partial_table

    norms, heads = _head_tables(np.random.default_rng(7))
    narrow = head_norm_partial_table(norms, heads, promptset="primary", n_boot=200, seed=0, confidence=0.5).iloc[0]
    wide = head_norm_partial_table(norms, heads, promptset="primary", n_boot=200, seed=0, confidence=0.99).iloc[0]
    assert (
        wide["partial_r_ci_low"] < narrow["partial_r_ci_low"] < narrow["partial_r_ci_high"] < wide["partial_r_ci_high"]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no quantile of an all-NaN slice
        # stability a linear function of entropy: nothing left of it given entropy, in every resample
        degenerate = heads.assign(stability=2 * heads["entropy"] + 1)
        row = head_norm_partial_table(norms, degenerate, promptset="primary", n_boot=20, seed=0, confidence=0.9)
        row = row.iloc[0]
    assert np.isnan(row["partial_r"]) and np.isnan(row["partial_r_ci_low"]) and np.isnan(row["partial_r_ci_high"])
