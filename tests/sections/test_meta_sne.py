"""headstab.sections.meta_sne: §4.9 head descriptions, the frame of all heads and the t-SNE."""

import logging
import warnings

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_rtol
from scipy.spatial.distance import pdist

from headstab.sections.meta_sne import (
    MANTEL_TABLE_COLUMNS,
    depth_mantel_table,
    head_descriptions,
    mantel_refits,
    meta_sne_embedding,
    meta_sne_frame,
    meta_sne_table,
    refit_descriptions,
    scale_normalised,
    token_mean_head_output,
)
from headstab.statistics.mantel import MANTEL_COLUMNS

rng = np.random.default_rng(0)


def _padded_hook_z(n_layers=2, n_prompts=5, n_pos=6, n_heads=3, d_head=4, lengths=None):
    lengths = np.array([6, 3, 5, 1, 4][:n_prompts]) if lengths is None else lengths
    z = rng.normal(size=(n_layers, n_prompts, n_pos, n_heads, d_head))
    for p, n in enumerate(lengths):
        z[:, p, n:] = 0.0
    return z, lengths


def test_descriptions_match_pdist_of_token_means():
    z, lengths = _padded_hook_z()
    desc = head_descriptions(z, lengths)
    assert desc.shape == (2, 3, 5 * 4 // 2)
    for layer, head in [(0, 0), (1, 2)]:
        means = np.stack([z[layer, p, :n, head].mean(axis=0) for p, n in enumerate(lengths)])
        # float64 means of at most 6 tokens, then distances over d_head dims
        np.testing.assert_allclose(desc[layer, head], pdist(means), rtol=reduction_rtol(np.float64, 6 + z.shape[-1]))


def test_padding_content_is_ignored():
    z, lengths = _padded_hook_z()
    garbage = z.copy()
    for p, n in enumerate(lengths):
        garbage[:, p, n:] = 7.0
    np.testing.assert_allclose(head_descriptions(garbage, lengths), head_descriptions(z, lengths))


def test_head_with_same_output_for_every_prompt_has_zero_description():
    z, lengths = _padded_hook_z()
    z = z.astype(np.float32)  # as cached
    pattern = rng.normal(size=4).astype(np.float32)
    for p, n in enumerate(lengths):
        z[1, p, :n, 0] = pattern  # layer 1 head 0 writes the same vector at every token
    desc = head_descriptions(z, lengths)
    assert np.all(desc[1, 0] == 0.0)
    assert np.all(desc[1, 1] > 0.0)


def test_token_mean_rejects_bad_lengths():
    with pytest.raises(ValueError, match="lengths"):
        token_mean_head_output(np.zeros((1, 2, 3, 1, 1)), np.array([0, 3]))


# What the rule passes from the specs (headstab.sections.architecture_facts); the names are the paper's.
FACTS = {
    "l2_h8": {"n_layers": 2, "n_heads": 3, "optimizer": "Adam", "attention_only": False},
    "l2_h8_wd": {"n_layers": 2, "n_heads": 3, "optimizer": "AdamW", "attention_only": False},
    "l4_h8_attn": {"n_layers": 4, "n_heads": 3, "optimizer": "Adam", "attention_only": True},
}


def _descriptions():
    out = {}
    for arch, n_layers in [("l2_h8", 2), ("l2_h8_wd", 2), ("l4_h8_attn", 4)]:
        for seed in (1, 2):
            out[(arch, seed)] = rng.normal(size=(n_layers, 3, 10)) + n_layers
    return out


def test_frame_has_one_row_per_architecture_refit_layer_head():
    descriptions = _descriptions()
    frame, features = meta_sne_frame(descriptions, FACTS)
    assert len(frame) == features.shape[0] == 2 * (2 * 3 + 2 * 3 + 4 * 3)
    keys = frame[["architecture", "seed", "layer", "head"]]
    assert not keys.duplicated().any()
    row = frame.index[
        (frame["architecture"] == "l4_h8_attn") & (frame["seed"] == 2) & (frame["layer"] == 3) & (frame["head"] == 1)
    ][0]
    np.testing.assert_array_equal(features[row], descriptions[("l4_h8_attn", 2)][3, 1])
    assert frame.loc[row, "relative_depth"] == 1.0
    assert bool(frame.loc[row, "attention_only"])
    assert frame.loc[frame.layer == 0, "relative_depth"].tolist().count(0.25) == 6
    assert set(frame.loc[frame.architecture == "l2_h8_wd", "optimizer"]) == {"AdamW"}
    assert set(frame.loc[frame.architecture == "l2_h8", "optimizer"]) == {"Adam"}


def test_frame_rejects_mismatched_feature_counts():
    with pytest.raises(ValueError, match="same prompt set"):
        meta_sne_frame(
            {("a", 1): np.zeros((1, 2, 3)), ("b", 1): np.zeros((1, 2, 4))}, {"a": FACTS["l2_h8"], "b": FACTS["l2_h8"]}
        )


def test_embedding_shape_and_determinism():
    frame = meta_sne_table(_descriptions(), FACTS, perplexity=30.0)
    assert {"tsne_x", "tsne_y"} <= set(frame.columns)
    assert np.isfinite(frame[["tsne_x", "tsne_y"]].to_numpy()).all()
    again = meta_sne_embedding(meta_sne_frame(_descriptions_fixed(), FACTS)[1])
    np.testing.assert_array_equal(again, meta_sne_embedding(meta_sne_frame(_descriptions_fixed(), FACTS)[1]))


def perplexities_passed_to_tsne(monkeypatch) -> list[float]:
    """The perplexity of every scikit-learn TSNE built from here on, appended as it is built."""
    import sklearn.manifold

    used: list[float] = []
    real_tsne = sklearn.manifold.TSNE

    def spy(*args, **kwargs):
        used.append(kwargs["perplexity"])
        return real_tsne(*args, **kwargs)

    monkeypatch.setattr(sklearn.manifold, "TSNE", spy)
    return used


def test_perplexity_is_clipped_to_what_the_heads_allow_and_passed_through(monkeypatch):
    used = perplexities_passed_to_tsne(monkeypatch)
    features = meta_sne_frame(_descriptions(), FACTS)[1]
    n_heads = features.shape[0]
    assert n_heads == 48
    xy = meta_sne_embedding(features, perplexity=10_000)  # the authors' value: above n, unclipped it fails
    assert used == [(n_heads - 1) / 3] and np.isfinite(xy).all()
    meta_sne_embedding(features, perplexity=5)
    assert used[-1] == 5  # below the cap: passed through unchanged


def test_per_optimizer_embedding_embeds_each_optimizer_alone():
    descriptions = _descriptions()
    joint = meta_sne_table(descriptions, FACTS, perplexity=5)
    separate = meta_sne_table(descriptions, FACTS, perplexity=5, embedding="per_optimizer")
    frame, features = meta_sne_frame(descriptions, FACTS)
    for optimizer in ("Adam", "AdamW"):
        rows = np.flatnonzero(frame["optimizer"] == optimizer)
        alone = meta_sne_embedding(features[rows], perplexity=5)
        np.testing.assert_array_equal(separate.iloc[rows][["tsne_x", "tsne_y"]].to_numpy(), alone)
    assert not np.array_equal(joint[["tsne_x", "tsne_y"]].to_numpy(), separate[["tsne_x", "tsne_y"]].to_numpy())
    assert set(separate["embedding"]) == {"per_optimizer"} and set(joint["embedding"]) == {"joint"}
    with pytest.raises(ValueError, match="analysis.meta_sne_embedding"):
        meta_sne_table(descriptions, FACTS, embedding="both")


def test_embedding_separates_distinct_groups():
    group_rng = np.random.default_rng(5)
    features = np.concatenate([group_rng.normal(0, 0.1, (15, 6)), group_rng.normal(5, 0.1, (15, 6))])
    xy = meta_sne_embedding(features, perplexity=5)
    within = np.linalg.norm(xy[:15] - xy[:15].mean(0), axis=1).max()
    between = np.linalg.norm(xy[:15].mean(0) - xy[15:].mean(0))
    assert between > 2 * within


def _descriptions_fixed():
    fixed = np.random.default_rng(9)
    return {("l2_h8", s): fixed.normal(size=(2, 3, 6)) for s in (1, 2, 3)}


def test_optimizer_and_attention_only_come_from_the_facts_not_the_name():
    facts = {**FACTS, "l2_h8": {**FACTS["l2_h8"], "optimizer": "AdamW", "attention_only": True}}
    frame, _ = meta_sne_frame(_descriptions(), facts)
    rows = frame[frame["architecture"] == "l2_h8"]
    assert set(rows["optimizer"]) == {"AdamW"} and rows["attention_only"].all()
    with pytest.raises(ValueError, match="no optimizer and attention-only facts for architecture 'l2_h8_wd'"):
        meta_sne_frame(_descriptions(), {"l2_h8": FACTS["l2_h8"], "l4_h8_attn": FACTS["l4_h8_attn"]})


def test_refit_descriptions_read_one_layer_of_hook_z_at_a_time(fake_cache):
    z, lengths = _padded_hook_z()
    cache = fake_cache("seed1.h5", lengths, hook_z=z.astype(np.float32))
    desc = refit_descriptions(cache, "primary")
    np.testing.assert_array_equal(desc, head_descriptions(z.astype(np.float32), lengths))
    assert cache.reads == [("hook_z", 0), ("hook_z", 1)]


def test_table_columns_are_the_embeddings_x_and_y_with_the_perplexity_given():
    descriptions = _descriptions_fixed()
    frame, features = meta_sne_frame(descriptions, FACTS)
    table = meta_sne_table(descriptions, FACTS, perplexity=2)
    xy = meta_sne_embedding(features, perplexity=2)
    np.testing.assert_array_equal(table["tsne_x"].to_numpy(), xy[:, 0])
    np.testing.assert_array_equal(table["tsne_y"].to_numpy(), xy[:, 1])
    assert not np.array_equal(xy, meta_sne_embedding(features, perplexity=4))  # the perplexity matters
    assert list(table.columns[: len(frame.columns)]) == list(frame.columns)


def test_per_optimizer_groups_follow_the_facts_so_adamw_is_not_relabelled():
    # Every architecture trained with AdamW per the facts: one group, the same as the joint embedding.
    facts = {name: {**fact, "optimizer": "AdamW"} for name, fact in FACTS.items()}
    descriptions = _descriptions_fixed()
    separate = meta_sne_table(descriptions, facts, perplexity=2, embedding="per_optimizer")
    joint = meta_sne_table(descriptions, facts, perplexity=2)
    assert set(separate["optimizer"]) == {"AdamW"}
    np.testing.assert_array_equal(separate[["tsne_x", "tsne_y"]].to_numpy(), joint[["tsne_x", "tsne_y"]].to_numpy())


def test_embedding_has_no_seed_and_is_a_function_of_the_features():
    # PCA initialisation: scikit-learn's t-SNE draws no random numbers, so there is nothing to seed.
    import inspect

    assert "seed" not in inspect.signature(meta_sne_embedding).parameters
    assert "seed" not in inspect.signature(meta_sne_table).parameters
    features = np.random.default_rng(3).normal(size=(12, 4))
    np.testing.assert_array_equal(
        meta_sne_embedding(features, perplexity=3), meta_sne_embedding(features, perplexity=3)
    )


def test_smallest_embeddings_three_heads_and_two_prompts(monkeypatch):
    used = perplexities_passed_to_tsne(monkeypatch)
    # Two prompts: one distance per head, the description of a head is a single number.
    z, lengths = _padded_hook_z(n_layers=1, n_prompts=2, n_heads=3, lengths=np.array([2, 1]))
    desc = head_descriptions(z, lengths)
    assert desc.shape == (1, 3, 1)
    xy = meta_sne_embedding(desc[0], perplexity=30)
    assert xy.shape == (3, 2) and np.isfinite(xy).all()
    assert (xy[:, 1] == 0).all()  # one feature: the heads lie on a line
    assert used == [1.0]  # (3 - 1) / 3 < 1: clipped to 1
    nine = np.random.default_rng(8).normal(size=(9, 2))
    meta_sne_embedding(nine, perplexity=2.5)
    assert used[-1] == 2.5  # below (9 - 1) / 3: passed through
    meta_sne_embedding(nine, perplexity=3.0)
    assert used[-1] == 8 / 3
    with pytest.raises(ValueError, match=r"t-SNE needs \[n_heads >= 3, n_features\] input, got shape \(2, 1\)"):
        meta_sne_embedding(desc[0, :2])
    with pytest.raises(ValueError, match=r"got shape \(3,\)"):
        meta_sne_embedding(desc[0, :, 0])
    with pytest.raises(ValueError, match="need at least two prompts to describe a head, got 1"):
        head_descriptions(z[:, :1], lengths[:1])


def test_token_means_weight_each_prompt_by_its_own_length():
    z = np.zeros((1, 2, 3, 1, 1))
    z[0, 0, :, 0, 0] = [1.0, 2.0, 6.0]  # length 3: mean 3
    z[0, 1, :, 0, 0] = [4.0, 8.0, 100.0]  # length 2: mean 6, the 100 is padding
    means = token_mean_head_output(z.astype(np.float32), np.array([3, 2]))
    assert means.shape == (1, 1, 2, 1)
    assert means.dtype == np.float64
    assert means[0, 0, :, 0].tolist() == [3.0, 6.0]
    assert head_descriptions(z, np.array([3, 2]))[0, 0].tolist() == [3.0]


def test_guards_name_the_shapes():
    with pytest.raises(ValueError, match=r"hook_z must be \[layer, prompt, pos, head, d_head\], got \(2, 3, 1, 1\)"):
        token_mean_head_output(np.zeros((2, 3, 1, 1)), np.array([1, 1]))
    with pytest.raises(ValueError, match=r"lengths must be \[prompt\] = \(2,\) with values in 1\.\.3, got \[0 3\]"):
        token_mean_head_output(np.zeros((1, 2, 3, 1, 1)), np.array([0, 3]))
    with pytest.raises(ValueError, match=r"values in 1\.\.3, got \[1 4\]"):
        token_mean_head_output(np.zeros((1, 2, 3, 1, 1)), np.array([1, 4]))
    with pytest.raises(ValueError, match=r"= \(2,\) with values"):
        token_mean_head_output(np.zeros((1, 2, 3, 1, 1)), np.array([1, 1, 1]))
    with pytest.raises(ValueError, match="no head descriptions given"):
        meta_sne_frame({}, FACTS)
    with pytest.raises(
        ValueError, match=r"descriptions of l2_h8 seed 4 must be \[layer, head, n_features\], got \(2, 3\)"
    ):
        meta_sne_frame({("l2_h8", 4): np.zeros((2, 3))}, FACTS)
    with pytest.raises(ValueError, match=r"descriptions of l2_h8 seed 2 have 4 features, others 3; all refits"):
        meta_sne_frame({("l2_h8", 1): np.zeros((1, 2, 3)), ("l2_h8", 2): np.zeros((1, 2, 4))}, FACTS)
    with pytest.raises(ValueError, match=r"facts cover \['l2_h8', 'l2_h8_wd', 'l4_h8_attn'\]"):
        meta_sne_frame({("other", 1): np.zeros((1, 2, 3))}, FACTS)
    with pytest.raises(
        ValueError,
        match=r"embedding must be one of \['joint', 'per_optimizer'\] \(config key analysis\.meta_sne_embedding\); got 'both'",
    ):
        meta_sne_table(_descriptions_fixed(), FACTS, embedding="both")


def test_describe_refits_opens_each_cache_and_keys_it_by_refit(fake_cache, monkeypatch, capsys):
    import contextlib

    from headstab.sections import meta_sne
    from headstab.sections.meta_sne import describe_refits

    z, lengths = _padded_hook_z()
    caches = {
        name: fake_cache(name, lengths, hook_z=(scale * z).astype(np.float32)) for name, scale in [("a", 1), ("b", 2)]
    }
    opened = []

    @contextlib.contextmanager
    def open_cache(path):
        opened.append(path)
        yield caches[path]

    monkeypatch.setattr(meta_sne, "open_cache", open_cache)
    described = describe_refits({("l2_h8", 1): "a", ("l2_h8", 2): "b"}, "primary")
    assert opened == ["a", "b"] and list(described) == [("l2_h8", 1), ("l2_h8", 2)]
    assert "describe heads: 100%" in capsys.readouterr().err  # the progress bar names its work
    np.testing.assert_array_equal(described[("l2_h8", 1)], head_descriptions(z.astype(np.float32), lengths))
    np.testing.assert_array_equal(described[("l2_h8", 2)], head_descriptions((2 * z).astype(np.float32), lengths))


def test_one_feature_starts_on_the_x_axis_scaled_as_sklearn_scales_pc1():
    from headstab.sections.meta_sne import _initial_embedding

    feature = np.array([[1.0], [2.0], [6.0], [3.0]])
    start = _initial_embedding(feature)
    centred = feature[:, 0] - feature[:, 0].mean()
    assert start.dtype == np.float32 and start.shape == (4, 2)
    expected = (centred / centred.std() * 1e-4).astype(np.float32)
    np.testing.assert_allclose(start[:, 0], expected, rtol=reduction_rtol(np.float32, 4), atol=0)
    assert (start[:, 1] == 0).all()
    # a small spread (s.d. below 1) is scaled up the same way; a constant feature stays at 0
    np.testing.assert_allclose(_initial_embedding(feature * 1e-3)[:, 0], expected, rtol=reduction_rtol(np.float32, 4))
    assert (_initial_embedding(np.full((3, 1), 5.0)) == 0).all()
    assert _initial_embedding(np.ones((4, 2))) == "pca"


def test_clipping_is_logged_with_the_perplexity_given_and_used(caplog):
    nine = np.random.default_rng(8).normal(size=(9, 2))
    with caplog.at_level(logging.INFO, logger="headstab.sections.meta_sne"):
        meta_sne_embedding(nine, perplexity=2.5)
        assert caplog.messages == []  # below (9 - 1) / 3: nothing clipped
        meta_sne_embedding(nine)
    assert caplog.messages == ["meta-SNE: perplexity 30.0 clipped to 2.7 for 9 heads"]  # 30 is the default


def test_table_default_perplexity_is_30(caplog):
    with caplog.at_level(logging.INFO, logger="headstab.sections.meta_sne"):
        meta_sne_table(_descriptions_fixed(), FACTS)
    n_heads = len(meta_sne_frame(_descriptions_fixed(), FACTS)[0])
    assert caplog.messages == [f"meta-SNE: perplexity 30.0 clipped to {(n_heads - 1) / 3:.1f} for {n_heads} heads"]


def test_float32_features_embed_as_their_float64_values():
    features = np.random.default_rng(4).normal(size=(10, 3)).astype(np.float32)
    # every float32 value is exact in float64: the same features, so the same embedding, bit for bit
    np.testing.assert_array_equal(
        meta_sne_embedding(features, perplexity=3), meta_sne_embedding(features.astype(np.float64), perplexity=3)
    )


def test_no_prompts_and_no_positions_average_to_an_empty_array():
    assert token_mean_head_output(np.zeros((1, 0, 0, 2, 3)), np.zeros(0, int)).shape == (1, 2, 0, 3)


def test_frame_names_its_layer_count_and_refuses_nothing_to_stack():
    frame, _ = meta_sne_frame(_descriptions(), FACTS)
    assert dict(zip(frame["architecture"], frame["n_layers"], strict=True)) == {
        "l2_h8": 2,
        "l2_h8_wd": 2,
        "l4_h8_attn": 4,
    }
    with pytest.raises(ValueError, match="^no head descriptions given$"):
        meta_sne_frame({}, FACTS)


def test_threads_are_capped_at_one_unless_asked(monkeypatch):
    import contextlib

    import threadpoolctl

    caps = []

    @contextlib.contextmanager
    def spy(limits=None, user_api=None):
        caps.append(limits)
        yield

    monkeypatch.setattr(threadpoolctl, "threadpool_limits", spy)
    features = np.random.default_rng(5).normal(size=(6, 2))
    meta_sne_embedding(features, perplexity=1.5)
    meta_sne_table(_descriptions_fixed(), FACTS, perplexity=3)
    meta_sne_table(_descriptions_fixed(), FACTS, perplexity=3, n_threads=3)
    assert caps == [1, 1, 3]


def test_scale_normalised_descriptions_do_not_see_a_heads_output_scale():
    """Outputs c times larger give every prompt distance c times larger: the raw description moves, the
    normalised one does not; a head with one output for every prompt keeps its zero description."""
    z, lengths = _padded_hook_z()
    scaled = z.copy()
    scaled[:, :, :, 1] *= 7.0  # head 1 of every layer, 7x its outputs
    scaled[:, :, :, 2] = 0.0  # head 2: nothing, for every prompt
    raw, raw_scaled = head_descriptions(z, lengths), head_descriptions(scaled, lengths)
    np.testing.assert_allclose(raw_scaled[:, 1], 7.0 * raw[:, 1], rtol=reduction_rtol(np.float64, 20))
    normalised = scale_normalised(raw.reshape(-1, raw.shape[-1])).reshape(raw.shape)
    normalised_scaled = scale_normalised(raw_scaled.reshape(-1, raw.shape[-1])).reshape(raw.shape)
    np.testing.assert_allclose(normalised_scaled[:, :2], normalised[:, :2], rtol=reduction_rtol(np.float64, 20))
    np.testing.assert_allclose(np.linalg.norm(normalised, axis=-1), 1.0, rtol=reduction_rtol(np.float64, 10))
    assert (normalised_scaled[:, 2] == 0.0).all()


def test_the_scale_normalised_table_embeds_the_normalised_descriptions_and_keeps_the_norms():
    descriptions = _descriptions_fixed()
    frame, features = meta_sne_frame(descriptions, FACTS)
    table = meta_sne_table(descriptions, FACTS, perplexity=2, description="scale_normalised")
    xy = meta_sne_embedding(scale_normalised(features), perplexity=2)
    np.testing.assert_array_equal(table[["tsne_x", "tsne_y"]].to_numpy(), xy)
    np.testing.assert_array_equal(table["description_norm"], np.linalg.norm(features, axis=1))
    assert set(table["description"]) == {"scale_normalised"}
    with pytest.raises(ValueError, match="description must be one of"):
        meta_sne_table(descriptions, FACTS, description="zscored")


def _planted(depth_in):
    """Descriptions of 3 refits of each FACTS architecture, 6 heads a layer, 45 features: depth_in "scale" sets
    only each head's output scale by its depth (its shape random); "shape" sets its shape by depth (scale random)."""
    generator = np.random.default_rng(11)
    out = {}
    for arch, facts in FACTS.items():
        for seed in (1, 2, 3):
            n_layers = facts["n_layers"]
            depth = (np.arange(n_layers) + 1) / n_layers
            shape = generator.uniform(0.5, 1.5, size=(n_layers, 6, 45))
            if depth_in == "scale":
                out[(arch, seed)] = shape * (1.0 + 9.0 * depth)[:, None, None]
            else:
                pattern = np.linspace(0.0, 1.0, 45)
                shape += 3.0 * depth[:, None, None] * pattern  # distances that grow across the features with depth
                out[(arch, seed)] = shape * generator.uniform(0.5, 2.0, size=(n_layers, 6, 1))
    return out


def test_a_depth_order_made_by_output_scale_alone_leaves_the_normalised_descriptions():
    table = depth_mantel_table(_planted("scale"), FACTS, n_permutations=199, seed=0).set_index("description")
    # one 4-layer architecture: its 24 layer orders, enumerated; the planted order and its reverse (the same
    # |Δ depth|) are the most extreme, so p = 2/24 and the note says that no p below 0.05 is attainable
    assert table.loc["raw", "mantel_r"] > 0.3 and table.loc["raw", "p_value"] == 2 / 24
    assert "p >= 0.0833" in table.loc["raw", "note"]
    assert table.loc["scale_normalised", "p_value"] > 0.05
    # only the 4-layer architecture's 3 refits enter: a 2-layer refit's depth has no order
    assert list(table.reset_index().columns) == [*MANTEL_TABLE_COLUMNS, *MANTEL_COLUMNS, "calibration", "note"]
    assert (table["strata"] == "architecture").all() and (table["blocks"] == "layer").all()
    assert (table["predictor"] == "abs_delta_relative_depth").all()
    assert (table["n_strata"] == 1).all() and (table["n_blocks"] == 4).all() and (table["n_architectures"] == 1).all()
    assert (table["n_permutations"] == 24).all()
    assert (table["calibration"] == "descriptive").all()  # 3 refits: below every calibrated n


def test_a_depth_order_in_the_shape_of_the_descriptions_survives_normalisation():
    table = depth_mantel_table(_planted("shape"), FACTS, n_permutations=199, seed=0).set_index("description")
    assert table.loc["scale_normalised", "mantel_r"] > 0.3 and table.loc["scale_normalised", "p_value"] == 2 / 24


def test_layers_alike_across_refits_in_no_depth_order_are_no_depth_effect():
    """Every refit's layer l near one centroid drawn for the dataset, the centroids unordered in depth: a layer's
    identity across refits, not a depth order. Layers permuted per refit broke that identity and rejected in
    every dataset; one order per architecture rejects at most in the 1 of its 24 orders that is the planted one."""
    rng = np.random.default_rng(3)
    facts = {"l4": {"n_layers": 4, "n_heads": 4, "optimizer": "Adam", "attention_only": True}}
    rejected = 0
    for _ in range(24):
        centres = 2.0 * rng.normal(size=(4, 1, 8))
        descriptions = {("l4", seed): centres + 0.3 * rng.normal(size=(4, 4, 8)) for seed in range(5)}
        table = depth_mantel_table(descriptions, facts, n_permutations=199, seed=0).set_index("description")
        rejected += table.loc["raw", "p_value"] <= 0.05
        assert table.loc["raw", "n_permutations"] == 24
    assert rejected <= 4  # about 1 in 24 expected


def test_the_mantel_test_keeps_whole_refits_while_they_fit_in_max_heads():
    table = depth_mantel_table(_planted("shape"), FACTS, n_permutations=20, seed=0, max_heads=50)
    # a 4-layer refit has 24 heads: two fit in 50, a third would not
    assert (table["n_objects"] == 48).all() and (table["n_refits"] == 2).all() and (table["n_permutations"] == 20).all()
    exact = depth_mantel_table(_planted("shape"), FACTS, n_permutations=20, seed=0, max_heads=48)
    assert (exact["n_refits"] == 2).all()  # 48 heads fit in 48
    one = depth_mantel_table(_planted("shape"), FACTS, n_permutations=20, seed=0, max_heads=3)
    assert (one["n_objects"] == 24).all()  # at least one refit, whole


def test_mantel_refits_take_one_refit_of_every_architecture_before_a_second():
    descriptions = {(arch, seed): np.zeros((n_layers, 2, 3)) for arch, n_layers in (("a", 3), ("b", 4), ("c", 2))
                    for seed in (1, 2, 3)}  # fmt: skip
    chosen = mantel_refits(descriptions, max_heads=14, seed=0)
    assert len(chosen) == 2 and {arch for arch, _ in chosen} == {"a", "b"}  # 6 + 8 heads; "c" has 2 layers
    everything = mantel_refits(descriptions, max_heads=None, seed=0)
    assert sorted(everything) == [(a, s) for a in "ab" for s in (1, 2, 3)]
    assert {arch for arch, _ in everything[:2]} == {"a", "b"}
    assert mantel_refits(descriptions, max_heads=None, seed=1) != everything  # the order is drawn with the seed


def test_without_refits_of_three_layers_the_mantel_test_is_nan_and_says_why():
    two_layers = {refit: desc for refit, desc in _planted("shape").items() if refit[0] != "l4_h8_attn"}
    table = depth_mantel_table(two_layers, FACTS, n_permutations=20, seed=0)
    assert table["description"].tolist() == ["raw", "scale_normalised"]
    assert list(table.columns) == [*MANTEL_TABLE_COLUMNS, *MANTEL_COLUMNS, "calibration", "note"]
    assert table["mantel_r"].isna().all() and table["p_value"].isna().all() and (table["n_refits"] == 0).all()
    assert (table["note"] == "needs refits of at least 3 layers for a depth order; the run's have [2]").all()
    assert (table["calibration"] == "descriptive").all() and (table["n_permutations"] == 20).all()


def test_the_mantel_test_is_calibrated_from_four_refits():
    generator = np.random.default_rng(12)
    facts = {"l3": {"n_layers": 3, "n_heads": 2, "optimizer": "Adam", "attention_only": False}}
    descriptions = {("l3", seed): generator.normal(size=(3, 2, 5)) for seed in range(1, 5)}
    table = depth_mantel_table(descriptions, facts, n_permutations=20, seed=0)
    assert (table["n_refits"] == 4).all() and (table["calibration"] == "calibrated").all()
    fewer = depth_mantel_table(dict(list(descriptions.items())[:3]), facts, n_permutations=20, seed=0)
    assert (fewer["calibration"] == "descriptive").all()


def test_scale_normalised_divides_every_nonzero_description_by_its_norm_in_float64():
    features = np.array([[0.3, 0.4], [3.0, 4.0], [0.0, 0.0]], dtype=np.float32)  # norms 0.5, 5 and 0
    out = scale_normalised(features)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out[2], [0.0, 0.0])
    np.testing.assert_allclose(np.linalg.norm(out[:2], axis=1), 1.0, rtol=reduction_rtol(np.float64, 2))
    np.testing.assert_array_equal(
        out[:2],
        features[:2].astype(np.float64) / np.linalg.norm(features[:2].astype(np.float64), axis=1, keepdims=True),
    )


def test_normalising_takes_away_a_depth_order_made_by_output_scale_alone():
    table = depth_mantel_table(_planted("scale"), FACTS, n_permutations=199, seed=0).set_index("description")
    assert table.loc["raw", "mantel_r"] > 0.8 and abs(table.loc["scale_normalised", "mantel_r"]) < 0.1


def _random_l4(n_refits=3):
    generator = np.random.default_rng(4)
    facts = {"l4": {"n_layers": 4, "n_heads": 2, "optimizer": "Adam", "attention_only": False}}
    return {("l4", seed): generator.normal(size=(4, 2, 6)) for seed in range(n_refits)}, facts


def test_a_sampled_mantel_test_is_seeded_and_its_note_is_empty(caplog):
    descriptions, facts = _random_l4()
    with caplog.at_level(logging.INFO, logger="headstab.sections.meta_sne"):
        table = depth_mantel_table(descriptions, facts, n_permutations=23, seed=0)  # 23 of 24 orders: sampled
    pd.testing.assert_frame_equal(depth_mantel_table(descriptions, facts, n_permutations=23, seed=0), table)
    assert (table["note"] == "").all() and (table["n_permutations"] == 23).all()
    expected = [
        f"Mantel, {row.description} descriptions vs |Δ depth| (3 refits): r {row.mantel_r:.3f}, p {row.p_value:.4g}"
        for row in table.itertuples()
    ]
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("Mantel")] == expected


def test_the_note_gives_the_exact_floor_when_every_order_is_enumerated():
    descriptions, facts = _random_l4()
    three = {("l3", seed): desc[:3] for (_, seed), desc in descriptions.items()}
    facts = facts | {"l3": {"n_layers": 3, "n_heads": 2, "optimizer": "Adam", "attention_only": False}}
    # 3! = 6 orders with 6 permutations: exact; an order and its reverse give the same |Δ depth|
    only_three = depth_mantel_table(three, facts, n_permutations=6, seed=0)
    assert (only_three["note"] == "exact over 6 layer orders, so p >= 0.333").all()
    # 3! 4! = 144 orders of two depths: reversing both changes the relative depths across them, floor 1 / 144
    both = depth_mantel_table(descriptions | three, facts, n_permutations=144, seed=0)
    assert (both["note"] == "exact over 144 layer orders, so p >= 0.00694").all()


def test_without_refits_of_three_layers_r_and_p_are_float_nans():
    two_layers = {refit: desc for refit, desc in _planted("shape").items() if refit[0] != "l4_h8_attn"}
    table = depth_mantel_table(two_layers, FACTS, n_permutations=20, seed=0)
    assert table["mantel_r"].dtype == np.float64 and table["p_value"].dtype == np.float64


def test_mantel_refits_take_every_architecture_first_whatever_the_seed():
    descriptions = {("a", s): np.zeros((3, 2, 3)) for s in (1, 2, 3)} | {("b", 1): np.zeros((3, 2, 3))}
    for seed in range(10):
        chosen = mantel_refits(descriptions, max_heads=12, seed=seed)  # two refits of 6 heads fit
        assert {arch for arch, _ in chosen} == {"a", "b"}, seed
    assert mantel_refits(descriptions, None, seed=5) == mantel_refits(descriptions, None, seed=5)


def test_a_zero_description_stays_zero_whatever_the_memory_held():
    features = np.ones((50, 4))
    features[::2] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns of a `where` without an `out`
        for _ in range(5):
            garbage = np.full_like(features, np.nan)  # freed memory the output may be given
            del garbage
            out = scale_normalised(features)
            np.testing.assert_array_equal(out[::2], 0.0)
            np.testing.assert_array_equal(out[1::2], 0.5)
