"""headstab.sections.meta_sne: §4.9 head descriptions, the frame of all heads and the t-SNE."""

import numpy as np
import pytest
from scipy.spatial.distance import pdist
from tolerances import reduction_rtol

from headstab.sections.meta_sne import (
    head_descriptions,
    meta_sne_embedding,
    meta_sne_frame,
    meta_sne_table,
    refit_descriptions,
    token_mean_head_output,
)

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
    frame = meta_sne_table(_descriptions(), FACTS, perplexity=30.0, seed=0)
    assert {"tsne_x", "tsne_y"} <= set(frame.columns)
    assert np.isfinite(frame[["tsne_x", "tsne_y"]].to_numpy()).all()
    again = meta_sne_embedding(meta_sne_frame(_descriptions_fixed(), FACTS)[1], seed=0)
    np.testing.assert_array_equal(again, meta_sne_embedding(meta_sne_frame(_descriptions_fixed(), FACTS)[1], seed=0))


def test_perplexity_is_clipped_to_what_the_heads_allow_and_passed_through(monkeypatch):
    import sklearn.manifold

    used = []
    real_tsne = sklearn.manifold.TSNE

    def spy(*args, **kwargs):
        used.append(kwargs["perplexity"])
        return real_tsne(*args, **kwargs)

    monkeypatch.setattr(sklearn.manifold, "TSNE", spy)
    features = meta_sne_frame(_descriptions(), FACTS)[1]
    n_heads = features.shape[0]
    assert n_heads == 48
    xy = meta_sne_embedding(features, perplexity=10_000, seed=0)  # the authors' value: above n, unclipped it fails
    assert used == [(n_heads - 1) / 3] and np.isfinite(xy).all()
    meta_sne_embedding(features, perplexity=5, seed=0)
    assert used[-1] == 5  # below the cap: passed through unchanged


def test_per_optimizer_embedding_embeds_each_optimizer_alone():
    descriptions = _descriptions()
    joint = meta_sne_table(descriptions, FACTS, perplexity=5, seed=0)
    separate = meta_sne_table(descriptions, FACTS, perplexity=5, seed=0, embedding="per_optimizer")
    frame, features = meta_sne_frame(descriptions, FACTS)
    for optimizer in ("Adam", "AdamW"):
        rows = np.flatnonzero(frame["optimizer"] == optimizer)
        alone = meta_sne_embedding(features[rows], perplexity=5, seed=0)
        np.testing.assert_array_equal(separate.iloc[rows][["tsne_x", "tsne_y"]].to_numpy(), alone)
    assert not np.array_equal(joint[["tsne_x", "tsne_y"]].to_numpy(), separate[["tsne_x", "tsne_y"]].to_numpy())
    assert set(separate["embedding"]) == {"per_optimizer"} and set(joint["embedding"]) == {"joint"}
    with pytest.raises(ValueError, match="analysis.meta_sne_embedding"):
        meta_sne_table(descriptions, FACTS, embedding="both")


def test_embedding_separates_distinct_groups():
    group_rng = np.random.default_rng(5)
    features = np.concatenate([group_rng.normal(0, 0.1, (15, 6)), group_rng.normal(5, 0.1, (15, 6))])
    xy = meta_sne_embedding(features, perplexity=5, seed=0)
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
