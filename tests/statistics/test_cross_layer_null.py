"""Cross-layer stability against the same maximum under the prompt-permutation null: the one-sided sign-flip test by
hand, the columns it adds to the interval tables, the null alignment map, and its size on exchangeable heads at
every depth while the raw maximum rises."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol
from scipy.stats import false_discovery_control

from headstab.similarity.prompt_groups import GroupedSimilarity
from headstab.stability import alignment_dispersion_table, alignment_map_table, pair_stability_table, stability_tables
from headstab.statistics.bootstrap import draw_resamples, stability_replicates
from headstab.statistics.calibration import calibration_label
from headstab.statistics.cross_layer_null import (
    METHOD,
    NULL_ALIGNMENT_COLUMNS,
    TEST_COLUMNS,
    add_cross_layer_null,
    cross_layer_best,
    cross_layer_test_columns,
    null_alignment_tables,
    sign_flip_above,
)
from headstab.statistics.interval_tables import interval_tables

SEEDS = [2, 3, 5, 7, 11]


def test_the_one_sided_sign_flip_enumerates_every_sign_vector_by_hand():
    p_value, quantile = sign_flip_above(np.array([0.3, 0.1, 0.2]), n_signs=8, seed=0)
    assert p_value == pytest.approx(1 / 8)  # only the observed signs reach the observed mean, 0.2
    flipped = sorted(np.dot(signs, [0.3, 0.1, 0.2]) / 3 for signs in itertools.product([1, -1], repeat=3))
    assert quantile == pytest.approx(np.quantile(flipped, 0.95))  # 0.1333 + 0.65 * (0.2 - 0.1333)
    p_value, _ = sign_flip_above(np.array([0.3, -0.1, 0.2]), n_signs=8, seed=0)
    assert p_value == pytest.approx(2 / 8)  # 0.133 is reached by (+ - +) and by (+ + -), whose mean is 0.133 too
    p_value, _ = sign_flip_above(np.array([-0.3, -0.1, -0.2]), n_signs=8, seed=0)
    assert p_value == 1.0  # a head below its null in every pair


def test_random_sign_vectors_give_an_add_one_p_and_ties_count_as_extreme():
    rng = np.random.default_rng(0)
    d = rng.normal(loc=1.0, size=(20, 3))
    p_value, quantile = sign_flip_above(d, n_signs=99, seed=4)
    assert p_value.shape == quantile.shape == (3,)
    np.testing.assert_allclose(p_value, 1 / 100)  # 2**20 > 99 vectors: (1 + 0) / (1 + 99)
    np.testing.assert_array_equal(sign_flip_above(d, n_signs=99, seed=4)[0], p_value)  # the same seed, the same p
    zero, _ = sign_flip_above(np.zeros((4, 2)), n_signs=16, seed=0)
    np.testing.assert_array_equal(zero, 1.0)  # every flipped mean ties with 0
    with pytest.raises(ValueError, match="needs paired differences and sign vectors; got 0 and 16"):
        sign_flip_above(np.zeros((0, 2)), n_signs=16, seed=0)


def test_the_test_takes_one_pair_one_sign_vector_float32_differences_and_many_heads_in_chunks():
    p_value, quantile = sign_flip_above(np.array([0.4]), n_signs=2, seed=0)
    assert p_value == 0.5 and quantile == pytest.approx(0.4 - 0.05 * 0.8)  # the two flipped means: -0.4, 0.4
    p_value, _ = sign_flip_above(np.array([0.4, 0.1]), n_signs=1, seed=3)  # 4 vectors > 1: one random vector
    assert p_value in (0.5, 1.0)
    # float32 differences whose float32 mean rounds above the exact one: the observed sign vector still counts
    d32 = np.array([1.1066358089447021, 1.2294964790344238, 1.043624997138977], dtype=np.float32)
    assert sign_flip_above(d32, n_signs=8, seed=0)[0] == 1 / 8
    d = np.random.default_rng(1).normal(size=(6, 1100))  # more heads than two chunks of sign-flipped means
    p_value, quantile = sign_flip_above(d, n_signs=64, seed=0)
    for column in (0, 600, 1099):
        expected = [float(value) for value in sign_flip_above(d[:, column], n_signs=64, seed=0)]
        assert [p_value[column], quantile[column]] == pytest.approx(expected)


def test_random_sign_vectors_are_the_seeds_and_an_all_tied_head_has_p_one():
    d = np.array([0.3, -0.2, 0.25, -0.1, 0.05, 0.2])
    signs = np.random.default_rng(7).choice([-1.0, 1.0], size=(20, 6))
    flipped = signs @ d / 6
    expected = (1 + np.sum(flipped >= d.mean() - 1e-15)) / 21
    p_value, quantile = sign_flip_above(d, n_signs=20, seed=7)
    assert p_value == pytest.approx(expected) and quantile == pytest.approx(np.quantile(flipped, 0.95))
    assert 0.05 < expected < 0.95  # the draw decides it
    assert sign_flip_above(np.zeros((20, 2)), n_signs=99, seed=0)[0].tolist() == [1.0, 1.0]  # (1 + 99) / (1 + 99)


def test_a_tie_counts_only_up_to_rounding_of_the_differences_own_size():
    # flipping the tiny second pair moves the mean by 1e-15: a real difference for differences of 1e-3
    p_value, _ = sign_flip_above(np.array([1e-3, 1e-15]), n_signs=4, seed=0)
    assert p_value == 1 / 4


def _tensors(rng, n_layers=3, n_heads=2):
    n = len(SEEDS)
    shape = (n, n, n_layers, n_heads, n_layers, n_heads)
    observed = rng.random(shape).astype(np.float32)
    observed = (observed + observed.transpose(1, 0, 4, 5, 2, 3)) / 2
    return observed, (rng.random(shape) * 0.9).astype(np.float32)


def _kinds(observed, null, n_signs=64, seed=0):
    resamples = draw_resamples(20, observed.shape[0], 1, 1)
    kinds = {"cross_layer": stability_replicates(resamples, best=cross_layer_best(observed))}
    partners = np.array([1, 0])
    add_cross_layer_null(kinds, resamples, (null, partners), SimpleNamespace(partners=partners), n_signs, seed)
    return kinds


def test_each_anchors_test_runs_over_its_pair_refits_on_the_best_matches_of_every_layer():
    observed, null = _tensors(np.random.default_rng(1))
    kinds = _kinds(observed, null)
    tests = kinds["cross_layer_null"]
    n = len(SEEDS)
    best, null_best = cross_layer_best(observed).astype(np.float64), cross_layer_best(null).astype(np.float64)
    for a, layer, head in [(0, 0, 0), (3, 2, 1), (4, 1, 0)]:
        d = np.array([best[a, b, layer, head] - null_best[a, b, layer, head] for b in range(n) if b != a])
        p_value, quantile = sign_flip_above(d, 64, 0)
        assert tests["head_p_value"][a, layer, head] == pytest.approx(p_value)
        null_stability = np.mean([null_best[a, b, layer, head] for b in range(n) if b != a])
        assert tests["head_estimate"][a, layer, head] == pytest.approx(null_stability)
        assert tests["head_null_quantile"][a, layer, head] == pytest.approx(null_stability + quantile)
        d_layer = np.array([best[a, b, layer].mean() - null_best[a, b, layer].mean() for b in range(n) if b != a])
        p_value, quantile = sign_flip_above(d_layer, 64, 0)
        assert tests["anchor_layer_p_value"][a, layer] == pytest.approx(p_value)
        null_layer = np.mean([null_best[a, b, layer].mean() for b in range(n) if b != a])
        assert tests["anchor_layer_null_quantile"][a, layer] == pytest.approx(null_layer + quantile)
    random_signs = _kinds(observed, null, n_signs=6, seed=9)["cross_layer_null"]  # 2**4 > 6 vectors: drawn
    d = np.array([best[2, b, 1, 0] - null_best[2, b, 1, 0] for b in range(n) if b != 2])
    assert random_signs["head_p_value"][2, 1, 0] == pytest.approx(sign_flip_above(d, 6, 9)[0])


def test_the_null_best_match_searches_every_layer_not_only_the_heads_own():
    observed, null = _tensors(np.random.default_rng(2))
    null[:, :, :, :, 1, :] += 1.0  # every head's best null match lies in layer 1
    tests = _kinds(observed, null)["cross_layer_null"]
    off = ~np.eye(len(SEEDS), dtype=bool)
    for layer in (0, 2):
        same_layer_only = null[:, :, layer, :, layer, :].max(axis=-1)[off].mean()
        assert tests["head_estimate"][:, layer].mean() > same_layer_only + 0.5


def test_partners_other_than_the_prompt_groups_are_refused():
    observed, null = _tensors(np.random.default_rng(3))
    resamples = draw_resamples(5, len(SEEDS), 1, 0)
    kinds = {"cross_layer": stability_replicates(resamples, best=cross_layer_best(observed))}
    with pytest.raises(ValueError) as error:
        add_cross_layer_null(kinds, resamples, (null, np.array([1, 0])), SimpleNamespace(partners=[1, 2, 0]), 8, 0)
    assert str(error.value) == (
        "the pair-similarity file's null pairs prompts differently from the prompt groups (another statistics.seed "
        "or prompt set); rebuild both (snakemake --forcerun pair_similarity prompt_group_similarity)"
    )
    add_cross_layer_null(kinds, resamples, None, SimpleNamespace(partners=[1, 0]), 8, 0)
    assert "cross_layer_null" not in kinds


def test_test_columns_carry_benjamini_hochberg_and_the_calibration_label_and_are_nan_without_tests():
    observed, null = _tensors(np.random.default_rng(4))
    null_kind = _kinds(observed, null)["cross_layer_null"]
    columns = cross_layer_test_columns(null_kind, (5, 3, 2))
    assert list(columns) == TEST_COLUMNS
    np.testing.assert_array_equal(columns["null_quantile"], null_kind["head_null_quantile"])
    np.testing.assert_allclose(columns["q_value"].ravel(), false_discovery_control(columns["p_value"].ravel()))
    assert set(columns["p_calibration"].ravel()) == {calibration_label(METHOD, 5)}
    layer = cross_layer_test_columns(null_kind, (5, 3))
    np.testing.assert_array_equal(layer["p_value"], null_kind["anchor_layer_p_value"])
    for shape in [(3,), (5, 3)]:
        empty = cross_layer_test_columns({} if len(shape) == 2 else null_kind, shape)
        assert list(empty) == TEST_COLUMNS and all(v.dtype == np.float64 and np.isnan(v).all() for v in empty.values())


def _grouped_and_tensors(rng, n_layers=3, n_heads=2):
    observed, null = _tensors(rng, n_layers=n_layers, n_heads=n_heads)
    same = np.moveaxis(np.diagonal(observed, axis1=2, axis2=4), -1, 2)[None]  # one group: [1, a, b, l, i, j]
    lengths, partners = np.full(4, 5), np.array([1, 0, 3, 2])
    grouped = GroupedSimilarity(same, same * 0.5, np.array([4]), SEEDS, partners, lengths)
    return grouped, observed, (null, partners)


def test_interval_tables_fill_the_cross_layer_rows_and_leave_every_same_layer_number_as_it_was():
    grouped, observed, null = _grouped_and_tensors(np.random.default_rng(5))
    options = dict(n_boot=40, seed=3, confidence=0.9, permutations=200)
    plain = interval_tables(observed, grouped, "primary", **options)
    tables = interval_tables(observed, grouped, "primary", **options, null_similarity=null)
    for name in ("head", "layer", "pooled"):
        before, after = plain[name], tables[name]
        assert list(after.columns) == list(before.columns)
        same = before["scope"] == "same_layer"
        pd.testing.assert_frame_equal(
            after[same].drop(columns="p_calibration"), before[same].drop(columns="p_calibration")
        )
        assert after.loc[same, "p_calibration"].isna().all()
        assert before.loc[~same, ["null", "above_null", "p_value"]].isna().all().all()
    head = tables["head"][tables["head"]["scope"] == "cross_layer"]
    stability = stability_tables(observed, SEEDS, "primary")["head_stability"]
    cross = stability[stability["scope"] == "cross_layer"].reset_index(drop=True)
    null_best = cross_layer_best(null[0]).astype(np.float64)
    off = ~np.eye(len(SEEDS), dtype=bool)
    expected_null = np.stack([null_best[a][off[a]].mean(axis=0) for a in range(len(SEEDS))])
    atol = reduction_atol(np.float32, len(SEEDS))
    np.testing.assert_allclose(head["null"], expected_null.ravel(), atol=atol)
    np.testing.assert_allclose(head["above_null"], cross["stability"] - head["null"].to_numpy(), atol=atol)
    assert head["init"].isna().all() and (head["p_calibration"] == calibration_label(METHOD, len(SEEDS))).all()
    assert ((head["p_value"] > 0) & (head["p_value"] <= 1)).all() and (head["q_value"] >= head["p_value"]).all()
    assert all(tables["head"][column].dtype == np.float64 for column in ("null_quantile", "p_value", "q_value"))
    pooled = tables["pooled"][tables["pooled"]["scope"] == "cross_layer"]
    assert pooled["null"].notna().all() and pooled["p_value"].isna().all()  # ordered pairs are no independent units


def test_relabelling_the_layers_permutes_every_heads_null_and_test():
    grouped, observed, (null, partners) = _grouped_and_tensors(np.random.default_rng(6), n_layers=4)
    order = np.array([3, 1, 0, 2])
    relabel = lambda t: t[:, :, order][:, :, :, :, order]  # noqa: E731
    kinds, relabelled = _kinds(observed, null, seed=5), _kinds(relabel(observed), relabel(null), seed=5)
    for name in ("head_estimate", "head_p_value", "head_null_quantile", "anchor_layer_p_value"):
        np.testing.assert_array_equal(relabelled["cross_layer_null"][name], kinds["cross_layer_null"][name][:, order])


def test_the_null_alignment_map_is_the_alignment_map_of_the_nulls_best_matches():
    grouped, observed, (null, _) = _grouped_and_tensors(np.random.default_rng(7))
    null[:, :, :, :, 2, :] += 1.0  # every null best match in layer 2
    tables = stability_tables(observed, SEEDS, "primary")
    alignment, dispersion = null_alignment_tables(
        tables["alignment_map"], tables["alignment_dispersion"], null, SEEDS, "primary"
    )
    pd.testing.assert_frame_equal(alignment.drop(columns="fraction_null"), tables["alignment_map"])
    np.testing.assert_array_equal(alignment["fraction_null"], (alignment["match_layer"] == 2).astype(float))
    expected = alignment_dispersion_table(alignment_map_table(pair_stability_table(null, SEEDS, "primary")))
    np.testing.assert_array_equal(dispersion["diagonal_share_null"], expected["diagonal_share"])
    np.testing.assert_array_equal(dispersion["normalized_entropy_null"], 0.0)  # one layer takes every match
    assert dispersion["kurtosis_null"].isna().all()  # a one-layer row has no kurtosis
    with_self, _ = null_alignment_tables(
        tables["alignment_map"], tables["alignment_dispersion"], null, SEEDS, "primary", include_self=True
    )
    own = with_self["match_layer"] == with_self["layer"]
    expected = np.where(own, 1 / len(SEEDS), 0.0) + (with_self["match_layer"] == 2) * (len(SEEDS) - 1) / len(SEEDS)
    np.testing.assert_allclose(with_self["fraction_null"], expected)
    alignment, dispersion = null_alignment_tables(
        tables["alignment_map"], tables["alignment_dispersion"], None, SEEDS, "p"
    )
    assert alignment["fraction_null"].isna().all() and dispersion[NULL_ALIGNMENT_COLUMNS[1:]].isna().all().all()
    assert alignment["fraction_null"].dtype == np.float64
    assert (dispersion[NULL_ALIGNMENT_COLUMNS[1:]].dtypes == np.float64).all()


def _exchangeable_study(rng, n, n_layers, n_heads=2, lengths=(6, 7, 8), n_prompts=8):
    """Kinds "cross_layer" and "cross_layer_null" (with the tests) of n refits whose heads share BOS and
    previous-token habits and sharper and broader layers, but respond to each prompt on their own (H0), through
    the project's engine."""
    from headstab.activations.packing import lower_triangle_offsets
    from headstab.similarity.null_pairs import null_pair_similarity
    from headstab.similarity.pairs import GramAccumulator, gram_to_pair_similarity, normalize_lower_features
    from headstab.similarity.prompt_groups import null_partners

    prompt_lengths = rng.choice(lengths, size=n_prompts)
    t = max(lengths)
    bias = 2.0 * (np.arange(t) == 0) + np.eye(t, k=-1) + rng.normal(scale=0.5, size=(n_layers, 1, t, t))
    scale = rng.uniform(0.5, 3.0, size=(1, n_layers, 1, 1, 1))
    segments = []
    for length in prompt_lengths:
        logits = scale * rng.normal(size=(n, n_layers, n_heads, length, length)) + bias[..., :length, :length]
        logits = np.where(np.tri(length, dtype=bool), logits, -np.inf)
        pattern = np.exp(logits - logits.max(axis=-1, keepdims=True))
        segments.append((pattern / pattern.sum(axis=-1, keepdims=True))[..., *np.tril_indices(length)])
    packed = np.concatenate(segments, axis=-1).astype(np.float32)  # [refit, layer, head, entry]
    offsets, partners = lower_triangle_offsets(prompt_lengths), null_partners(prompt_lengths, 0)
    features = np.ascontiguousarray(packed.reshape(n * n_layers * n_heads, -1))
    normalize_lower_features(features, offsets, n_prompts)
    gram = GramAccumulator(features.shape[0])
    gram.add(features)
    observed = gram_to_pair_similarity(gram.gram, n, n_layers, n_heads)
    blocks = [np.ascontiguousarray(packed[:, layer].reshape(n * n_heads, -1)) for layer in range(n_layers)]
    null = null_pair_similarity(blocks, offsets, prompt_lengths, partners, n)
    resamples = draw_resamples(2, n, 1, 0)
    kinds = {"cross_layer": stability_replicates(resamples, best=cross_layer_best(observed))}
    add_cross_layer_null(kinds, resamples, (null, partners), SimpleNamespace(partners=partners), 200, 0)
    return kinds


def test_exchangeable_heads_are_above_their_null_at_about_alpha_at_2_and_24_layers_while_the_raw_maximum_rises():
    rng = np.random.default_rng(20261128)
    raw, rates = {}, {}
    for n_layers in (2, 24):
        runs = [_exchangeable_study(rng, 8, n_layers) for _ in range(12)]
        raw[n_layers] = np.mean([r["cross_layer"]["head_estimate"].mean() for r in runs])
        null = np.mean([r["cross_layer_null"]["head_estimate"].mean() for r in runs])
        assert abs(raw[n_layers] - null) < 0.01  # the null rises with the maximum
        rates[n_layers] = np.mean(np.concatenate([r["cross_layer_null"]["head_p_value"].ravel() for r in runs]) <= 0.05)
    assert raw[24] > raw[2] + 0.03
    assert rates[2] <= 0.1 and rates[24] <= 0.1, rates
