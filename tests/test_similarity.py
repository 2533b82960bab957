"""headstab.similarity, the engine the workflow runs (paper Eq. 1-2), against the oracles of
tests/reference.py; and the oracles against the paper's plain loop."""

from __future__ import annotations

import shlex

import h5py
import numpy as np
import pytest
from bridges import MIXED_LENGTHS, write_refit_caches
from reference import (
    anchor_pair_similarity,
    causal_length_mask,
    causal_pattern_features,
    loop_pair_similarity,
    pack_lower_triangle,
    pair_similarity,
    same_layer_pair_similarity,
)
from tolerances import EXTRA_ULPS, eps, reduction_atol, reduction_rtol

from headstab.activations.packing import lower_triangle_offsets
from headstab.activations.reader import open_cache
from headstab.similarity import (
    SIMILARITY_FORMAT_VERSION,
    GramAccumulator,
    SimilarityChecksumError,
    SimilarityFileError,
    gram_to_pair_similarity,
    normalize_lower_features,
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
    with pytest.raises(ValueError, match=r"n_prompts_total \(2\) must be >="):
        normalize_lower_features(rows, offsets, 2)


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
    import headstab.similarity as similarity

    monkeypatch.setattr(similarity, "GRAM_BLOCK_ROWS", 3)  # 13 rows -> halves of 6 and 7 -> halves of 3 and 3, 3 and 4
    rows = np.random.default_rng(10).normal(size=(13, 50)).astype(np.float32)
    accumulator = GramAccumulator(13)
    accumulator.add(rows)
    np.testing.assert_array_equal(accumulator.gram, accumulator.gram.T)
    bound = np.abs(rows.astype(np.float64)) @ np.abs(rows.T.astype(np.float64))  # sum of |terms| per entry
    error = np.abs(accumulator.gram - rows.astype(np.float64) @ rows.T.astype(np.float64))
    assert np.all(error <= (50 + EXTRA_ULPS) * eps(np.float32) * bound)


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
    with pytest.raises(KeyError, match="prompt set 'nope' is not in the caches"):
        pair_similarity_from_caches(refit_caches, "nope", progress=False)


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
        assert handle.attrs["format_version"] == SIMILARITY_FORMAT_VERSION == 2
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
