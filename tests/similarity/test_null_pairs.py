"""The pair-similarity tensor under the prompt-permutation null: by hand, against a float64 loop, against the
prompt groups' same-layer null, streamed from caches, and under a relabelling of the layers."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.bridges import write_refit_caches
from helpers.reference import loop_null_pair_similarity
from helpers.tolerances import reduction_atol

from headstab.activations.packing import lower_triangle_offsets, n_lower_entries
from headstab.activations.reader import open_cache
from headstab.similarity.null_pairs import null_pair_similarity, null_pair_similarity_from_caches
from headstab.similarity.prompt_groups import layer_group_similarity, null_partners, prompt_groups


def _two_token_blocks(second_rows):
    """Blocks [layer] of [seed * head, entry] for prompts of two tokens: row 1 of refit r, layer l, prompt p is
    [x, 1 - x] with x = second_rows[r][l][p] (one head)."""
    n_seeds, n_layers = len(second_rows), len(second_rows[0])
    return [
        np.array([[v for x in second_rows[r][layer] for v in (1.0, x, 1.0 - x)] for r in range(n_seeds)], np.float32)
        for layer in range(n_layers)
    ]


def _cosine(x, y):
    return (1 + x * y + (1 - x) * (1 - y)) / np.sqrt((1 + x**2 + (1 - x) ** 2) * (1 + y**2 + (1 - y) ** 2))


def test_the_null_compares_each_prompt_with_its_partner_in_every_layer_pair_by_hand():
    rows = [[[0.5, 1.0], [0.0, 0.5]], [[1.0, 0.0], [0.5, 1.0]]]  # [refit][layer][prompt]
    lengths, partners = np.array([2, 2]), np.array([1, 0])
    null = null_pair_similarity(_two_token_blocks(rows), lower_triangle_offsets(lengths), lengths, partners, 2)
    assert null.shape == (2, 2, 2, 1, 2, 1) and null.dtype == np.float32
    atol = reduction_atol(np.float32, 6)
    # refit 0 layer 0 against refit 1 layer 1: prompts (0.5 on p0, 1.0 on p1) against (0.5, 1.0) swapped
    assert null[0, 1, 0, 0, 1, 0] == pytest.approx(1.5 / np.sqrt(3), abs=atol)
    assert null[0, 1, 0, 0, 0, 0] == pytest.approx((_cosine(0.5, 0.0) + 1.0) / 2, abs=atol)  # 0.933
    assert null[1, 0, 1, 0, 0, 0] == pytest.approx((_cosine(0.5, 1.0) + _cosine(1.0, 0.5)) / 2, abs=atol)
    expected = np.empty(null.shape)
    for a, b, la, lb in np.ndindex(2, 2, 2, 2):
        pairs = [(rows[a][la][p], rows[b][lb][partners[p]]) for p in range(2)]
        expected[a, b, la, 0, lb, 0] = np.mean([_cosine(x, y) for x, y in pairs])
    np.testing.assert_allclose(null, expected, atol=atol)


def _random_blocks(rng, n_seeds, n_layers, n_heads, lengths):
    """Patterns [refit] of [layer, prompt, head, T, T] (softmax of N(0, 2^2) causal scores) and their blocks."""
    n_pos = int(lengths.max())
    patterns = []
    for _ in range(n_seeds):
        scores = rng.normal(scale=2.0, size=(n_layers, lengths.size, n_heads, n_pos, n_pos))
        scores = np.where(np.tri(n_pos, dtype=bool), scores, -np.inf)
        pattern = np.exp(scores - scores.max(axis=-1, keepdims=True))
        patterns.append((pattern / pattern.sum(axis=-1, keepdims=True)).astype(np.float32))
    blocks = [
        np.concatenate(
            [np.concatenate([pattern[layer, p][:, *np.tril_indices(t)] for p, t in enumerate(lengths)], axis=1)
             for pattern in patterns]
        )
        for layer in range(n_layers)
    ]  # fmt: skip
    return patterns, [np.ascontiguousarray(block) for block in blocks]


def test_the_null_equals_a_float64_loop_with_prompts_of_other_lengths_cut_to_the_shorter():
    rng = np.random.default_rng(2)
    lengths = np.array([4, 6, 4, 3, 6, 5])  # 3 and 5 stand alone: their partners are of another length
    partners = null_partners(lengths, seed=1)
    assert np.any(lengths[partners] != lengths)
    patterns, blocks = _random_blocks(rng, 3, 2, 2, lengths)
    null = null_pair_similarity(blocks, lower_triangle_offsets(lengths), lengths, partners, 3)
    loop = loop_null_pair_similarity(patterns, lengths, partners)
    np.testing.assert_allclose(null, loop, atol=reduction_atol(np.float32, n_lower_entries(6)), rtol=0)


def test_the_same_layer_blocks_are_the_prompt_groups_null_averaged_over_the_groups():
    rng = np.random.default_rng(3)
    lengths = np.array([5, 7, 5, 7, 6, 6, 4, 5])
    partners, groups = null_partners(lengths, seed=2), prompt_groups(lengths.size, 3, seed=2)
    offsets = lower_triangle_offsets(lengths)
    _, blocks = _random_blocks(rng, 2, 3, 2, lengths)
    null = null_pair_similarity(blocks, offsets, lengths, partners, 2)
    sizes = np.array([len(g) for g in groups], dtype=np.float64)
    for layer, block in enumerate(blocks):
        grouped = layer_group_similarity(block, offsets, lengths, groups, partners, 2)[1]
        mean = np.tensordot(sizes / sizes.sum(), grouped.astype(np.float64), axes=1)
        np.testing.assert_allclose(null[:, :, layer, :, layer, :], mean, atol=reduction_atol(np.float32, 64))


def test_relabelling_the_layers_permutes_the_null_and_every_heads_best_match_with_them():
    rng = np.random.default_rng(4)
    lengths = np.array([5, 5, 6, 6, 4, 4])
    partners, offsets = null_partners(lengths, seed=0), lower_triangle_offsets(lengths)
    _, blocks = _random_blocks(rng, 3, 4, 2, lengths)
    order = np.array([2, 0, 3, 1])
    null = null_pair_similarity(blocks, offsets, lengths, partners, 3)
    relabelled = null_pair_similarity([blocks[k] for k in order], offsets, lengths, partners, 3)
    np.testing.assert_array_equal(relabelled, null[:, :, order][:, :, :, :, order])
    best = null.reshape(3, 3, 4, 2, -1).max(axis=-1)
    np.testing.assert_array_equal(relabelled.reshape(3, 3, 4, 2, -1).max(axis=-1), best[:, :, order])


def test_a_positional_head_is_its_own_null_and_a_content_head_is_not():
    rng = np.random.default_rng(5)
    lengths = np.full(6, 5)
    positional = rng.dirichlet(np.ones(5), size=5) * np.tri(5)  # the same rows on every prompt
    positional /= positional.sum(axis=-1, keepdims=True)
    _, content = _random_blocks(rng, 1, 1, 1, lengths)
    fixed = np.tile(positional[np.tril_indices(5)], lengths.size)
    block = np.ascontiguousarray(np.stack([fixed, content[0][0], fixed, content[0][0]]), dtype=np.float32)
    partners = null_partners(lengths, seed=0)
    null = null_pair_similarity([block], lower_triangle_offsets(lengths), lengths, partners, 2)
    atol = reduction_atol(np.float32, n_lower_entries(5))
    assert null[0, 1, 0, 0, 0, 0] == pytest.approx(1.0, abs=atol)  # position alone: chance is perfect agreement
    assert null[0, 1, 0, 1, 0, 1] < 0.9  # identical content heads, on prompts that differ


def test_partners_that_are_the_prompt_itself_or_outside_the_set_are_refused():
    lengths = np.array([2, 2])
    blocks = _two_token_blocks([[[0.5, 1.0]], [[1.0, 0.0]]])
    for partners in ([0, 1], [1, 2], [1]):
        with pytest.raises(ValueError, match="partners must give each of the 2 prompts another prompt"):
            null_pair_similarity(blocks, lower_triangle_offsets(lengths), lengths, np.array(partners), 2)


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    return write_refit_caches(tmp_path_factory.mktemp("caches"), seeds=(1, 2, 3))


def test_the_null_streamed_from_caches_equals_the_null_of_the_patterns_in_memory(caches):
    with open_cache(caches[0]) as cache:
        lengths, offsets = cache.lengths("primary"), cache.pattern_offsets("primary")
        n_layers = cache.n_layers
    blocks = []
    for layer in range(n_layers):
        parts = []
        for path in caches:
            with open_cache(path) as cache:
                parts.append(cache.hook_pattern_lower("primary", layer=layer))
        blocks.append(np.ascontiguousarray(np.concatenate(parts)))
    partners = null_partners(lengths, seed=4)
    streamed = null_pair_similarity_from_caches(caches, "primary", partners, progress=False)
    in_memory = null_pair_similarity(blocks, offsets, lengths, partners, len(caches))
    np.testing.assert_allclose(streamed, in_memory, atol=reduction_atol(np.float32, int(offsets[-1])), rtol=0)
    with pytest.raises(KeyError, match=r"prompt set 'nope' is not in the caches \(primary, short\)"):
        null_pair_similarity_from_caches(caches, "nope", partners, progress=False)
    with pytest.raises(ValueError, match="partners must give each"):
        null_pair_similarity_from_caches(caches, "primary", np.arange(lengths.size), progress=False)


def test_the_null_from_caches_is_float32_labels_its_progress_bar_and_takes_one_refit(caches, tqdm_bars):
    with open_cache(caches[0]) as cache:
        lengths = cache.lengths("short")
    partners = null_partners(lengths, seed=0)
    streamed = null_pair_similarity_from_caches(caches, "short", partners)
    assert streamed.dtype == np.float32
    alone = null_pair_similarity_from_caches(caches[1:2], "short", partners, progress=False)
    np.testing.assert_allclose(alone[0, 0], streamed[1, 1], atol=reduction_atol(np.float32, 10))
    assert tqdm_bars == [
        {"desc": "null similarity short", "unit": "layer", "disable": False},
        {"desc": "null similarity short", "unit": "layer", "disable": True},
    ]
