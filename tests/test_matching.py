"""One-to-one (Hungarian) matching beside the paper's best match: known answers, brute force, invariances."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol

from headstab.matching import assigned_values, one_to_one_assignment
from headstab.stability import head_stability_table, layer_stability_table, pair_stability_table

# float64 sums and means of at most a few heads' similarities
HAND_ATOL = reduction_atol(np.float64, 8)


def redundant_layer() -> np.ndarray:
    """Two refits, one layer of three heads. Refit 0's heads are all copies of refit 1's head 0 (0.9 to it);
    refit 1 has one such head, and heads 1, 2 that resemble nothing in refit 0 (0.3, 0.2)."""
    block = np.array([[0.9, 0.3, 0.2], [0.9, 0.3, 0.2], [0.9, 0.3, 0.2]])
    blocks = np.zeros((2, 2, 1, 3, 3))
    blocks[0, 1, 0], blocks[1, 0, 0] = block, block.T
    blocks[0, 0, 0] = blocks[1, 1, 0] = np.eye(3)
    return blocks


def test_a_layer_of_redundant_heads_scores_high_by_best_match_and_low_one_to_one():
    pairs = pair_stability_table(redundant_layer(), [1, 2], "p")
    anchor = pairs[pairs["anchor_seed"] == 1]
    # Best match: every redundant head takes refit 1's head 0. One-to-one: one of them gets it, the others 0.3, 0.2.
    assert anchor["best_head"].tolist() == [0, 0, 0]
    assert sorted(anchor["assigned_head"].tolist()) == [0, 1, 2]
    np.testing.assert_allclose(anchor["similarity"].mean(), 0.9, atol=HAND_ATOL)
    np.testing.assert_allclose(anchor["assigned_similarity"].mean(), (0.9 + 0.3 + 0.2) / 3, atol=HAND_ATOL)
    layers = layer_stability_table(head_stability_table(pairs))
    first = layers[layers["anchor_seed"] == 1].iloc[0]
    np.testing.assert_allclose([first["mean"], first["stability_one_to_one"]], [0.9, 1.4 / 3], atol=HAND_ATOL)


def test_heads_permuted_within_layers_are_recovered_one_to_one():
    rng = np.random.default_rng(0)
    n_heads = 5
    base = rng.uniform(0.0, 0.5, size=(n_heads, n_heads))
    base = (base + base.T) / 2
    np.fill_diagonal(base, 1.0)  # each head is most like itself
    permutation = rng.permutation(n_heads)
    blocks = np.empty((2, 2, 1, n_heads, n_heads))
    blocks[0, 0, 0] = blocks[1, 1, 0] = base
    blocks[0, 1, 0] = base[:, permutation]  # refit 1's head k is refit 0's head permutation[k]
    blocks[1, 0, 0] = blocks[0, 1, 0].T
    assignment = one_to_one_assignment(blocks)
    assert (permutation[assignment[0, 1, 0]] == np.arange(n_heads)).all()
    np.testing.assert_allclose(assigned_values(blocks, assignment)[0, 1, 0], 1.0)


@pytest.mark.parametrize("n_heads", [2, 3, 4])
def test_assignment_maximises_the_summed_similarity_by_brute_force(n_heads):
    rng = np.random.default_rng(n_heads)
    blocks = rng.uniform(-1.0, 1.0, size=(3, 3, 2, n_heads, n_heads))  # not symmetric: every pair solved
    assignment = one_to_one_assignment(blocks)
    totals = assigned_values(blocks, assignment).sum(axis=-1)
    for a, b, layer in itertools.product(range(3), range(3), range(2)):
        if a == b:
            assert (assignment[a, b, layer] == np.arange(n_heads)).all()
            continue
        best = max(
            sum(blocks[a, b, layer, i, p[i]] for i in range(n_heads)) for p in itertools.permutations(range(n_heads))
        )
        np.testing.assert_allclose(totals[a, b, layer], best, atol=HAND_ATOL)
        assert sorted(assignment[a, b, layer]) == list(range(n_heads))


def test_symmetric_blocks_give_mutual_partners_and_never_exceed_the_best_match():
    rng = np.random.default_rng(3)
    upper = rng.uniform(0.0, 1.0, size=(4, 4, 3, 6, 6)).astype(np.float32)
    blocks = np.where(
        (np.arange(4)[:, None] < np.arange(4)[None, :])[:, :, None, None, None], upper, upper.transpose(1, 0, 2, 4, 3)
    )
    assignment = one_to_one_assignment(blocks)
    for a, b, layer in itertools.product(range(4), range(4), range(3)):
        forward, backward = assignment[a, b, layer], assignment[b, a, layer]
        assert (backward[forward] == np.arange(6)).all()
    assigned = assigned_values(blocks, assignment)
    assert (assigned <= blocks.max(axis=-1)).all()


def test_assigned_values_share_one_assignment_over_leading_axes():
    rng = np.random.default_rng(4)
    grouped = rng.uniform(size=(5, 2, 2, 1, 3, 3))  # [group, a, b, layer, head_a, head_b]
    assignment = one_to_one_assignment(grouped.mean(axis=0))
    per_group = assigned_values(grouped, assignment)
    assert per_group.shape == (5, 2, 2, 1, 3)
    np.testing.assert_allclose(per_group.mean(axis=0), assigned_values(grouped.mean(axis=0), assignment))


def test_cross_layer_rows_have_no_partner_and_bad_blocks_fail():
    similarity = np.random.default_rng(5).uniform(size=(2, 2, 2, 2, 2, 2)).astype(np.float32)
    pairs = pair_stability_table(similarity, [1, 2], "p")
    cross = pairs[pairs["scope"] == "cross_layer"]
    assert cross["assigned_head"].isna().all() and cross["assigned_similarity"].isna().all()
    assert pairs.loc[pairs["scope"] == "same_layer", "assigned_head"].notna().all()
    heads = head_stability_table(pairs)
    assert heads.loc[heads["scope"] == "cross_layer", "stability_one_to_one"].isna().all()
    assert pd.api.types.is_integer_dtype(pairs["assigned_head"])
    with pytest.raises(ValueError, match="head_a, head_b"):
        one_to_one_assignment(np.zeros((2, 2, 1, 3, 4)))
