"""Prompt groups, the null's prompt pairing, and per-group similarity against float64 loops."""

from __future__ import annotations

import dataclasses
import re
import warnings

import h5py
import numpy as np
import pytest
from helpers.bridges import write_refit_caches
from helpers.tolerances import reduction_atol

from headstab.activations.packing import lower_triangle_offsets, n_lower_entries
from headstab.activations.reader import open_cache
from headstab.similarity.prompt_groups import (
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
    from headstab.similarity.pairs import pair_similarity_from_caches

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


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    return write_refit_caches(tmp_path_factory.mktemp("caches"), seeds=(1, 2))


def test_one_prompt_makes_one_group_and_bad_counts_name_their_value():
    assert [g.tolist() for g in prompt_groups(1, 3, seed=0)] == [[0]]
    assert [g.tolist() for g in prompt_groups(4, 1, seed=5)] == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="at least one prompt to group; got 0"):
        prompt_groups(0, 3, seed=0)
    with pytest.raises(ValueError, match="'statistics.prompt_groups' must be >= 1; got 0"):
        prompt_groups(3, 0, seed=0)


def test_null_partners_of_lone_lengths_take_the_nearer_neighbour_either_side():
    assert null_partners([4, 7], seed=0).tolist() == [1, 0]  # two prompts are enough
    lengths = np.array([3, 4, 9, 10, 10])  # 3 and 4 alone: 3's nearest is 4, 4's is 3; 9's is a 10
    partners = null_partners(lengths, seed=1)
    assert partners[:2].tolist() == [1, 0] and lengths[partners[2]] == 10
    assert null_partners([2, 6, 7, 7], seed=2)[1] in (2, 3)  # 6: 7 is nearer than 2
    assert null_partners([1, 5, 5, 8], seed=0)[0] in (1, 2)  # the shortest takes the next length up
    with pytest.raises(ValueError, match="at least 2 prompts; got 1"):
        null_partners([4], seed=0)


def test_null_partners_of_a_long_run_repeat_with_the_seed_only():
    lengths = np.full(12, 5)
    first = null_partners(lengths, seed=4)
    assert np.array_equal(first, null_partners(lengths, seed=4))
    assert not np.array_equal(first, null_partners(lengths, seed=5))
    assert sorted(first.tolist()) == list(range(12)) and np.all(first != np.arange(12))


def test_grouped_similarity_is_float32_and_the_groups_and_partners_are_checked(caches):
    with open_cache(caches[0]) as cache:
        lengths = cache.lengths("primary")
    n = lengths.size
    groups, partners = prompt_groups(n, 2, seed=0), null_partners(lengths, seed=0)
    observed, null = grouped_similarity_from_caches(caches, "primary", groups, partners, progress=False)
    assert observed.dtype == null.dtype == np.float32
    block_observed, block_null = layer_group_similarity(
        np.ones((2, int(lower_triangle_offsets(lengths)[-1])), np.float32),
        lower_triangle_offsets(lengths), lengths, groups, partners, 1,
    )  # fmt: skip
    assert block_observed.dtype == block_null.dtype == np.float32
    bad_groups = {
        "got 0 indices": [],
        f"got {n} indices": [np.arange(n - 1), np.array([0])],  # n indices, one twice
        f"got {n - 1} indices": [np.arange(n - 1)],
    }
    for message, bad in bad_groups.items():
        with pytest.raises(ValueError, match=rf"groups must partition the {n} prompts; {message}"):
            grouped_similarity_from_caches(caches, "primary", bad, partners, progress=False)
    for bad in (partners[:-1], np.where(np.arange(n) == 2, 2, partners), np.where(np.arange(n) == 1, -1, partners)):
        with pytest.raises(ValueError, match=rf"partners must give each of the {n} prompts another prompt; got \["):
            grouped_similarity_from_caches(caches, "primary", groups, bad, progress=False)
    with pytest.raises(KeyError, match=r"prompt set 'nope' is not in the caches \(primary, short\)"):
        grouped_similarity_from_caches(caches, "nope", groups, partners, progress=False)


def test_grouped_similarity_labels_its_progress_bar_and_shows_it_by_default(caches, tqdm_bars):
    bars = tqdm_bars
    with open_cache(caches[0]) as cache:
        lengths = cache.lengths("short")
    groups, partners = prompt_groups(3, 1, seed=0), null_partners(lengths, seed=0)
    grouped_similarity_from_caches(caches, "short", groups, partners)
    grouped_similarity_from_caches(caches, "short", groups, partners, progress=False)
    assert bars == [
        {"desc": "prompt groups short", "unit": "layer", "disable": False},
        {"desc": "prompt groups short", "unit": "layer", "disable": True},
    ]


def small_grouped():
    values = np.arange(3 * 2 * 2 * 1 * 2 * 2, dtype=np.float32).reshape(3, 2, 2, 1, 2, 2) / 24
    sizes, partners, lengths = np.array([2, 2, 1], np.int32), np.array([1, 0, 3, 2, 3]), np.array([3, 3, 5, 5, 4])
    return GroupedSimilarity(values, values / 2, sizes, [4, 9], partners, lengths)


def test_grouped_file_layout_one_checksummed_chunk_per_group_int64_indices_and_the_jobs_attrs(tmp_path):
    path = tmp_path / "primary.groups.h5"
    write_grouped_similarity(path, small_grouped(), attrs={"promptset": "primary", "n_groups": 3})
    with h5py.File(path, "r") as handle:
        for name in ("observed", "null"):
            assert handle[name].chunks == (1, 2, 2, 1, 2, 2) and handle[name].fletcher32
            assert handle[name].attrs["dims"] == "group,seed_a,seed_b,layer,head_a,head_b"
        for name in ("group_sizes", "partners", "lengths"):
            assert handle[name].dtype == np.int64 and handle[name].fletcher32, name
        assert (handle.attrs["promptset"], handle.attrs["n_groups"]) == ("primary", 3)
    np.testing.assert_array_equal(read_grouped_similarity(path).group_sizes, [2, 2, 1])


def test_unreadable_grouped_files_name_the_file_the_problem_and_the_rule(tmp_path):
    hint = r"rebuild it with `rm -f {0} && snakemake {0}` \(or `snakemake {0} --forcerun prompt_group_similarity`\)"
    path = tmp_path / "primary.groups.h5"
    write_grouped_similarity(path, small_grouped())
    raw = bytearray(path.read_bytes())
    raw[raw.find(np.ascontiguousarray(small_grouped().observed[1]).tobytes()) + 3] ^= 0xFF
    path.write_bytes(bytes(raw))
    expected = rf"^prompt-group similarity file {path} is corrupt \(checksum mismatch\) \(.*\); {hint.format(path)}$"
    with pytest.raises(GroupedSimilarityError, match=expected):
        read_grouped_similarity(path)
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as handle:
        handle.attrs["format"] = "something else"
    with pytest.raises(
        GroupedSimilarityError, match=rf"^{other} is not a headstab prompt-group similarity file; {hint.format(other)}$"
    ):
        read_grouped_similarity(other)
    grouped = small_grouped()
    for name, observed, null in (
        ("seeds", grouped.observed[:, :1, :1], grouped.null[:, :1, :1]),  # one refit's blocks, two seeds
        ("null", grouped.observed, grouped.null[:, :, :, :, :1]),  # null of another shape
    ):
        bad = tmp_path / f"{name}.h5"
        write_grouped_similarity(
            bad, GroupedSimilarity(observed, null, grouped.group_sizes, [4, 9], grouped.partners, grouped.lengths)
        )
        with pytest.raises(
            GroupedSimilarityError, match=rf"^{bad}: shapes .* do not match its groups and seeds; {hint.format(bad)}$"
        ):
            read_grouped_similarity(bad)


def test_a_read_error_other_than_a_checksum_is_reported_as_damaged(tmp_path, monkeypatch):
    path = tmp_path / "primary.groups.h5"
    write_grouped_similarity(path, small_grouped())

    def failing_read(self, key):  # an I/O error of the disk, not HDF5's filter failure
        raise OSError("Can't read data (short read)")

    monkeypatch.setattr(h5py.Dataset, "__getitem__", failing_read)
    hint = rf"`snakemake {path} --forcerun prompt_group_similarity`\)$"
    with pytest.raises(
        GroupedSimilarityError,
        match=rf"^prompt-group similarity file {path} is damaged \(Can't read data \(short read\)\); rebuild it .*{hint}",
    ):
        read_grouped_similarity(path)


def test_a_damaged_grouped_file_names_the_rule_that_wrote_it_trained_or_snapshot(tmp_path):
    for where, rule in (
        ("l2_h4/similarity", "prompt_group_similarity"),
        ("l2_h4/snapshots/step0/similarity", "snapshot_prompt_group_similarity"),
    ):
        path = tmp_path / where / "primary.groups.h5"
        write_grouped_similarity(path, small_grouped())
        with h5py.File(path, "a") as handle:
            handle.attrs.modify("complete", False)  # as a killed writer leaves it
        with pytest.raises(GroupedSimilarityError) as error:
            read_grouped_similarity(path)
        assert str(error.value).endswith(f"(or `snakemake {path} --forcerun {rule}`)")


def test_a_grouped_file_with_a_changed_attribute_names_it_and_the_rule_that_wrote_the_file(tmp_path):
    for where, rule in (
        ("l2_h4/similarity", "prompt_group_similarity"),
        ("l2_h4/snapshots/step0/similarity", "snapshot_prompt_group_similarity"),
    ):
        path = tmp_path / where / "primary.groups.h5"
        write_grouped_similarity(path, small_grouped(), attrs={"promptset": "primary", "seed": 1})
        with h5py.File(path, "a") as handle:
            handle.attrs.modify("seed", 3)
        with pytest.raises(GroupedSimilarityError) as error:
            read_grouped_similarity(path)
        assert str(error.value) == (
            f"prompt-group similarity file {path}: attribute seed fails the digest in attribute attrs_sha256 (changed "
            f"after the file was written); rebuild it with `rm -f {path} && snakemake {path}` (or `snakemake {path} "
            f"--forcerun {rule}`)"
        )


def _content_head(tokens, scale=3.0):
    """[T, T]: each query attends to the earlier positions holding its own token (a content rule)."""
    scores = np.where(np.tri(tokens.size, dtype=bool), scale * (tokens[None, :] == tokens[:, None]), -np.inf)
    pattern = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return pattern / pattern.sum(axis=-1, keepdims=True)


def test_content_variant_sees_a_shared_content_rule_and_not_a_shared_position_rule():
    from headstab.sharpness import content_remainders

    rng = np.random.default_rng(4)
    lengths = np.array([9, 12, 9, 12, 10, 10, 12, 9])
    previous = np.eye(12, k=-1) * 0.6  # previous token and BOS: every row sums to 1
    previous[:, 0] += 0.4
    previous[0, 0] = 1.0
    segments = []
    for length in lengths:
        tokens = rng.integers(0, 3, size=length)
        content = _content_head(tokens)
        heads = [previous[:length, :length], content]  # head 0: position alone; head 1: a content rule
        segments.append(np.stack([h[np.tril_indices(length)] for h in heads * 2]))  # two refits, same heads
    block = np.ascontiguousarray(np.concatenate(segments, axis=1), dtype=np.float32)
    offsets = lower_triangle_offsets(lengths)
    groups, partners = prompt_groups(lengths.size, 2, seed=0), null_partners(lengths, seed=0)
    raw, raw_null = layer_group_similarity(block, offsets, lengths, groups, partners, 2)
    own, partner = content_remainders(block, lengths, offsets, partners)
    content, content_null = layer_group_similarity(own, offsets, lengths, groups, partners, 2, candidates=partner)
    atol = reduction_atol(np.float32, n_lower_entries(12))
    sizes = np.array([len(g) for g in groups])
    mean = lambda x: np.tensordot(sizes / sizes.sum(), x.astype(np.float64), axes=1)[0, 1]  # noqa: E731
    # The positional head matches itself perfectly raw and under the null: its agreement is position only.
    assert mean(raw)[0, 0] == pytest.approx(1.0, abs=atol) and mean(raw_null)[0, 0] == pytest.approx(1.0, abs=atol)
    assert mean(content)[0, 0] == 0.0 and mean(content_null)[0, 0] == 0.0  # nothing left beyond position
    assert mean(content)[1, 1] == pytest.approx(1.0, abs=atol)  # the content rule: identical remainders
    assert mean(content_null)[1, 1] < 0.5  # on another prompt the content rule attends elsewhere


def test_grouped_arrays_add_entropy_and_the_content_variant_to_the_same_pass(caches):
    from headstab.sharpness import normalised_row_entropy
    from headstab.similarity.prompt_groups import grouped_arrays_from_caches

    with open_cache(caches[0]) as cache:
        lengths = cache.lengths("primary")
    groups, partners = prompt_groups(lengths.size, 3, seed=0), null_partners(lengths, seed=0)
    arrays = grouped_arrays_from_caches(caches, "primary", groups, partners, progress=False, content=True)
    observed, null = grouped_similarity_from_caches(caches, "primary", groups, partners, progress=False)
    np.testing.assert_array_equal(arrays["observed"], observed)
    np.testing.assert_array_equal(arrays["null"], null)
    assert arrays["content_observed"].shape == arrays["content_null"].shape == observed.shape
    assert arrays["entropy"].shape == (2, 2, 3)
    for refit, path in enumerate(caches):
        with open_cache(path) as cache:
            patterns = cache.hook_pattern("primary")  # [layer, prompt, head, query, key]
        per_prompt = [normalised_row_entropy(patterns[:, p], length) for p, length in enumerate(lengths)]
        expected = np.nanmean(np.stack(per_prompt), axis=0)  # [layer, head]
        np.testing.assert_allclose(arrays["entropy"][refit], expected, atol=reduction_atol(np.float32, 64, 4.0))
    assert "content_observed" not in grouped_arrays_from_caches(caches, "short", [np.arange(3)], np.array([1, 0, 0]))


def test_entropy_and_content_round_trip_and_an_old_file_asks_for_a_rebuild(tmp_path):
    grouped = small_grouped()
    full = dataclasses.replace(
        grouped, entropy=np.full((2, 1, 2), 0.5), content_observed=grouped.observed / 3, content_null=grouped.null / 3
    )
    path = tmp_path / "primary.groups.h5"
    write_grouped_similarity(path, full)
    back = read_grouped_similarity(path)
    assert back.has_content and not small_grouped().has_content
    np.testing.assert_array_equal(back.entropy, full.entropy)
    np.testing.assert_array_equal(back.content_null, full.content_null)
    with h5py.File(path, "r+") as handle:
        handle.attrs["format_version"] = 1
    with pytest.raises(GroupedSimilarityError, match=r"has format_version 1; this code reads version 4; rebuild"):
        read_grouped_similarity(path)


def _orthogonal_content_block(n_prompts=16, length=8, delta=0.02):
    """Two identical refits of one head: a fixed positional pattern plus, on prompt k, +delta and -delta on a
    pair of entries of one row that no other prompt moves (content vectors orthogonal across prompts)."""
    base = np.tril(np.ones((length, length))) / np.arange(1, length + 1)[:, None]
    pairs = [(row, 2 * k, 2 * k + 1) for row in range(1, length) for k in range((row + 1) // 2)]
    segments = []
    for row, first, second in pairs[:n_prompts]:
        pattern = base.copy()
        pattern[row, first] += delta
        pattern[row, second] -= delta
        segments.append(np.stack([pattern[np.tril_indices(length)]] * 2))
    lengths = np.full(n_prompts, length)
    return np.ascontiguousarray(np.concatenate(segments, axis=1), dtype=np.float32), lengths


def test_the_content_null_of_orthogonal_content_is_zero_where_a_template_with_the_prompts_is_not():
    """The old template (every prompt) puts the null at -1/(n - 1); one template left out of both sides at +1/(n - 1);
    templates from disjoint halves, each without the prompt and its partner, at 0."""
    from headstab.sharpness import content_remainders, position_template

    block, lengths = _orthogonal_content_block()
    n, offsets = lengths.size, lower_triangle_offsets(lengths)
    groups, partners = prompt_groups(n, 4, seed=0), null_partners(lengths, seed=0)
    sizes = np.array([len(g) for g in groups])
    mean = lambda x: float(np.tensordot(sizes / sizes.sum(), x.astype(np.float64), axes=1)[0, 1, 0, 0])  # noqa: E731
    atol = reduction_atol(np.float32, n_lower_entries(8), 4.0)
    full, _ = position_template(block, lengths, offsets)
    old = (block - np.tile(full[:, : n_lower_entries(8)], n)).astype(np.float32)
    old_observed, old_null = layer_group_similarity(old, offsets, lengths, groups, partners, 2)
    assert mean(old_observed) == pytest.approx(1.0, abs=atol)
    assert mean(old_null) == pytest.approx(-1 / (n - 1), abs=atol)  # the bias of the template holding both prompts
    shared, partner_shared = np.empty_like(block), np.zeros_like(block)
    for p, q in enumerate(partners):  # one template without p and q for both sides
        template = np.mean([block[:, offsets[k] : offsets[k + 1]] for k in np.setdiff1d(np.arange(n), [p, q])], axis=0)
        shared[:, offsets[p] : offsets[p + 1]] = block[:, offsets[p] : offsets[p + 1]] - template
        partner_shared[:, offsets[p] : offsets[p + 1]] = block[:, offsets[q] : offsets[q + 1]] - template
    shared_null = layer_group_similarity(shared, offsets, lengths, groups, partners, 2, candidates=partner_shared)[1]
    assert mean(shared_null) == pytest.approx(1 / (n - 1), abs=atol)  # one template for both: its error is shared
    own, partner = content_remainders(block, lengths, offsets, partners)
    observed, null = layer_group_similarity(own, offsets, lengths, groups, partners, 2, candidates=partner)
    assert mean(observed) == pytest.approx(1.0, abs=atol)
    assert mean(null) == pytest.approx(0.0, abs=atol)


def test_the_content_null_compares_the_anchor_remainder_with_the_partner_remainder_float64_loop():
    from headstab.sharpness import content_remainders

    rng = np.random.default_rng(5)
    n_seeds, n_heads, lengths = 2, 2, np.array([5, 7, 5, 4, 7, 6, 5, 4])
    block = random_block(rng, n_seeds * n_heads, lengths)
    offsets = lower_triangle_offsets(lengths)
    groups, partners = prompt_groups(lengths.size, 2, seed=3), null_partners(lengths, seed=3)
    own, partner = content_remainders(block, lengths, offsets, partners)
    observed, null = layer_group_similarity(own, offsets, lengths, groups, partners, n_seeds, candidates=partner)
    atol = reduction_atol(np.float32, n_lower_entries(7), 4.0)
    for g, prompts in enumerate(groups):
        for a, b, i, j in np.ndindex(n_seeds, n_seeds, n_heads, n_heads):
            ra, rb = a * n_heads + i, b * n_heads + j
            width = lambda p: n_lower_entries(min(lengths[p], lengths[partners[p]]))  # noqa: E731
            same = np.mean(
                [cosine(own[ra, offsets[p] : offsets[p + 1]], own[rb, offsets[p] : offsets[p + 1]]) for p in prompts]
            )
            cross = np.mean(
                [
                    cosine(own[ra, offsets[p] : offsets[p] + width(p)], partner[rb, offsets[p] : offsets[p] + width(p)])
                    for p in prompts
                ]
            )
            assert observed[g, a, b, i, j] == pytest.approx(same, abs=atol)
            assert null[g, a, b, i, j] == pytest.approx(cross, abs=atol)


def test_the_content_share_of_every_head_is_its_remainders_norm_over_its_patterns_mean_over_prompts(caches):
    from headstab.sharpness import content_remainders
    from headstab.similarity.prompt_groups import grouped_arrays_from_caches

    with open_cache(caches[0]) as cache:
        lengths, offsets = cache.lengths("primary"), cache.pattern_offsets("primary")
    groups, partners = prompt_groups(lengths.size, 3, seed=0), null_partners(lengths, seed=0)
    arrays = grouped_arrays_from_caches(caches, "primary", groups, partners, progress=False, content=True)
    assert arrays["content_share"].shape == arrays["entropy"].shape
    assert "content_share" not in grouped_arrays_from_caches(caches, "primary", groups, partners, progress=False)
    for refit, path in enumerate(caches):
        with open_cache(path) as cache:
            for layer in range(2):
                block = cache.hook_pattern_lower("primary", layer=layer)
                own, _ = content_remainders(block, lengths, offsets, partners)
                norm = lambda x, h, p: np.linalg.norm(x[h, offsets[p] : offsets[p + 1]].astype(np.float64))  # noqa: E731
                expected = [
                    np.mean([norm(own, h, p) / norm(block, h, p) for p in range(lengths.size)]) for h in range(3)
                ]
                np.testing.assert_allclose(
                    arrays["content_share"][refit, layer], expected, atol=reduction_atol(np.float32, 64, 4.0)
                )


def test_the_content_share_round_trips_beside_the_entropy_and_a_wrong_shape_asks_for_a_rebuild(tmp_path):
    share = np.array([[[0.25, 0.5]], [[0.125, 1.0]]])
    grouped = dataclasses.replace(small_grouped(), entropy=np.full((2, 1, 2), 0.5), content_share=share)
    path = tmp_path / "primary.groups.h5"
    write_grouped_similarity(path, grouped)
    with h5py.File(path, "r") as handle:
        assert handle["content_share"].attrs["dims"] == "seed,layer,head" and handle["content_share"].fletcher32
    np.testing.assert_array_equal(read_grouped_similarity(path).content_share, share)
    write_grouped_similarity(path, dataclasses.replace(grouped, content_share=share[:, :, :1]))
    with pytest.raises(GroupedSimilarityError, match=r"do not match its groups and seeds; rebuild"):
        read_grouped_similarity(path)


def test_partners_must_be_other_prompts_of_the_set_and_the_message_names_them():
    from headstab.similarity.prompt_groups import check_partners

    check_partners(np.array([1, 2, 0]), 3)
    for partners in ([1, 3, 0], [1, 0, 2], [1, -1, 0], [1, 0]):
        with pytest.raises(ValueError, match=r"partners must give each of the 3 prompts another prompt; got \["):
            check_partners(np.array(partners), 3)


def test_prompt_features_are_the_gathered_segments_normalised_to_the_last_bit():
    from headstab.similarity.pairs import normalize_lower_features
    from headstab.similarity.prompt_groups import prompt_features

    rng = np.random.default_rng(6)
    lengths = np.array([5, 3, 6, 4, 6])
    block, offsets = random_block(rng, 4, lengths), lower_triangle_offsets(lengths)
    prompts, keep = np.array([4, 0, 2, 2]), np.array([6, 3, 5, 6])
    widths = [n_lower_entries(k) for k in keep]
    columns = np.concatenate([np.arange(offsets[p], offsets[p] + w) for p, w in zip(prompts, widths)])
    expected = normalize_lower_features(np.ascontiguousarray(block[:, columns]), np.r_[0, np.cumsum(widths)], 4)
    np.testing.assert_array_equal(prompt_features(block, offsets, prompts, lengths, keep), expected)
    full = prompt_features(block, offsets, np.arange(5), lengths)
    assert full.shape == block.shape and full.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(full[:, offsets[1] : offsets[2]], axis=1), 1 / np.sqrt(5), rtol=1e-6)


def test_grouped_arrays_show_their_progress_bar_by_default(caches, tqdm_bars):
    from headstab.similarity.prompt_groups import grouped_arrays_from_caches

    grouped_arrays_from_caches(caches, "short", [np.arange(3)], np.array([1, 0, 0]))
    assert tqdm_bars == [{"desc": "prompt groups short", "unit": "layer", "disable": False}]


def test_the_content_arrays_of_the_caches_are_those_of_each_layers_block(caches):
    from headstab.sharpness import content_remainders
    from headstab.similarity.prompt_groups import grouped_arrays_from_caches

    with open_cache(caches[0]) as cache:
        lengths, offsets = cache.lengths("primary"), cache.pattern_offsets("primary")
    groups, partners = prompt_groups(lengths.size, 2, seed=1), null_partners(lengths, seed=1)
    arrays = grouped_arrays_from_caches(caches, "primary", groups, partners, progress=False, content=True)
    for layer in range(arrays["observed"].shape[3]):
        blocks = []
        for path in caches:
            with open_cache(path) as cache:
                blocks.append(cache.hook_pattern_lower("primary", layer=layer))
        block = np.ascontiguousarray(np.concatenate(blocks))  # [seed * head, entry]
        own, partner = content_remainders(block, lengths, offsets, partners)
        observed, null = layer_group_similarity(own, offsets, lengths, groups, partners, 2, candidates=partner)
        np.testing.assert_array_equal(arrays["content_observed"][:, :, :, layer], observed)
        # the partner's own remainder leaves out another prompt pair from its template: not the null's candidate
        np.testing.assert_array_equal(arrays["content_null"][:, :, :, layer], null)


def test_the_entropy_of_one_token_prompts_is_nan_without_a_warning(caches):
    from headstab.similarity.prompt_groups import _layer_arrays

    lengths = np.array([1, 1, 1])
    offsets = lower_triangle_offsets(lengths)
    block = np.ones((2, 3), np.float32)  # 2 refits of one head, three one-entry patterns
    out = {name: np.zeros((1, 2, 2, 1, 1, 1), np.float32) for name in ("observed", "null")}
    out["entropy"] = np.zeros((2, 1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _layer_arrays(out, 0, block, offsets, lengths, [np.arange(3)], np.array([1, 2, 0]), 2, False)
    assert np.isnan(out["entropy"]).all()
    np.testing.assert_allclose(out["observed"], 1.0, rtol=0, atol=reduction_atol(np.float32, 3))


def test_null_partners_follow_the_seeds_permutation_within_each_run():
    """Runs of equal lengths in the order the seeded permutation visits them; each partner is the next of its run."""
    lengths = np.random.default_rng(0).integers(3, 6, size=200)  # three runs of about 67: a sort of size > 16
    partners = null_partners(lengths, seed=9)
    visited = np.random.default_rng(9).permutation(lengths.size)
    for length in (3, 4, 5):
        run = visited[lengths[visited] == length]
        np.testing.assert_array_equal(partners[run], np.roll(run, -1))


def test_every_array_given_is_written_in_float64_or_as_it_is(tmp_path):
    grouped = small_grouped()
    only_null = dataclasses.replace(grouped, content_null=grouped.null / 3, entropy=np.full((2, 1, 2), 0.5, np.float32))
    path = tmp_path / "primary.groups.h5"
    write_grouped_similarity(path, only_null)
    back = read_grouped_similarity(path)
    np.testing.assert_array_equal(back.content_null, only_null.content_null)  # written past a missing one
    assert back.content_observed is None and not back.has_content
    assert back.entropy.dtype == np.float64  # float64 [seed, layer, head] whatever it was given in


def _pair_tensor(rng, n_seeds=2, n_layers=3, n_heads=2):
    """[seed_a, seed_b, layer_a, head_a, layer_b, head_b] and its same-layer best matches by loops."""
    similarity = rng.uniform(0.1, 0.9, size=(n_seeds, n_seeds, n_layers, n_heads, n_layers, n_heads))
    similarity = similarity.astype(np.float32)
    best = np.empty((n_seeds, n_seeds, n_layers, n_heads))
    for a, b, layer, head in np.ndindex(best.shape):
        best[a, b, layer, head] = similarity[a, b, layer, head, layer].max()
    return similarity, best


def test_the_grouped_best_matches_must_be_the_pair_tensors_within_the_rounding_of_the_longest_prompt():
    from headstab.similarity.prompt_groups import check_matches_pair_tensor

    similarity, best = _pair_tensor(np.random.default_rng(2))
    lengths = np.array([3, 5, 4])  # the longest prompt: 15 lower entries
    tolerance = 16 * np.finfo(np.float32).eps * (np.sqrt(15) + 4)
    check_matches_pair_tensor(best, similarity, lengths, "primary")
    check_matches_pair_tensor(best + 0.99 * tolerance, similarity, lengths, "primary")
    off = best.copy()
    off[1, 0, 2, 1] += 1.01 * tolerance
    message = (
        "prompt set 'primary': the prompt-group similarity and the pair-similarity tensor disagree (best matches "
        f"differ by up to {1.01 * tolerance:.3g}); they were built from different caches. Rebuild both "
        "(snakemake --forcerun pair_similarity prompt_group_similarity)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_matches_pair_tensor(off, similarity, lengths, "primary")
    # the best match over the other layer's heads, or of another head, is not the same-layer one
    with pytest.raises(ValueError, match="disagree"):
        check_matches_pair_tensor(similarity.max(axis=(-2, -1)), similarity, lengths, "primary")
    with pytest.raises(ValueError, match="disagree"):
        check_matches_pair_tensor(best[:, :, :, ::-1], similarity, lengths, "primary")
