"""headstab.similarity.pairs, the engine the workflow runs (paper Eq. 1-2), against the oracles of
tests/helpers/reference.py; and the oracles against the paper's plain loop."""

from __future__ import annotations

import json
import shlex

import h5py
import numpy as np
import pytest
from helpers.bridges import MIXED_LENGTHS, write_refit_caches
from helpers.reference import (
    anchor_pair_similarity,
    causal_length_mask,
    causal_pattern_features,
    loop_pair_similarity,
    pack_lower_triangle,
    pair_similarity,
    same_layer_pair_similarity,
)
from helpers.tolerances import EXTRA_ULPS, eps, reduction_atol, reduction_rtol

from headstab.activations.h5util import stamp_attribute_digests
from headstab.activations.packing import lower_triangle_offsets
from headstab.activations.reader import CacheReader, open_cache
from headstab.similarity.pairs import (
    SIMILARITY_FORMAT,
    SIMILARITY_FORMAT_VERSION,
    GramAccumulator,
    SimilarityChecksumError,
    SimilarityFileError,
    finish_result_file,
    gram_to_pair_similarity,
    normalize_lower_features,
    open_result_file,
    pair_similarity_from_caches,
    read_pair_similarity,
    write_pair_similarity,
)


def random_patterns(
    rng: np.random.Generator, n_layers: int, n_heads: int, lengths: np.ndarray, n_pos: int
) -> np.ndarray:
    """Softmax of random scores under a causal mask, zero outside each prompt's length x length block.

    Returns float32 [layer, prompt, head, query_pos, key_pos].
    """
    n_prompts = len(lengths)
    scores = rng.normal(scale=2.0, size=(n_layers, n_prompts, n_heads, n_pos, n_pos))
    causal = np.tril(np.ones((n_pos, n_pos), dtype=bool))
    scores = np.where(causal, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    pattern = weights / weights.sum(axis=-1, keepdims=True)
    inside = np.arange(n_pos)[None, :] < np.asarray(lengths)[:, None]  # [prompt, pos]
    block = inside[:, :, None] & inside[:, None, :]  # [prompt, query, key]
    return (pattern * block[None, :, None]).astype(np.float32)


def stacked_features(patterns: list[np.ndarray], lengths: np.ndarray) -> np.ndarray:
    """[seed, layer, head, prompt, n_lower] from one pattern array per seed."""
    return np.stack([causal_pattern_features(p, lengths) for p in patterns])


def test_features_have_norm_one_over_sqrt_prompts_and_tril_order():
    rng = np.random.default_rng(0)
    lengths = np.array([5, 3, 5])
    pattern = random_patterns(rng, 2, 3, lengths, 5)
    features = causal_pattern_features(pattern, lengths)
    assert features.shape == (2, 3, 3, 15) and features.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(features, axis=-1), 1 / np.sqrt(3), rtol=reduction_rtol(np.float32, 15))
    # Row-major lower triangle: features[layer 1, head 0, prompt 2] is pattern[1, 2, 0] read that way.
    rows, cols = np.tril_indices(5)
    expected = pattern[1, 2, 0][rows, cols] / np.linalg.norm(pattern[1, 2, 0][rows, cols]) / np.sqrt(3)
    np.testing.assert_allclose(features[1, 0, 2], expected, rtol=0, atol=reduction_atol(np.float32, 15))


def test_pair_similarity_equals_plain_loop_over_eq_1_and_2():
    rng = np.random.default_rng(1)
    lengths = np.array([6, 4, 2, 5])
    patterns = [random_patterns(rng, 2, 3, lengths, 6) for _ in range(3)]
    similarity = pair_similarity(stacked_features(patterns, lengths))
    assert similarity.shape == (3, 3, 2, 3, 2, 3) and similarity.dtype == np.float32
    n_terms = len(lengths) * 6 * 7 // 2  # dot products over prompt x padded lower triangle
    np.testing.assert_allclose(
        similarity, loop_pair_similarity(patterns, lengths), atol=reduction_atol(np.float32, n_terms)
    )


def test_similarity_of_refit_b_to_a_is_transpose_of_a_to_b():
    rng = np.random.default_rng(2)
    lengths = np.array([7, 5, 7])
    patterns = [random_patterns(rng, 3, 4, lengths, 7) for _ in range(3)]
    similarity = pair_similarity(stacked_features(patterns, lengths))
    for a in range(3):
        for b in range(3):
            np.testing.assert_array_equal(similarity[a, b], similarity[b, a].transpose(2, 3, 0, 1))


def test_zero_padding_changes_nothing():
    rng = np.random.default_rng(3)
    lengths = np.array([5, 3, 4])
    patterns = [random_patterns(rng, 2, 3, lengths, 5) for _ in range(2)]
    pad = ((0, 0), (0, 0), (0, 0), (0, 7), (0, 7))
    padded = [np.pad(p, pad) for p in patterns]
    tight = pair_similarity(stacked_features(patterns, lengths))
    loose_features = stacked_features(padded, lengths)
    loose = pair_similarity(loose_features)
    # Each entry is a float32 dot product over prompt x n_lower terms whose products sum to <= 1.
    n_terms = loose_features.shape[-2] * loose_features.shape[-1]
    np.testing.assert_allclose(loose, tight, atol=reduction_atol(np.float32, n_terms), rtol=0)


def test_values_written_for_pad_queries_are_ignored():
    rng = np.random.default_rng(4)
    lengths = np.array([3, 6])
    pattern = random_patterns(rng, 1, 2, lengths, 6)
    dirty = pattern.copy()
    # Without an attention mask, pad queries of a right-padded prompt attend to real tokens.
    dirty[:, 0, :, 3:, :4] = 0.25
    np.testing.assert_array_equal(causal_pattern_features(dirty, lengths), causal_pattern_features(pattern, lengths))


def test_one_anchor_route_equals_eq_1_and_2_and_ignores_values_outside_the_triangle():
    rng = np.random.default_rng(12)
    lengths = np.array([6, 3, 5, 1])
    patterns = [random_patterns(rng, 2, 3, lengths, 7) for _ in range(3)]
    reference = loop_pair_similarity(patterns, lengths)
    got = anchor_pair_similarity(patterns, lengths, anchor=1)
    assert got.shape == (3, 2, 3, 3) and got.dtype == np.float32
    for layer in range(2):
        # per prompt a dot product over the masked 7 x 7 square, then the mean over 4 prompts
        np.testing.assert_allclose(
            got[:, layer], reference[1, :, layer, :, layer, :], atol=reduction_atol(np.float32, 4 * 49)
        )
    # Entries above the diagonal or outside a prompt's length block are not part of Eq. 1.
    dirty = [p.copy() for p in patterns]
    for p in dirty:
        p[:, 1, :, :, 4:] = 0.5  # prompt 1 (3 tokens): pad keys and pad queries
        p[:, 0, :, 0, 1:] = 0.25  # prompt 0: above the diagonal
    np.testing.assert_array_equal(anchor_pair_similarity(dirty, lengths, anchor=1), got)  # masked to exact zeros


def test_one_anchor_route_matches_the_gram_route_and_rejects_bad_input():
    rng = np.random.default_rng(13)
    lengths = np.array([5, 4, 5])
    patterns = [random_patterns(rng, 2, 3, lengths, 5) for _ in range(4)]
    gram_route = same_layer_pair_similarity(stacked_features(patterns, lengths), anchors=[2])[0]
    np.testing.assert_allclose(
        anchor_pair_similarity(patterns, lengths, anchor=2), gram_route, atol=reduction_atol(np.float32, 3 * 25)
    )
    with pytest.raises(ValueError, match=r"anchor must be a refit index in 0\.\.3"):
        anchor_pair_similarity(patterns, lengths, anchor=4)
    with pytest.raises(ValueError, match="pattern 1 has shape"):
        anchor_pair_similarity([patterns[0], patterns[1][:, :2]], lengths)
    with pytest.raises(ValueError, match=r"values in 1\.\.5"):
        anchor_pair_similarity(patterns, np.array([5, 0, 5]))


def test_normalized_packed_features_equal_causal_pattern_features():
    rng = np.random.default_rng(14)
    lengths = np.array([4, 1, 3])
    pattern = random_patterns(rng, 2, 3, lengths, 4)  # [layer, prompt, head, q, k]
    packed = np.concatenate([pack_lower_triangle(pattern[:, p], int(n)) for p, n in enumerate(lengths)], axis=-1)
    offsets = lower_triangle_offsets(lengths)
    assert offsets.tolist() == [0, 10, 11, 17] and packed.shape == (2, 3, 17)
    rows = np.ascontiguousarray(packed.reshape(6, 17), dtype=np.float32)
    assert normalize_lower_features(rows, offsets, n_prompts_total=3) is rows
    padded = causal_pattern_features(pattern, lengths).reshape(6, -1)  # zeros where a prompt is shorter
    np.testing.assert_allclose(rows @ rows.T, padded @ padded.T, atol=reduction_atol(np.float32, padded.shape[1]))
    for a, b in zip(offsets[:-1], offsets[1:]):
        np.testing.assert_allclose(
            np.linalg.norm(rows[:, a:b], axis=1), 1 / np.sqrt(3), rtol=reduction_rtol(np.float32, 10)
        )
    with pytest.raises(ValueError, match="offsets must rise from 0 to the number of entries"):
        normalize_lower_features(rows, np.array([0, 10, 16]), 3)
    with pytest.raises(ValueError, match=r"n_prompts_total \(2\) must be >= the number of prompts here \(3\)"):
        normalize_lower_features(rows, offsets, 2)


def test_normalize_lower_features_names_bad_features_and_bad_offsets():
    good = np.ones((6, 17), dtype=np.float32)
    for bad, named in (
        (good.astype(np.float64), r"float64 \(6, 17\)"),
        (good.reshape(2, 3, 17), r"float32 \(2, 3, 17\)"),
        (np.asfortranarray(good), r"float32 \(6, 17\)"),
    ):
        with pytest.raises(
            ValueError, match=rf"^features must be a C-contiguous float32 \[row, entry\] array; got {named}$"
        ):
            normalize_lower_features(bad, np.array([0, 10, 11, 17]), 3)
    rise = r"^offsets must rise from 0 to the number of entries \(17\); got "
    for bad in ([1, 10, 11, 17], [[0, 10, 11, 17]], [0, 10, 11, 16], []):
        with pytest.raises(ValueError, match=rise):
            normalize_lower_features(good, np.array(bad, dtype=np.int64), 3)
    # a falling offset, named by the first three and the last two
    with pytest.raises(ValueError, match=rise + r"\[ 0 12 10\]\.\.\.\[11 17\]$"):
        normalize_lower_features(good, np.array([0, 12, 10, 11, 17]), 4)


def test_normalize_lower_features_takes_empty_prompts_whole_float_offsets_and_no_prompts():
    rows = np.random.default_rng(16).uniform(size=(2, 17)).astype(np.float32)
    expected = normalize_lower_features(rows.copy(), np.array([0, 10, 17]), 3)
    # a prompt without entries adds nothing; offsets computed as n (n + 1) / 2 in floats index alike
    np.testing.assert_array_equal(normalize_lower_features(rows.copy(), np.array([0, 10, 10, 17]), 3), expected)
    np.testing.assert_array_equal(normalize_lower_features(rows.copy(), np.array([0.0, 10.0, 17.0]), 3), expected)
    for a, b in ((0, 10), (10, 17)):
        np.testing.assert_allclose(
            np.linalg.norm(expected[:, a:b], axis=1), 1 / np.sqrt(3), rtol=reduction_rtol(np.float32, 10)
        )
    empty = np.zeros((2, 0), dtype=np.float32)
    assert normalize_lower_features(empty, np.array([0]), 0) is empty


def test_an_all_zero_segment_stays_zero_whatever_memory_numpy_hands_out():
    rows = np.random.default_rng(17).uniform(size=(4, 6)).astype(np.float32)
    rows[1], rows[3, :3] = 0, 0
    # NaN-filled float64 buffers of the per-row size, freed into numpy's small-allocation cache, which reuses them
    stale = [np.full(4, np.nan) for _ in range(8)]
    del stale
    out = normalize_lower_features(rows, np.array([0, 3, 6]), 2)
    np.testing.assert_array_equal(out[1], 0)
    np.testing.assert_array_equal(out[3, :3], 0)
    np.testing.assert_allclose(
        np.linalg.norm(out[[0, 2], :3], axis=1), 1 / np.sqrt(2), rtol=reduction_rtol(np.float32, 3)
    )
    np.testing.assert_allclose(
        np.linalg.norm(out[[0, 2, 3], 3:], axis=1), 1 / np.sqrt(2), rtol=reduction_rtol(np.float32, 3)
    )


def test_causal_length_mask_by_hand():
    mask = causal_length_mask(np.array([2, 3]), 3).reshape(2, 3, 3)
    np.testing.assert_array_equal(mask[0], [[1, 0, 0], [1, 1, 0], [0, 0, 0]])
    np.testing.assert_array_equal(mask[1], [[1, 0, 0], [1, 1, 0], [1, 1, 1]])


def test_streamed_prompt_chunks_equal_one_product():
    rng = np.random.default_rng(5)
    lengths = np.array([6, 4, 5, 6, 2])
    patterns = [random_patterns(rng, 2, 3, lengths, 6) for _ in range(2)]
    whole = pair_similarity(stacked_features(patterns, lengths))
    accumulator = GramAccumulator(2 * 2 * 3)
    for chunk in (slice(0, 2), slice(2, 5)):
        features = np.stack([causal_pattern_features(p[:, chunk], lengths[chunk], n_prompts_total=5) for p in patterns])
        accumulator.add(features.reshape(12, -1))
    assert accumulator.n_chunks == 2 and accumulator.gram.dtype == np.float64
    np.testing.assert_allclose(
        gram_to_pair_similarity(accumulator.gram, 2, 2, 3), whole, atol=reduction_atol(np.float32, 5 * 21)
    )


def test_accumulated_feature_chunks_stay_within_the_float32_bound():
    rng = np.random.default_rng(6)
    rows = rng.normal(size=(5, 40)).astype(np.float32)
    accumulator = GramAccumulator(5)
    accumulator.add(rows[:, :25])
    accumulator.add(rows[:, 25:])
    full = rows.astype(np.float64) @ rows.T.astype(np.float64)
    bound = np.abs(rows.astype(np.float64)) @ np.abs(rows.T.astype(np.float64))  # sum of |terms| per entry
    assert accumulator.n_chunks == 2
    assert np.all(np.abs(accumulator.gram - full) <= (40 + EXTRA_ULPS) * eps(np.float32) * bound)


def test_same_layer_pair_similarity_is_the_diagonal_blocks():
    rng = np.random.default_rng(7)
    lengths = np.array([4, 4, 3])
    features = stacked_features([random_patterns(rng, 3, 2, lengths, 4) for _ in range(3)], lengths)
    full = pair_similarity(features)
    same = same_layer_pair_similarity(features)
    assert same.shape == (3, 3, 3, 2, 2)
    atol = reduction_atol(np.float32, features.shape[-2] * features.shape[-1])  # dot products over prompt x n_lower
    for layer in range(3):
        np.testing.assert_allclose(same[:, :, layer], full[:, :, layer, :, layer, :], atol=atol, rtol=0)


def test_same_layer_similarity_of_chosen_anchors_is_their_rows_of_the_full_tensor():
    rng = np.random.default_rng(9)
    lengths = np.array([5, 3, 5])
    features = stacked_features([random_patterns(rng, 2, 3, lengths, 5) for _ in range(4)], lengths)
    every = same_layer_pair_similarity(features)
    chosen = same_layer_pair_similarity(features, anchors=[2, 0])
    assert chosen.shape == (2, 4, 2, 3, 3)
    np.testing.assert_allclose(chosen, every[[2, 0]], atol=reduction_atol(np.float32, 3 * 15))
    with pytest.raises(ValueError, match=r"anchors must be seed indices in 0\.\.3"):
        same_layer_pair_similarity(features, anchors=[4])


def test_symmetric_gram_is_exactly_symmetric_across_blocks(monkeypatch):
    import headstab.similarity.pairs as similarity

    monkeypatch.setattr(similarity, "GRAM_BLOCK_ROWS", 3)  # 13 rows -> halves of 6 and 7 -> halves of 3 and 3, 3 and 4
    rows = np.random.default_rng(10).normal(size=(13, 50)).astype(np.float32)
    accumulator = GramAccumulator(13)
    accumulator.add(rows)
    np.testing.assert_array_equal(accumulator.gram, accumulator.gram.T)
    bound = np.abs(rows.astype(np.float64)) @ np.abs(rows.T.astype(np.float64))  # sum of |terms| per entry
    error = np.abs(accumulator.gram - rows.astype(np.float64) @ rows.T.astype(np.float64))
    assert np.all(error <= (50 + EXTRA_ULPS) * eps(np.float32) * bound)


def test_gram_of_one_row_blocks_is_exact(monkeypatch):
    import headstab.similarity.pairs as similarity

    monkeypatch.setattr(similarity, "GRAM_BLOCK_ROWS", 1)  # 5 rows -> halves of 2 and 3 -> ... -> single rows
    rows = np.random.default_rng(18).integers(-3, 4, size=(5, 7)).astype(np.float32)  # small integers: exact sums
    accumulator = GramAccumulator(5)
    accumulator.add(rows)
    np.testing.assert_array_equal(accumulator.gram, rows.astype(np.float64) @ rows.T.astype(np.float64))


def test_float16_chunks_are_multiplied_in_float32_without_overflow():
    chunk = np.full((3, 300), 20, dtype=np.float16)  # the caches' dtype: each sum 300 * 400 = 120000 > float16's 65504
    accumulator = GramAccumulator(3)
    accumulator.add(chunk)
    np.testing.assert_array_equal(accumulator.gram, np.full((3, 3), 120000.0))


def test_features_written_into_a_given_array():
    rng = np.random.default_rng(11)
    lengths = np.array([4, 2])
    pattern = random_patterns(rng, 2, 3, lengths, 4)
    out = np.full((2, 3, 2, 10), np.nan, dtype=np.float32)
    returned = causal_pattern_features(pattern, lengths, out=out)
    assert returned is out
    np.testing.assert_array_equal(out, causal_pattern_features(pattern, lengths))
    with pytest.raises(ValueError, match=r"out must be a C-contiguous float32 array of shape \(2, 3, 2, 10\)"):
        causal_pattern_features(pattern, lengths, out=np.zeros((2, 3, 2, 9), dtype=np.float32))


def test_float16_patterns_stay_close_to_float32():
    rng = np.random.default_rng(8)
    lengths = np.array([8, 8, 6])
    patterns = [random_patterns(rng, 2, 3, lengths, 8) for _ in range(2)]
    exact = pair_similarity(stacked_features(patterns, lengths))
    half = pair_similarity(stacked_features([p.astype(np.float16) for p in patterns], lengths))
    assert np.abs(half - exact).max() < 1e-3


@pytest.mark.parametrize(
    ("shape", "lengths", "message"),
    [
        ((2, 3, 4, 4), [4, 4, 4], "5 axes"),
        ((1, 2, 1, 4, 5), [4, 4], "must match"),
        ((1, 2, 1, 4, 4), [4, 4, 4], "lengths must be"),
        ((1, 2, 1, 4, 4), [4, 5], "1..4"),
        ((1, 2, 1, 4, 4), [0, 4], "1..4"),
    ],
)
def test_bad_pattern_shapes_fail_with_the_shape(shape, lengths, message):
    with pytest.raises(ValueError, match=message):
        causal_pattern_features(np.ones(shape, dtype=np.float32), np.array(lengths))


def test_bad_gram_and_chunk_shapes_fail_clearly():
    with pytest.raises(ValueError, match=r"\[12, 12\]"):
        gram_to_pair_similarity(np.zeros((10, 10)), 2, 2, 3)
    with pytest.raises(ValueError, match=r"chunk must be \[4, feature\]"):
        GramAccumulator(4).add(np.zeros((3, 8)))
    with pytest.raises(ValueError, match="features must be"):
        pair_similarity(np.zeros((2, 3, 4)))


# ---------------------------------------------------------------- the engine on caches from the real writer
LENGTHS_MIXED = MIXED_LENGTHS


@pytest.fixture(scope="module")
def refit_caches(tmp_path_factory):
    """Caches of three seeded TransformerBridge refits (2 layers, 3 heads) written by the real writer,
    two prompt sets of mixed lengths."""
    return write_refit_caches(tmp_path_factory.mktemp("refit_caches"))


def patterns_of(paths, promptset):
    """Each refit's unpacked patterns [layer, prompt, head, q, k] and the lengths, read back from its cache."""
    patterns = []
    for path in paths:
        with open_cache(path) as cache:
            patterns.append(cache.hook_pattern(promptset))
            lengths = cache.lengths(promptset)
    return patterns, lengths


@pytest.mark.parametrize("prompt_chunk", [1, 3, 7, 10])
@pytest.mark.parametrize("scope", ["cross_layer", "same_layer"])
def test_engine_on_written_caches_equals_the_oracles(refit_caches, scope, prompt_chunk):
    patterns, lengths = patterns_of(refit_caches, "primary")
    streamed = pair_similarity_from_caches(
        refit_caches, "primary", prompt_chunk=prompt_chunk, progress=False, scope=scope
    )
    features = np.stack([causal_pattern_features(p, lengths) for p in patterns])
    loop = loop_pair_similarity(patterns, lengths, same_layer=scope == "same_layer")
    # float32 dot products over every prompt's lower triangle (prompt x n_lower terms of the padded features)
    atol = reduction_atol(np.float32, features.shape[-2] * features.shape[-1])
    assert streamed.dtype == np.float32  # the documented S, also for float64 Gram sums
    if scope == "same_layer":
        assert streamed.shape == (3, 3, 2, 3, 3)
        np.testing.assert_allclose(streamed, same_layer_pair_similarity(features), atol=atol, rtol=0)
        for layer in range(2):
            np.testing.assert_allclose(streamed[:, :, layer], loop[:, :, layer, :, layer, :], atol=atol, rtol=0)
    else:
        assert streamed.shape == (3, 3, 2, 3, 2, 3)
        np.testing.assert_allclose(streamed, pair_similarity(features), atol=atol, rtol=0)
        np.testing.assert_allclose(streamed, loop, atol=atol, rtol=0)
        # one symmetric Gram matrix: mirrored blocks are equal exactly
        np.testing.assert_array_equal(streamed[0, 1], streamed[1, 0].transpose(2, 3, 0, 1))


def test_engine_reads_every_prompt_set_and_a_one_token_prompt(refit_caches):
    patterns, lengths = patterns_of(refit_caches, "short")
    assert lengths.tolist() == [4, 4, 1]
    streamed = pair_similarity_from_caches(refit_caches, "short", prompt_chunk=2, progress=False)
    loop = loop_pair_similarity(patterns, lengths)
    np.testing.assert_allclose(streamed, loop, atol=reduction_atol(np.float32, 3 * 10), rtol=0)


def test_engine_rejects_bad_arguments(refit_caches):
    with pytest.raises(ValueError, match="prompt_chunk must be >= 1"):
        pair_similarity_from_caches(refit_caches, "primary", prompt_chunk=0, progress=False)
    with pytest.raises(ValueError, match="scope must be one of"):
        pair_similarity_from_caches(refit_caches, "primary", progress=False, scope="all")
    with pytest.raises(KeyError, match=r"prompt set 'nope' is not in the caches \(primary, short\)"):
        pair_similarity_from_caches(refit_caches, "nope", progress=False)


def test_one_refit_is_its_block_of_the_joint_run_with_ones_on_its_own_heads(refit_caches):
    joint = pair_similarity_from_caches(refit_caches, "short", progress=False)
    alone = pair_similarity_from_caches(refit_caches[:1], "short", progress=False)
    assert alone.shape == (1, 1, 2, 3, 2, 3)
    atol = reduction_atol(np.float32, 3 * 10)  # float32 dot products over 3 prompts' lower triangles
    np.testing.assert_allclose(alone, joint[:1, :1], atol=atol, rtol=0)
    np.testing.assert_allclose(alone[0, 0].reshape(6, 6).diagonal(), 1, atol=atol, rtol=0)


@pytest.fixture(scope="module")
def one_prompt_caches(tmp_path_factory):
    """Two seeded refits' caches, written by the real writer, of one prompt set holding a single prompt."""
    from helpers.bridges import tiny_bridge

    from headstab.activations.writer import CacheOptions, write_activation_cache

    directory = tmp_path_factory.mktemp("one_prompt")
    paths = []
    for seed in (1, 2):
        model = tiny_bridge(n_layers=2, n_heads=3, d_model=24, d_head=8, d_mlp=48, n_ctx=16, d_vocab=50, seed=seed)
        paths.append(directory / f"seed{seed}.h5")
        write_activation_cache(
            paths[-1], model, {"one": [[0, 4, 9, 2, 7]]}, pad_token_id=0, options=CacheOptions(show_progress=False)
        )
    return paths


@pytest.mark.parametrize("scope", ["cross_layer", "same_layer"])
def test_engine_on_a_single_prompt_equals_the_plain_loop(one_prompt_caches, scope):
    patterns, lengths = patterns_of(one_prompt_caches, "one")
    streamed = pair_similarity_from_caches(one_prompt_caches, "one", progress=False, scope=scope)
    loop = loop_pair_similarity(patterns, lengths)
    atol = reduction_atol(np.float32, 15)  # one prompt of 5 tokens: 15 lower-triangle terms
    if scope == "same_layer":
        loop = np.stack([loop[:, :, layer, :, layer, :] for layer in range(2)], axis=2)
    np.testing.assert_allclose(streamed, loop, atol=atol, rtol=0)


def test_a_prompt_set_without_prompts_names_the_first_cache(refit_caches, monkeypatch):
    # the writer refuses an empty prompt set, so the cache's offsets are replaced by those of no prompts
    monkeypatch.setattr(CacheReader, "pattern_offsets", lambda self, promptset: np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError) as error:
        pair_similarity_from_caches(refit_caches, "short", progress=False)
    assert str(error.value) == f"prompt set 'short' of {refit_caches[0]} has no prompts; there is nothing to compare"


def test_engine_labels_its_progress_bar_and_shows_it_by_default(refit_caches, tqdm_bars):
    bars = tqdm_bars
    pair_similarity_from_caches(refit_caches, "short")
    pair_similarity_from_caches(refit_caches, "short", progress=False, scope="same_layer")
    assert bars == [
        {"desc": "similarity short (cross_layer)", "unit": "block", "disable": False},
        {"desc": "similarity short (same_layer)", "unit": "block", "disable": True},
    ]


# ---------------------------------------------------------------- pair-similarity files
def written_similarity(path, seeds=(1, 2, 3)):
    rng = np.random.default_rng(11)
    similarity = rng.uniform(-1, 1, size=(len(seeds), len(seeds), 2, 3, 2, 3)).astype(np.float32)
    write_pair_similarity(
        path, similarity, list(seeds), attrs={"architecture": "tiny", "inputs": {"a.h5": {"seed": 1}}}
    )
    return similarity


def test_pair_similarity_file_round_trips_with_a_checksum_per_chunk(tmp_path):
    path = tmp_path / "similarity" / "primary.h5"
    similarity = written_similarity(path)
    read, seeds = read_pair_similarity(path)
    np.testing.assert_array_equal(read, similarity)
    assert seeds == [1, 2, 3] and not list(path.parent.glob("*.tmp"))
    with h5py.File(path) as handle:
        assert handle["pair_similarity"].fletcher32 and handle["pair_similarity"].chunks[0] == 1
        assert handle.attrs["format_version"] == SIMILARITY_FORMAT_VERSION == 4
        assert handle.attrs["architecture"] == "tiny"


def test_a_flipped_byte_in_a_similarity_file_names_it_and_the_quoted_rebuild_command(tmp_path):
    path = tmp_path / "results dir" / "l2 h4" / "similarity" / "primary.h5"
    written_similarity(path)
    read_pair_similarity(path)  # sound before the flip
    with h5py.File(path) as handle:
        info = handle["pair_similarity"].id.get_chunk_info_by_coord((1, 0, 0, 0, 0, 0))
    offset = info.byte_offset + (info.size - 4) // 2  # inside the data, before the 4-byte checksum
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(SimilarityChecksumError) as error:
        read_pair_similarity(path)
    message = str(error.value)
    assert isinstance(error.value, SimilarityFileError)
    assert f"pair-similarity file {path} is corrupt (checksum mismatch" in message
    rebuild = message.split("`")[1]
    words = shlex.split(rebuild)
    assert words == ["rm", "-f", str(path), "&&", "snakemake", str(path)]


def test_a_missing_similarity_file_names_the_quoted_build_command(tmp_path):
    path = tmp_path / "a b" / "primary.h5"
    with pytest.raises(SimilarityFileError) as error:
        read_pair_similarity(path)
    assert shlex.split(str(error.value).split("`")[1]) == ["snakemake", str(path)]


def test_a_written_file_stores_float32_values_int64_seeds_its_dims_and_json_attrs(tmp_path):
    path = tmp_path / "primary.h5"
    similarity = np.random.default_rng(15).uniform(-1, 1, size=(2, 2, 1, 2, 1, 2))  # float64, as a caller may hold
    # a cache's seed attribute is a numpy integer, which plain json cannot write
    attrs = {"architecture": "tiny", "inputs": {"a.h5": {"seed": np.int64(4)}}}
    write_pair_similarity(path, similarity, np.array([4, 9], dtype=np.int32), attrs=attrs)
    with h5py.File(path, "r") as handle:
        assert handle["pair_similarity"].dtype == np.float32
        assert handle["pair_similarity"].attrs["dims"] == "seed_a,seed_b,layer_a,head_a,layer_b,head_b"
        assert handle.attrs["seeds"].dtype == np.int64 and handle.attrs["seeds"].tolist() == [4, 9]
        assert json.loads(handle.attrs["inputs"]) == {"a.h5": {"seed": "4"}}
    read, seeds = read_pair_similarity(path)
    assert read.dtype == np.float32 and seeds == [4, 9]
    np.testing.assert_array_equal(read, similarity.astype(np.float32))
    with pytest.raises(ValueError, match=r"for 2 seeds; got \(2, 2, 1, 2, 1\)$"):
        write_pair_similarity(tmp_path / "five_axes.h5", similarity[..., 0], [4, 9])


def rebuild(path, rule):
    """The rebuild advice every result-file error ends with, for a path that needs no shell quoting."""
    return f"rebuild it with `rm -f {path} && snakemake {path}` (or `snakemake {path} --forcerun {rule}`)"


class DemoFileError(ValueError):
    """The error a caller of open_result_file asks for."""


def demo_file(path, file_format="demo-format", datasets=("values",), complete=True, version=2):
    with h5py.File(path, "w") as handle:
        for name in datasets:
            handle.create_dataset(name, data=np.zeros(3))
        handle.attrs["format"] = file_format
        handle.attrs["format_version"] = version
        stamp_attribute_digests(handle)
        if complete is not None:
            handle.attrs["complete"] = complete
    return path


def open_demo(path):
    return open_result_file(path, "demo-format", 2, ["values"], "demo", DemoFileError, "demo_rule")


def test_open_result_file_names_the_file_the_problem_and_the_callers_rule(tmp_path):
    with open_demo(demo_file(tmp_path / "good.h5")) as handle:
        assert handle["values"].shape == (3,)
    missing = tmp_path / "missing.h5"
    with pytest.raises(DemoFileError) as error:
        open_demo(missing)
    assert str(error.value) == f"demo file {missing} does not exist; build it with `snakemake {missing}`"
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(b"not an HDF5 file at all")
    with pytest.raises(DemoFileError) as error:
        open_demo(garbage)
    assert str(error.value).startswith(f"demo file {garbage} is not a readable HDF5 file (")
    assert str(error.value).endswith(f"); {rebuild(garbage, 'demo_rule')}")
    for name, options in (
        ("other_format", {"file_format": "other-format"}),
        ("no_values", {"datasets": ("other",)}),  # the right format without the required dataset
    ):
        path = demo_file(tmp_path / f"{name}.h5", **options)
        with pytest.raises(DemoFileError) as error:
            open_demo(path)
        assert str(error.value) == f"{path} is not a headstab demo file; {rebuild(path, 'demo_rule')}"
    for name, complete in (("unlabelled", None), ("interrupted", False)):
        path = demo_file(tmp_path / f"{name}.h5", complete=complete)
        with pytest.raises(DemoFileError) as error:
            open_demo(path)
        assert str(error.value) == f"demo file {path} is incomplete (interrupted write); {rebuild(path, 'demo_rule')}"
    older = demo_file(tmp_path / "older.h5", version=1)
    with pytest.raises(DemoFileError) as error:
        open_demo(older)
    assert str(error.value) == (
        f"demo file {older} has format_version 1; this code reads version 2; {rebuild(older, 'demo_rule')}"
    )


@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda handle: handle.attrs.modify("seeds", np.array([1, 2, 4])), "attribute seeds"),
        (lambda handle: handle.attrs.modify("architecture", "tinx"), "attribute architecture"),
        (lambda handle: handle["pair_similarity"].attrs.modify("dims", "a,b"), "attribute dims of /pair_similarity"),
        (lambda handle: handle.attrs.__delitem__("architecture"), "attribute architecture (removed)"),
        (lambda handle: handle.attrs.create("extra", 1), "attribute extra (not digested)"),
        (lambda handle: handle.attrs.modify("attrs_sha256", "{"), "attribute attrs_sha256 (not a JSON record)"),
    ],
)
def test_an_attribute_changed_after_writing_fails_its_digest_naming_file_attribute_and_rule(tmp_path, edit, named):
    path = tmp_path / "l2_h4" / "similarity" / "primary.h5"
    written_similarity(path)
    with h5py.File(path, "a") as handle:
        edit(handle)
    with pytest.raises(SimilarityFileError) as error:
        read_pair_similarity(path)
    assert str(error.value) == (
        f"pair-similarity file {path}: {named} fails the digest in attribute attrs_sha256 (changed after the file "
        f"was written); {rebuild(path, 'pair_similarity')}"
    )


def test_read_pair_similarity_names_a_foreign_file_a_damaged_read_and_a_shape_that_misses_the_seeds(
    tmp_path, monkeypatch
):
    foreign = demo_file(tmp_path / "foreign.h5")
    with pytest.raises(SimilarityFileError) as error:
        read_pair_similarity(foreign)
    assert (
        str(error.value) == f"{foreign} is not a headstab pair-similarity file; {rebuild(foreign, 'pair_similarity')}"
    )
    mismatched = tmp_path / "mismatched.h5"
    with h5py.File(mismatched, "w") as handle:
        handle.create_dataset("pair_similarity", data=np.ones((2, 2, 1, 1, 1, 1), dtype=np.float32))
        finish_result_file(handle, SIMILARITY_FORMAT, SIMILARITY_FORMAT_VERSION, [1, 2, 3], None)
    with pytest.raises(SimilarityFileError) as error:
        read_pair_similarity(mismatched)
    assert str(error.value) == (
        f"pair-similarity file {mismatched}: shape (2, 2, 1, 1, 1, 1) does not match seeds [1, 2, 3]; "
        f"{rebuild(mismatched, 'pair_similarity')}"
    )
    damaged = tmp_path / "damaged.h5"
    written_similarity(damaged)

    def failing_read(self, key):  # an I/O error of the disk, not HDF5's filter failure
        raise OSError("Can't read data (short read)")

    monkeypatch.setattr(h5py.Dataset, "__getitem__", failing_read)
    with pytest.raises(SimilarityFileError) as error:
        read_pair_similarity(damaged)
    assert not isinstance(error.value, SimilarityChecksumError)
    assert str(error.value) == (
        f"pair-similarity file {damaged} is damaged (Can't read data (short read)); "
        f"{rebuild(damaged, 'pair_similarity')}"
    )


def test_the_null_and_its_partners_round_trip_beside_the_tensor_and_a_file_without_them_reads_none(tmp_path):
    from headstab.similarity.pairs import read_pair_similarity_null

    rng = np.random.default_rng(12)
    similarity = rng.uniform(-1, 1, size=(2, 2, 2, 3, 2, 3)).astype(np.float32)
    null, partners = similarity * np.float32(0.5), np.array([1, 0, 3, 2], dtype=np.int32)
    path = tmp_path / "primary.h5"
    write_pair_similarity(path, similarity, [1, 2], null=null, partners=partners)
    read, seeds = read_pair_similarity(path)
    np.testing.assert_array_equal(read, similarity)
    read_null, read_partners = read_pair_similarity_null(path)
    np.testing.assert_array_equal(read_null, null)
    assert read_partners.dtype == np.int64 and read_partners.tolist() == [1, 0, 3, 2]
    with h5py.File(path, "r") as handle:
        assert handle["pair_similarity_null"].fletcher32 and handle["pair_similarity_null"].chunks[0] == 1
        assert handle["pair_similarity_null"].attrs["dims"] == "seed_a,seed_b,layer_a,head_a,layer_b,head_b"
        assert handle["partners"].dtype == np.int64 and handle["partners"].fletcher32
    write_pair_similarity(path, similarity, [1, 2])
    assert read_pair_similarity_null(path) is None
    with pytest.raises(
        ValueError, match=r"the null must come with its partners and have the shape \(2, 2, 2, 3, 2, 3\)"
    ):
        write_pair_similarity(path, similarity, [1, 2], null=null)
    with pytest.raises(ValueError, match=r"; got \(2, 2, 2, 3, 2, 2\)"):
        write_pair_similarity(path, similarity, [1, 2], null=null[..., :2], partners=partners)


def test_a_null_of_another_shape_or_a_flipped_byte_in_it_names_the_file(tmp_path):
    from headstab.similarity.pairs import read_pair_similarity_null

    path = tmp_path / "primary.h5"
    similarity = np.ones((2, 2, 1, 2, 1, 2), dtype=np.float32)
    with h5py.File(path, "w") as handle:
        handle.create_dataset("pair_similarity", data=similarity)
        handle.create_dataset("pair_similarity_null", data=similarity[:, :, :, :1])
        handle.create_dataset("partners", data=np.array([1, 0]))
        finish_result_file(handle, SIMILARITY_FORMAT, SIMILARITY_FORMAT_VERSION, [1, 2], None)
    with pytest.raises(SimilarityFileError) as error:
        read_pair_similarity_null(path)
    assert str(error.value) == (
        f"pair-similarity file {path}: the null's shape (2, 2, 1, 1, 1, 2) is not the tensor's (2, 2, 1, 2, 1, 2); "
        f"{rebuild(path, 'pair_similarity')}"
    )
    write_pair_similarity(path, similarity, [1, 2], null=similarity * 0.5, partners=np.array([1, 0]))
    with h5py.File(path) as handle:
        info = handle["pair_similarity_null"].id.get_chunk_info_by_coord((1, 0, 0, 0, 0, 0))
    data = bytearray(path.read_bytes())
    data[info.byte_offset + (info.size - 4) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    read_pair_similarity(path)  # the observed tensor is sound
    with pytest.raises(SimilarityChecksumError, match=f"pair-similarity file {path} is corrupt"):
        read_pair_similarity_null(path)
    write_pair_similarity(path, similarity, [1, 2], null=similarity * 0.5, partners=np.arange(4000)[::-1])
    with h5py.File(path) as handle:
        info = handle["partners"].id.get_chunk_info(0)
    data = bytearray(path.read_bytes())
    data[info.byte_offset + (info.size - 4) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(SimilarityChecksumError, match=f"pair-similarity file {path} is corrupt"):
        read_pair_similarity_null(path)
