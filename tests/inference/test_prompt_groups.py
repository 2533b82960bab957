"""Prompt groups, the null's prompt pairing, and per-group similarity against float64 loops."""

from __future__ import annotations

import numpy as np
import pytest
from bridges import write_refit_caches
from tolerances import reduction_atol

from headstab.activations.packing import lower_triangle_offsets, n_lower_entries
from headstab.inference.prompt_groups import (
    GroupedSimilarity,
    GroupedSimilarityError,
    grouped_similarity_from_caches,
    layer_group_similarity,
    null_partners,
    prompt_groups,
    read_grouped_similarity,
    write_grouped_similarity,
)


def random_block(rng, n_rows, lengths):
    """[row, entry]: each row's packed lower triangles of random causal softmax patterns (rows sum to 1)."""
    segments = []
    for length in lengths:
        scores = np.where(np.tri(length, dtype=bool), rng.normal(scale=2.0, size=(n_rows, length, length)), -np.inf)
        pattern = np.exp(scores - scores.max(axis=-1, keepdims=True))
        pattern /= pattern.sum(axis=-1, keepdims=True)
        segments.append(pattern[:, *np.tril_indices(length)])
    return np.ascontiguousarray(np.concatenate(segments, axis=1), dtype=np.float32)


def cosine(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return x @ y / np.sqrt((x @ x) * (y @ y))


def test_groups_partition_the_prompts_in_near_equal_sizes_and_repeat_with_the_seed():
    groups = prompt_groups(23, 5, seed=7)
    assert sorted(np.concatenate(groups).tolist()) == list(range(23))
    assert sorted(len(g) for g in groups) == [4, 4, 5, 5, 5]
    assert all(np.array_equal(a, b) for a, b in zip(groups, prompt_groups(23, 5, seed=7)))
    assert not all(np.array_equal(a, b) for a, b in zip(groups, prompt_groups(23, 5, seed=8)))
    assert [len(g) for g in prompt_groups(3, 20, seed=0)] == [1, 1, 1]
    with pytest.raises(ValueError, match="statistics.prompt_groups"):
        prompt_groups(3, 0, seed=0)


def test_null_partners_pair_equal_lengths_once_each_and_lone_lengths_with_the_nearest():
    lengths = np.array([5, 9, 5, 7, 12, 9, 5])
    partners = null_partners(lengths, seed=3)
    assert np.all(partners != np.arange(lengths.size))
    fives = np.flatnonzero(lengths == 5)
    assert sorted(partners[fives].tolist()) == fives.tolist()  # a cycle within the run: each once
    assert sorted(partners[lengths == 9].tolist()) == np.flatnonzero(lengths == 9).tolist()
    assert lengths[partners[3]] in (5, 9)  # 7: both 2 away, the shorter wins
    assert lengths[partners[3]] == 5
    assert lengths[partners[4]] == 9  # 12: the nearest other length
    with pytest.raises(ValueError, match="at least 2 prompts"):
        null_partners([4], seed=0)


def test_group_similarity_equals_float64_loops_observed_and_truncated_null():
    rng = np.random.default_rng(0)
    n_seeds, n_heads, lengths = 3, 2, np.array([4, 6, 4, 3, 6, 5])
    block = random_block(rng, n_seeds * n_heads, lengths)
    offsets = lower_triangle_offsets(lengths)
    groups, partners = prompt_groups(lengths.size, 3, seed=1), null_partners(lengths, seed=1)
    observed, null = layer_group_similarity(block, offsets, lengths, groups, partners, n_seeds)
    segment = lambda row, p, keep: block[row, offsets[p] : offsets[p] + n_lower_entries(keep)]  # noqa: E731
    atol = reduction_atol(np.float32, int(n_lower_entries(lengths.max())))
    for g, prompts in enumerate(groups):
        for a, b, i, j in np.ndindex(n_seeds, n_seeds, n_heads, n_heads):
            ra, rb = a * n_heads + i, b * n_heads + j
            same = np.mean([cosine(segment(ra, p, lengths[p]), segment(rb, p, lengths[p])) for p in prompts])
            keep = [min(lengths[p], lengths[partners[p]]) for p in prompts]
            cross = np.mean([cosine(segment(ra, p, k), segment(rb, partners[p], k)) for p, k in zip(prompts, keep)])
            assert observed[g, a, b, i, j] == pytest.approx(same, abs=atol)
            assert null[g, a, b, i, j] == pytest.approx(cross, abs=atol)


def test_identical_refits_are_one_on_the_matching_heads_and_well_below_one_under_the_null():
    rng = np.random.default_rng(1)
    lengths = np.full(8, 6)
    one = random_block(rng, 4, lengths)
    block = np.concatenate([one, one, one])  # three refits with the same four heads
    offsets = lower_triangle_offsets(lengths)
    observed, null = layer_group_similarity(
        block, offsets, lengths, prompt_groups(8, 4, 0), null_partners(lengths, 0), 3
    )
    atol = reduction_atol(np.float32, n_lower_entries(6))
    np.testing.assert_allclose(np.diagonal(observed, axis1=-2, axis2=-1), 1.0, atol=atol)
    assert null.max(axis=-1).mean() < 0.9


def test_grouped_file_round_trips_and_a_flipped_byte_names_the_file(tmp_path):
    rng = np.random.default_rng(2)
    values = rng.random((3, 2, 2, 1, 2, 2)).astype(np.float32)
    grouped = GroupedSimilarity(
        values, values / 2, np.array([2, 2, 1]), [4, 9], np.array([1, 0, 3, 2, 3]), np.array([3, 3, 5, 5, 4])
    )
    path = tmp_path / "primary.groups.h5"
    write_grouped_similarity(path, grouped, attrs={"promptset": "primary"})
    back = read_grouped_similarity(path)
    assert back.seeds == [4, 9]
    np.testing.assert_array_equal(back.null, values / 2)
    expected = (2 * values[0] + 2 * values[1] + values[2]) / 5
    np.testing.assert_allclose(back.mean(), expected, rtol=2 * np.finfo(np.float32).eps)
    raw = bytearray(path.read_bytes())
    offset = raw.find(np.ascontiguousarray(values[1]).tobytes())
    raw[offset + 3] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(GroupedSimilarityError, match=f"{path}.*(corrupt|damaged).*rm -f"):
        read_grouped_similarity(path)
    with pytest.raises(GroupedSimilarityError, match="does not exist"):
        read_grouped_similarity(tmp_path / "missing.h5")


def test_grouped_similarity_from_written_caches_averages_to_the_pair_similarity(tmp_path):
    from headstab.similarity import pair_similarity_from_caches

    paths = write_refit_caches(tmp_path)
    groups, partners = prompt_groups(7, 3, seed=0), null_partners(np.array([7, 3, 9, 5, 2, 8, 4]), seed=0)
    observed, null = grouped_similarity_from_caches(paths, "primary", groups, partners, progress=False)
    sizes = np.array([len(g) for g in groups])
    mean = np.tensordot(sizes / sizes.sum(), observed.astype(np.float64), axes=1)
    same_layer = pair_similarity_from_caches(paths, "primary", scope="same_layer", progress=False)
    np.testing.assert_allclose(mean, same_layer, atol=reduction_atol(np.float32, n_lower_entries(9)))
    assert null.shape == observed.shape
    with pytest.raises(ValueError, match="partition"):
        grouped_similarity_from_caches(paths, "primary", groups[:2], partners, progress=False)
