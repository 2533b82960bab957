"""Tests for headstab.stability: paper Eq. 3-5, the cross-layer variant, alignment and commonness."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from helpers.reference import causal_pattern_features, pair_similarity
from helpers.tolerances import reduction_atol, reduction_rtol

from headstab.stability import (
    ALIGNMENT_COLUMNS,
    COMMONNESS_COLUMNS,
    DISPERSION_COLUMNS,
    HEAD_COLUMNS,
    LAYER_COLUMNS,
    PAIR_COLUMNS,
    TABLE_NAMES,
    alignment_dispersion_table,
    alignment_map_table,
    commonness_table,
    head_stability_table,
    layer_stability_table,
    pair_stability_table,
    stability_tables,
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
    inside = np.arange(n_pos)[None, :] < np.asarray(lengths)[:, None]
    block = inside[:, :, None] & inside[:, None, :]
    return (pattern * block[None, :, None]).astype(np.float32)


def similarity_of(patterns: list[np.ndarray], lengths: np.ndarray) -> np.ndarray:
    return pair_similarity(np.stack([causal_pattern_features(p, lengths) for p in patterns]))


LENGTHS = np.array([6, 4, 5])
# Similarities are float32 dot products over the prompts' lower triangles: 21 + 10 + 15 entries.
SIMILARITY_ATOL = reduction_atol(np.float32, 21 + 10 + 15)
# Hand-made tables: float64 arithmetic (sums, a square root, a logarithm) on a few dozen numbers.
HAND_RTOL, HAND_ATOL = reduction_rtol(np.float64, 64), reduction_atol(np.float64, 64)


@pytest.fixture(scope="module")
def base_pattern() -> np.ndarray:
    return random_patterns(np.random.default_rng(0), 3, 4, LENGTHS, 6)


def test_identical_refits_give_stability_one_everywhere(base_pattern):
    seeds = [1, 2, 3]
    pairs = pair_stability_table(similarity_of([base_pattern] * 3, LENGTHS), seeds, "primary")
    assert list(pairs.columns) == PAIR_COLUMNS
    assert len(pairs) == 2 * 3 * 2 * 3 * 4  # scopes x anchors x other refits x layers x heads
    assert (pairs["anchor_seed"] != pairs["pair_seed"]).all()
    heads = head_stability_table(pairs)
    np.testing.assert_allclose(heads["stability"], 1.0, atol=SIMILARITY_ATOL)
    assert (heads["n_pairs"] == 2).all()
    layers = layer_stability_table(heads)
    np.testing.assert_allclose(layers["mean"], 1.0, atol=SIMILARITY_ATOL)
    np.testing.assert_allclose(layers["std"], 0.0, atol=SIMILARITY_ATOL)
    # Distinct random heads: the best match is the head itself, also when searching all layers.
    assert (pairs["best_layer"] == pairs["layer"]).all() and (pairs["best_head"] == pairs["head"]).all()


def test_heads_permuted_within_layers_give_one_and_best_head_recovers_permutation(base_pattern):
    rng = np.random.default_rng(1)
    permutations = [rng.permutation(4) for _ in range(3)]
    permuted = np.stack([base_pattern[layer][:, permutations[layer]] for layer in range(3)])
    seeds = [10, 20]
    pairs = pair_stability_table(similarity_of([base_pattern, permuted], LENGTHS), seeds, "primary")
    np.testing.assert_allclose(pairs["similarity"], 1.0, atol=SIMILARITY_ATOL)
    for scope in ("same_layer", "cross_layer"):
        rows = pairs[(pairs["scope"] == scope) & (pairs["anchor_seed"] == 10)]
        assert (rows["best_layer"] == rows["layer"]).all()
        for layer in range(3):
            in_layer = rows[rows["layer"] == layer].sort_values("head")
            # Head i of the copy is head permutation[i] of the original, so original head h sits
            # at the position where the permutation holds h.
            np.testing.assert_array_equal(in_layer["best_head"], np.argsort(permutations[layer]))
        reverse = pairs[(pairs["scope"] == scope) & (pairs["anchor_seed"] == 20)]
        for layer in range(3):
            in_layer = reverse[reverse["layer"] == layer].sort_values("head")
            np.testing.assert_array_equal(in_layer["best_head"], permutations[layer])


def reference_head_stability(patterns, lengths, anchor, scope):
    """Head stability straight from Eq. 1-4 with plain loops (cross_layer: candidates in all layers)."""
    n_layers, n_prompts, n_heads = patterns[0].shape[:3]

    def lower(pattern, layer, prompt, head):
        n = int(lengths[prompt])
        return pattern[layer, prompt, head, :n, :n][np.tril_indices(n)].astype(np.float64)

    def mean_cosine(a, la, i, b, lb, j):
        total = 0.0
        for p in range(n_prompts):
            x, y = lower(patterns[a], la, p, i), lower(patterns[b], lb, p, j)
            total += x @ y / (np.linalg.norm(x) * np.linalg.norm(y))
        return total / n_prompts

    result = np.zeros((n_layers, n_heads))
    for layer in range(n_layers):
        for i in range(n_heads):
            best = []
            for b in range(len(patterns)):
                if b == anchor:
                    continue
                candidate_layers = [layer] if scope == "same_layer" else range(n_layers)
                best.append(
                    max(mean_cosine(anchor, layer, i, b, lb, j) for lb in candidate_layers for j in range(n_heads))
                )
            result[layer, i] = np.mean(best)
    return result


@pytest.mark.parametrize("scope", ["same_layer", "cross_layer"])
def test_small_random_case_equals_plain_loop_from_eq_1_to_4(scope):
    rng = np.random.default_rng(2)
    lengths = np.array([5, 3, 4])
    patterns = [random_patterns(rng, 2, 3, lengths, 5) for _ in range(3)]
    seeds = [4, 5, 6]
    heads = head_stability_table(pair_stability_table(similarity_of(patterns, lengths), seeds, "primary"))
    for anchor, seed in enumerate(seeds):
        rows = heads[(heads["scope"] == scope) & (heads["anchor_seed"] == seed)]
        got = rows.sort_values(["layer", "head"])["stability"].to_numpy().reshape(2, 3)
        np.testing.assert_allclose(
            got, reference_head_stability(patterns, lengths, anchor, scope), atol=SIMILARITY_ATOL
        )


def test_layer_stability_is_invariant_to_permuting_heads(base_pattern):
    rng = np.random.default_rng(3)
    others = [random_patterns(rng, 3, 4, LENGTHS, 6) for _ in range(2)]
    refits = [base_pattern, *others]
    shuffled = [np.stack([p[layer][:, rng.permutation(4)] for layer in range(3)]) for p in refits]
    seeds = [1, 2, 3]

    def layer_table(patterns):
        pairs = pair_stability_table(similarity_of(patterns, LENGTHS), seeds, "primary")
        return layer_stability_table(head_stability_table(pairs))

    original, permuted = layer_table(refits), layer_table(shuffled)
    assert list(original.columns) == LAYER_COLUMNS
    np.testing.assert_allclose(permuted["mean"], original["mean"], atol=SIMILARITY_ATOL)
    np.testing.assert_allclose(permuted["std"], original["std"], atol=SIMILARITY_ATOL)
    assert original["std"].gt(0).all()  # the test would be empty if every head were alike


def hand_heads() -> pd.DataFrame:
    """Layer 0: stabilities 0.2, 0.4, 0.9; layer 1: 0.5, 0.5; layer 2: one head, 0.7."""
    return pd.DataFrame(
        {
            "promptset": "p",
            "scope": "same_layer",
            "anchor_seed": 1,
            "layer": [0, 0, 0, 1, 1, 2],
            "head": [0, 1, 2, 0, 1, 0],
            "stability": [0.2, 0.4, 0.9, 0.5, 0.5, 0.7],
            "stability_one_to_one": [0.1, 0.4, 0.7, 0.5, 0.3, 0.7],
            "n_pairs": 2,
        }
    )


def test_layer_std_is_population_std_by_hand_by_default():
    layers = layer_stability_table(hand_heads())
    np.testing.assert_allclose(layers["mean"], [0.5, 0.5, 0.7], rtol=HAND_RTOL)
    np.testing.assert_allclose(layers["stability_one_to_one"], [0.4, 0.4, 0.7], rtol=HAND_RTOL)
    # Layer 0: squared deviations 0.09 + 0.01 + 0.16 = 0.26 over n = 3; one head: 0.
    np.testing.assert_allclose(layers["std"], [np.sqrt(0.26 / 3), 0.0, 0.0], rtol=HAND_RTOL, atol=HAND_ATOL)
    pd.testing.assert_frame_equal(layers, layer_stability_table(hand_heads(), ddof=0))


def test_layer_std_with_ddof_1_is_sample_std_and_nan_for_one_head():
    layers = layer_stability_table(hand_heads(), ddof=1)
    np.testing.assert_allclose(layers["mean"], [0.5, 0.5, 0.7], rtol=HAND_RTOL)
    # Layer 0: 0.26 over n - 1 = 2, i.e. sqrt(0.13) = 0.3606 (population: 0.2944).
    np.testing.assert_allclose(layers["std"].iloc[:2], [np.sqrt(0.13), 0.0], rtol=HAND_RTOL, atol=HAND_ATOL)
    assert np.isnan(layers["std"].iloc[2])
    with pytest.raises(ValueError, match="ddof must be 0"):
        layer_stability_table(hand_heads(), ddof=2)


def test_stability_tables_pass_ddof_to_the_layer_table():
    similarity = np.random.default_rng(5).uniform(0.0, 1.0, size=(3, 3, 2, 3, 2, 3)).astype(np.float32)
    population = stability_tables(similarity, [1, 2, 3], "p")["layer_stability"]
    sample = stability_tables(similarity, [1, 2, 3], "p", ddof=1)["layer_stability"]
    pd.testing.assert_series_equal(population["mean"], sample["mean"])
    # Three heads per layer: sample s.d. = population s.d. * sqrt(3 / 2), to float64 rounding.
    np.testing.assert_allclose(sample["std"], population["std"] * np.sqrt(3 / 2), rtol=HAND_RTOL)


def hand_similarity(n_seeds=3, n_layers=3, n_heads=2) -> np.ndarray:
    """S filled with 0.1, the self blocks with 1 on the diagonal."""
    similarity = np.full((n_seeds, n_seeds, n_layers, n_heads, n_layers, n_heads), 0.1, np.float32)
    for a in range(n_seeds):
        for layer in range(n_layers):
            for head in range(n_heads):
                similarity[a, a, layer, head, layer, head] = 1.0
    return similarity


def test_cross_layer_best_match_and_alignment_map_by_hand():
    similarity = hand_similarity()
    # Anchor seed 7 (index 0), layer 0: head 0 matches layer 2 in both pair refits, head 1 matches
    # layer 0 in refit 1 and layer 1 in refit 2. Fractions: layer 0 1/4, layer 1 1/4, layer 2 2/4.
    similarity[0, 1, 0, 0, 2, 1] = 0.9
    similarity[0, 2, 0, 0, 2, 0] = 0.8
    similarity[0, 1, 0, 1, 0, 0] = 0.7
    similarity[0, 2, 0, 1, 1, 1] = 0.6
    pairs = pair_stability_table(similarity, [7, 8, 9], "primary", scopes=["cross_layer"])
    row = pairs[(pairs["anchor_seed"] == 7) & (pairs["pair_seed"] == 8) & (pairs["layer"] == 0) & (pairs["head"] == 0)]
    assert row[["best_layer", "best_head"]].to_numpy().tolist() == [[2, 1]]
    np.testing.assert_allclose(row["similarity"], 0.9, rtol=reduction_rtol(np.float32, 1))  # 0.9 stored in float32

    alignment = alignment_map_table(pairs)
    assert list(alignment.columns) == ALIGNMENT_COLUMNS
    assert list(dict.fromkeys(alignment["anchor_seed"])) == [7, 8, 9]
    assert len(alignment) == 3 * 3 * 3  # anchors x layers x match layers, zeros included
    sums = alignment.groupby(["promptset", "anchor_seed", "layer"])["fraction"].sum()
    np.testing.assert_allclose(sums, 1.0, rtol=HAND_RTOL)
    first = alignment[(alignment["anchor_seed"] == 7) & (alignment["layer"] == 0)].sort_values("match_layer")
    np.testing.assert_allclose(first["fraction"], [0.25, 0.25, 0.5], rtol=HAND_RTOL)

    kurtosis = alignment_dispersion_table(alignment)
    assert list(kurtosis.columns) == DISPERSION_COLUMNS
    value = kurtosis[(kurtosis["anchor_seed"] == 7) & (kurtosis["layer"] == 0)]["kurtosis"].item()
    np.testing.assert_allclose(value, scipy.stats.kurtosis([2, 2, 0, 1]), rtol=HAND_RTOL)
    # Anchor 7 layer 1: every 0.1 tie goes to layer 0, head 0 (argmax takes the first): degenerate.
    assert np.isnan(kurtosis[(kurtosis["anchor_seed"] == 7) & (kurtosis["layer"] == 1)]["kurtosis"].item())


def test_alignment_map_with_self_matches_counts_each_anchor_head_once_in_its_own_layer():
    similarity = hand_similarity()
    similarity[0, 1, 0, 0, 2, 1] = 0.9
    similarity[0, 2, 0, 0, 2, 0] = 0.8
    similarity[0, 1, 0, 1, 0, 0] = 0.7
    similarity[0, 2, 0, 1, 1, 1] = 0.6
    pairs = pair_stability_table(similarity, [7, 8, 9], "primary", scopes=["cross_layer"])
    alignment = alignment_map_table(pairs, include_self=True)
    # Anchor 7, layer 0: the 4 pair matches of the test above (layers 0, 1, 2, 2) plus its 2 heads matched to
    # themselves in layer 0: counts 3, 1, 2 of 6.
    first = alignment[(alignment["anchor_seed"] == 7) & (alignment["layer"] == 0)].sort_values("match_layer")
    np.testing.assert_allclose(first["fraction"], [3 / 6, 1 / 6, 2 / 6], rtol=HAND_RTOL)


def test_self_matches_raise_the_diagonal_by_its_complement_over_the_number_of_refits(base_pattern):
    rng = np.random.default_rng(11)
    patterns = [base_pattern, *[random_patterns(rng, 3, 4, LENGTHS, 6) for _ in range(4)]]
    pairs = pair_stability_table(similarity_of(patterns, LENGTHS), [1, 2, 3, 4, 5], "primary")
    plain = alignment_map_table(pairs)
    with_self = alignment_map_table(pairs, include_self=True)
    n_refits = 5
    diagonal = (plain["layer"] == plain["match_layer"]).to_numpy()
    f = plain["fraction"].to_numpy()
    # d -> d + (1 - d) / N on the diagonal, f -> f (N - 1) / N off it.
    expected = np.where(diagonal, f + (1 - f) / n_refits, f * (n_refits - 1) / n_refits)
    np.testing.assert_allclose(with_self["fraction"], expected, rtol=HAND_RTOL, atol=HAND_ATOL)
    tables = stability_tables(similarity_of(patterns, LENGTHS), [1, 2, 3, 4, 5], "primary", alignment_self_match=True)
    pd.testing.assert_frame_equal(tables["alignment_map"], with_self)


def test_alignment_kurtosis_equals_scipy_on_pooled_random_matches(base_pattern):
    rng = np.random.default_rng(4)
    patterns = [base_pattern, *[random_patterns(rng, 3, 4, LENGTHS, 6) for _ in range(3)]]
    pairs = pair_stability_table(similarity_of(patterns, LENGTHS), [1, 2, 3, 4], "primary")
    kurtosis = alignment_dispersion_table(alignment_map_table(pairs))
    cross = pairs[pairs["scope"] == "cross_layer"]
    for (anchor, layer), group in cross.groupby(["anchor_seed", "layer"]):
        expected = scipy.stats.kurtosis(group["best_layer"].to_numpy())
        got = kurtosis[(kurtosis["anchor_seed"] == anchor) & (kurtosis["layer"] == layer)]["kurtosis"].item()
        if np.isnan(expected) or group["best_layer"].nunique() == 1:
            assert np.isnan(got)
        else:
            np.testing.assert_allclose(got, expected, rtol=HAND_RTOL, atol=HAND_ATOL)


def hand_alignment_map(rows: dict[int, list[float]], promptset: str = "p", anchor_seed: int = 1) -> pd.DataFrame:
    """ALIGNMENT_COLUMNS from {anchor layer: fractions over match layers 0..n-1}."""
    records = [
        (promptset, anchor_seed, layer, match_layer, fraction)
        for layer, fractions in rows.items()
        for match_layer, fraction in enumerate(fractions)
    ]
    return pd.DataFrame.from_records(records, columns=ALIGNMENT_COLUMNS)


def dispersion_of(fractions: list[float], layer: int) -> pd.Series:
    """The dispersion row of one hand-made alignment-map row."""
    return alignment_dispersion_table(hand_alignment_map({layer: fractions})).iloc[0]


def test_dispersion_of_all_matches_in_own_layer_is_zero_spread():
    for n_layers in (1, 2, 4, 8):
        for layer in range(n_layers):
            fractions = [0.0] * n_layers
            fractions[layer] = 1.0
            row = dispersion_of(fractions, layer)
            assert (row["diagonal_share"], row["normalized_entropy"], row["mean_layer_distance"]) == (1.0, 0.0, 0.0)
            assert np.isnan(row["kurtosis"])  # the case the kurtosis column cannot describe


def test_dispersion_of_uniform_row_has_entropy_one():
    for n_layers in (2, 3, 4, 8, 32):
        for layer in (0, n_layers - 1):
            row = dispersion_of([1 / n_layers] * n_layers, layer)
            np.testing.assert_allclose(row["normalized_entropy"], 1.0, rtol=HAND_RTOL)
            np.testing.assert_allclose(row["diagonal_share"], 1 / n_layers, rtol=HAND_RTOL)
            # From an end layer the distances are 0, 1, ..., n - 1: mean (n - 1) / 2.
            np.testing.assert_allclose(row["mean_layer_distance"], (n_layers - 1) / 2, rtol=HAND_RTOL)


def test_dispersion_known_values_by_hand():
    table = alignment_dispersion_table(
        hand_alignment_map(
            {
                0: [0.5, 0.5, 0.0, 0.0],  # H = ln 2, / ln 4 = 0.5; distance 0.5 * 1 = 0.5
                1: [0.25, 0.5, 0.25, 0.0],  # H = 2 * 0.25 ln 4 + 0.5 ln 2 = 1.5 ln 2, / ln 4 = 0.75; distance 0.5
                2: [0.25, 0.25, 0.25, 0.25],  # H = 1; distance (2 + 1 + 0 + 1) / 4 = 1
                3: [0.0, 0.0, 0.0, 1.0],  # all in own layer
            }
        )
    )
    assert list(table.columns) == DISPERSION_COLUMNS
    assert table["layer"].tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(table["diagonal_share"], [0.5, 0.5, 0.25, 1.0], rtol=HAND_RTOL)
    np.testing.assert_allclose(table["normalized_entropy"], [0.5, 0.75, 1.0, 0.0], rtol=HAND_RTOL, atol=HAND_ATOL)
    np.testing.assert_allclose(table["mean_layer_distance"], [0.5, 0.5, 1.0, 0.0], rtol=HAND_RTOL)
    # Kurtosis kept as a secondary column: 50/50 over two layers is -2, uniform over four is
    # E[(k - 1.5)^4] / Var^2 - 3 = 2.5625 / 1.25^2 - 3 = -1.36.
    np.testing.assert_allclose(table["kurtosis"].iloc[[0, 2]], [-2.0, -1.36], rtol=HAND_RTOL)
    assert np.isnan(table["kurtosis"].iloc[3])


def test_moving_mass_off_the_diagonal_lowers_share_and_raises_distance():
    # Anchor layer 1 of 4: mass moves from layer 1 towards layer 3.
    family = [[0, 1, 0, 0], [0, 0.8, 0.2, 0], [0, 0.5, 0.3, 0.2], [0, 0.2, 0.3, 0.5], [0, 0, 0, 1]]
    rows = [dispersion_of(fractions, 1) for fractions in family]
    share = np.array([row["diagonal_share"] for row in rows])
    distance = np.array([row["mean_layer_distance"] for row in rows])
    assert (np.diff(share) < 0).all() and (np.diff(distance) > 0).all()
    np.testing.assert_allclose(share, [1.0, 0.8, 0.5, 0.2, 0.0], rtol=HAND_RTOL)
    # 0.2 * 1; 0.3 * 1 + 0.2 * 2; 0.3 * 1 + 0.5 * 2; 1 * 2.
    np.testing.assert_allclose(distance, [0.0, 0.2, 0.7, 1.3, 2.0], rtol=HAND_RTOL)


def test_wider_spread_has_higher_entropy_where_kurtosis_is_not_monotone():
    family = [[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0.34, 0.33, 0.33, 0], [0.25, 0.25, 0.25, 0.25]]
    rows = [dispersion_of(fractions, 0) for fractions in family]
    entropy = np.array([row["normalized_entropy"] for row in rows])
    assert (np.diff(entropy) > 0).all()
    np.testing.assert_allclose(entropy[[0, 1, 3]], [0.0, 0.5, 1.0], rtol=HAND_RTOL, atol=HAND_ATOL)
    # Why kurtosis is only a secondary column: NaN for the tightest row, -2 for 50/50, higher
    # (-1.36) for uniform, and +95 for a 99/1 split that is nearly all on the diagonal.
    kurtosis = np.array([row["kurtosis"] for row in rows])
    assert np.isnan(kurtosis[0]) and kurtosis[1] < kurtosis[3]
    near_diagonal = dispersion_of([0.99, 0.01, 0.0, 0.0], 0)
    # Bernoulli(p) excess kurtosis (1 - 6 p q) / (p q) with p = 0.01: 0.9406 / 0.0099 = 95.01.
    np.testing.assert_allclose(near_diagonal["kurtosis"], 0.9406 / 0.0099, rtol=HAND_RTOL)
    assert near_diagonal["normalized_entropy"] < entropy[1]


def test_dispersion_of_a_single_layer_model_is_defined():
    row = dispersion_of([1.0], 0)
    assert (row["diagonal_share"], row["normalized_entropy"], row["mean_layer_distance"]) == (1.0, 0.0, 0.0)


@pytest.mark.parametrize("n_layers", [1, 2, 5])
def test_dispersion_is_finite_and_matches_pair_table_on_random_tensors(n_layers):
    rng = np.random.default_rng(6 + n_layers)
    seeds = [4, 2, 8]
    random = rng.uniform(0.0, 1.0, size=(3, 3, n_layers, 3, n_layers, 3)).astype(np.float32)
    for similarity in (random, hand_similarity(n_layers=n_layers)):  # hand: ties, single-layer rows
        tables = stability_tables(similarity, seeds, "primary")
        assert tuple(tables) == TABLE_NAMES
        dispersion = tables["alignment_dispersion"]
        assert list(dispersion.columns) == DISPERSION_COLUMNS
        assert len(dispersion) == len(seeds) * n_layers
        pd.testing.assert_frame_equal(
            dispersion[["promptset", "anchor_seed", "layer"]],
            tables["alignment_map"][["promptset", "anchor_seed", "layer"]].drop_duplicates().reset_index(drop=True),
        )
        measures = dispersion[["diagonal_share", "normalized_entropy", "mean_layer_distance"]].to_numpy()
        assert np.isfinite(measures).all()
        # Every value is a float64 sum of n_layers fractions: n_layers ulps of slack around [0, 1].
        slack = n_layers * np.finfo(np.float64).eps
        assert (measures[:, :2] >= -slack).all() and (measures[:, :2] <= 1 + slack).all()
        # Independent check from the pooled best matches themselves.
        cross = tables["pair_stability"].query("scope == 'cross_layer'")
        pooled = (
            cross.assign(
                own=cross["best_layer"] == cross["layer"], distance=(cross["best_layer"] - cross["layer"]).abs()
            )
            .groupby(["anchor_seed", "layer"], sort=False)[["own", "distance"]]
            .mean()
        )
        np.testing.assert_allclose(dispersion["diagonal_share"], pooled["own"], rtol=HAND_RTOL, atol=slack)
        np.testing.assert_allclose(dispersion["mean_layer_distance"], pooled["distance"], rtol=HAND_RTOL, atol=slack)


def test_commonness_of_a_layer_of_identical_heads_is_one(base_pattern):
    pattern = base_pattern.copy()
    pattern[1] = pattern[1][:, [2, 2, 2, 2]]  # layer 1: four copies of one head
    table = commonness_table(similarity_of([pattern, base_pattern], LENGTHS), [5, 6], "primary")
    assert list(table.columns) == COMMONNESS_COLUMNS and len(table) == 2 * 3 * 4
    identical = table[(table["seed"] == 5) & (table["layer"] == 1)]
    np.testing.assert_allclose(identical["commonness"], 1.0, atol=SIMILARITY_ATOL)
    np.testing.assert_allclose(identical["commonness_excl_self"], 1.0, atol=SIMILARITY_ATOL)
    others = table[(table["seed"] == 6) | (table["layer"] != 1)]
    assert (others["commonness"] < 1 - 1e-3).all()


def test_commonness_by_hand_includes_self():
    similarity = hand_similarity(n_seeds=1, n_layers=1, n_heads=3)
    similarity[0, 0, 0, 0, 0, 1] = similarity[0, 0, 0, 1, 0, 0] = 0.7
    table = commonness_table(similarity, [3], "p")
    np.testing.assert_allclose(
        table["commonness"], [(1 + 0.7 + 0.1) / 3, (1 + 0.7 + 0.1) / 3, 1.2 / 3], rtol=reduction_rtol(np.float32, 3)
    )
    np.testing.assert_allclose(table["commonness_excl_self"], [0.4, 0.4, 0.1], rtol=reduction_rtol(np.float32, 3))


def test_same_layer_only_tensor_gives_same_layer_rows():
    similarity = hand_similarity()
    same = np.moveaxis(np.diagonal(similarity, axis1=2, axis2=4), -1, 2)  # [a, b, layer, head, head]
    from_full = pair_stability_table(similarity, [1, 2, 3], "p", scopes=["same_layer"])
    from_same = pair_stability_table(same, [1, 2, 3], "p")
    pd.testing.assert_frame_equal(from_full, from_same)
    with pytest.raises(ValueError, match="cross_layer"):
        pair_stability_table(same, [1, 2, 3], "p", scopes=["cross_layer"])


def test_head_table_columns_and_promptset_and_seed_labels():
    pairs = pair_stability_table(hand_similarity(), [11, 12, 13], "len20")
    heads = head_stability_table(pairs)
    assert list(heads.columns) == HEAD_COLUMNS
    assert set(heads["promptset"]) == {"len20"} and set(heads["anchor_seed"]) == {11, 12, 13}
    assert len(heads) == 2 * 3 * 3 * 2


def test_bad_inputs_fail_clearly():
    with pytest.raises(ValueError, match="3 seeds were given"):
        pair_stability_table(hand_similarity(n_seeds=2), [1, 2, 3], "p")
    with pytest.raises(ValueError, match="at least 2 refits"):
        pair_stability_table(hand_similarity(n_seeds=1), [1], "p")
    with pytest.raises(ValueError, match="unique"):
        pair_stability_table(hand_similarity(n_seeds=2), [1, 1], "p")
    with pytest.raises(ValueError, match="6 axes"):
        pair_stability_table(np.zeros((2, 2, 3)), [1, 2], "p")
    with pytest.raises(ValueError, match="no scope 'cross_layer'"):
        alignment_map_table(pair_stability_table(hand_similarity(), [1, 2, 3], "p", scopes=["same_layer"]))
    with pytest.raises(ValueError, match="lacks columns"):
        head_stability_table(pd.DataFrame({"similarity": [1.0]}))


def test_a_layer_that_is_nobodys_best_match_keeps_zero_rows():
    # Every head's best match lies in layer 0 or 1, never 2: layer 2's cells are 0, not missing or NaN.
    similarity = hand_similarity(n_seeds=2, n_layers=3, n_heads=2)
    similarity[0, 1, :, :, 0, 0] = 0.9  # anchor 0: all heads match layer 0
    similarity[1, 0, :, :, 1, 1] = 0.9  # anchor 1: all heads match layer 1
    similarity[1, 0, 2, 0, 0, 1] = 0.95  # except layer 2 head 0, which matches layer 0
    pairs = pair_stability_table(similarity, [4, 3], "p", scopes=["cross_layer"])
    alignment = alignment_map_table(pairs)
    assert len(alignment) == 2 * 3 * 3  # anchors x layers x match layers
    assert not alignment["fraction"].isna().any()
    by_row = alignment.set_index(["anchor_seed", "layer", "match_layer"])["fraction"]
    assert by_row.loc[4].unstack().to_numpy().tolist() == [[1, 0, 0]] * 3
    assert by_row.loc[3].unstack().to_numpy().tolist() == [[0, 1, 0], [0, 1, 0], [0.5, 0.5, 0]]
    # rows keep the pair table's order: the anchors as given (4 before 3), layers ascending
    assert alignment[["anchor_seed", "layer"]].drop_duplicates().to_numpy().tolist() == [
        [4, 0], [4, 1], [4, 2], [3, 0], [3, 1], [3, 2]
    ]  # fmt: skip
    dispersion = alignment_dispersion_table(alignment)
    np.testing.assert_allclose(dispersion["diagonal_share"], [1, 0, 0, 0, 1, 0], atol=HAND_ATOL)
    np.testing.assert_allclose(dispersion["mean_layer_distance"], [0, 1, 2, 1, 0, 1.5], rtol=HAND_RTOL)
    assert dispersion["kurtosis"].iloc[:5].isna().all()
    np.testing.assert_allclose(dispersion["kurtosis"].iloc[5], -2.0, rtol=HAND_RTOL)


def test_stability_tables_is_the_six_tables_of_one_prompt_set():
    rng = np.random.default_rng(11)
    similarity = rng.uniform(0.0, 1.0, size=(3, 3, 2, 2, 2, 2)).astype(np.float32)
    seeds = [9, 2, 5]
    tables = stability_tables(similarity, seeds, "len20")
    assert tuple(tables) == TABLE_NAMES
    pairs = pair_stability_table(similarity, seeds, "len20")
    heads = head_stability_table(pairs)
    alignment = alignment_map_table(pairs)
    expected = {
        "pair_stability": pairs,
        "head_stability": heads,
        "layer_stability": layer_stability_table(heads),
        "alignment_map": alignment,
        "alignment_dispersion": alignment_dispersion_table(alignment),
        "commonness": commonness_table(similarity, seeds, "len20"),
    }
    for name in TABLE_NAMES:
        pd.testing.assert_frame_equal(tables[name], expected[name])
        assert set(tables[name]["promptset"]) == {"len20"}
    assert set(tables["pair_stability"]["scope"]) == {"same_layer", "cross_layer"}
    assert list(tables["commonness"]["seed"].unique()) == seeds


def test_tables_keep_the_input_order_of_scopes_and_seeds():
    # The CSVs list same_layer before cross_layer and the seeds as given, not sorted.
    rng = np.random.default_rng(12)
    similarity = rng.uniform(0.0, 1.0, size=(3, 3, 2, 2, 2, 2)).astype(np.float32)
    pairs = pair_stability_table(similarity, [9, 2, 5], "p")
    assert pairs.index.equals(pd.RangeIndex(len(pairs)))
    heads = head_stability_table(pairs)
    layers = layer_stability_table(heads)
    for table in (heads, layers):
        assert list(dict.fromkeys(table["scope"])) == ["same_layer", "cross_layer"]
        assert list(dict.fromkeys(table["anchor_seed"])) == [9, 2, 5]
    first = heads.iloc[0]
    expected = pairs[(pairs["scope"] == "same_layer") & (pairs["anchor_seed"] == 9)]
    expected = expected[(expected["layer"] == 0) & (expected["head"] == 0)]["similarity"].mean()
    assert (first["scope"], first["anchor_seed"], first["layer"], first["head"]) == ("same_layer", 9, 0, 0)
    assert first["stability"] == pytest.approx(expected, rel=HAND_RTOL)


def test_dispersion_rows_keep_the_maps_order_and_accept_counts():
    # Rows of counts (not yet normalised) give the same dispersion as their fractions.
    counts = pd.concat(
        [
            hand_alignment_map({0: [3.0, 1.0, 0.0], 1: [0.0, 2.0, 2.0]}, anchor_seed=9),
            hand_alignment_map({0: [1.0, 1.0, 2.0]}, anchor_seed=2),
        ],
        ignore_index=True,
    )
    fractions = counts.copy()
    fractions["fraction"] = counts["fraction"] / counts.groupby(["anchor_seed", "layer"])["fraction"].transform("sum")
    from_counts = alignment_dispersion_table(counts)
    pd.testing.assert_frame_equal(from_counts, alignment_dispersion_table(fractions), rtol=HAND_RTOL)
    assert from_counts[["anchor_seed", "layer"]].to_numpy().tolist() == [[9, 0], [9, 1], [2, 0]]
    np.testing.assert_allclose(from_counts["diagonal_share"], [0.75, 0.5, 0.25], rtol=HAND_RTOL)
    np.testing.assert_allclose(from_counts["mean_layer_distance"], [0.25, 0.5, 1.25], rtol=HAND_RTOL)
    # H(0.75, 0.25) / ln 3; H(0.5, 0.5) / ln 3; H(0.25, 0.25, 0.5) / ln 3
    entropy = [scipy.stats.entropy(p) / np.log(3) for p in ([0.75, 0.25], [0.5, 0.5], [0.25, 0.25, 0.5])]
    np.testing.assert_allclose(from_counts["normalized_entropy"], entropy, rtol=HAND_RTOL)
    kurtosis = [scipy.stats.kurtosis(k) for k in ([0, 0, 0, 1], [1, 1, 2, 2], [0, 1, 2, 2])]
    np.testing.assert_allclose(from_counts["kurtosis"], kurtosis, rtol=HAND_RTOL)


def test_dispersion_of_float32_fractions_is_computed_in_float64():
    alignment = hand_alignment_map({0: [0.1, 0.3, 0.6], 1: [0.2, 0.2, 0.6]})
    single = alignment.astype({"fraction": np.float32})
    double = single.astype({"fraction": np.float64})
    pd.testing.assert_frame_equal(
        alignment_dispersion_table(single), alignment_dispersion_table(double), rtol=HAND_RTOL, check_exact=False
    )
    assert (alignment_dispersion_table(single).dtypes.iloc[3:] == np.float64).all()


@pytest.mark.parametrize("n_heads", [1, 2])
def test_commonness_of_one_and_two_head_layers(n_heads):
    similarity = hand_similarity(n_seeds=2, n_layers=2, n_heads=n_heads)
    if n_heads == 2:
        similarity[1, 1, 0, 0, 0, 1] = similarity[1, 1, 0, 1, 0, 0] = 0.6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a 1-head layer must not divide 0 by 0
        table = commonness_table(similarity, [2, 1], "q")
    assert len(table) == 2 * 2 * n_heads
    assert table["seed"].tolist()[: 2 * n_heads] == [2] * (2 * n_heads)
    if n_heads == 1:
        np.testing.assert_allclose(table["commonness"], 1.0)
        assert table["commonness_excl_self"].isna().all()
    else:
        seed1_layer0 = table[(table["seed"] == 1) & (table["layer"] == 0)]
        np.testing.assert_allclose(seed1_layer0["commonness"], (1 + 0.6) / 2, rtol=reduction_rtol(np.float32, 2))
        np.testing.assert_allclose(seed1_layer0["commonness_excl_self"], 0.6, rtol=reduction_rtol(np.float32, 2))
        others = table[(table["seed"] == 2) | (table["layer"] == 1)]
        np.testing.assert_allclose(others["commonness_excl_self"], 0.1, rtol=reduction_rtol(np.float32, 2))


def test_bad_tensors_and_tables_name_the_problem():
    with pytest.raises(
        ValueError,
        match=r"pair similarity must be \[seed_a, seed_b, layer_a, head_a, layer_b, head_b\] with matching layer/head axes; got shape \(2, 2, 3, 2, 2, 2\)",
    ):
        pair_stability_table(np.zeros((2, 2, 3, 2, 2, 2)), [1, 2], "p")
    with pytest.raises(
        ValueError,
        match=r"same-layer similarity must be \[seed_a, seed_b, layer, head_a, head_b\]; got shape \(2, 2, 3, 2, 3\)",
    ):
        pair_stability_table(np.zeros((2, 2, 3, 2, 3)), [1, 2], "p")
    with pytest.raises(
        ValueError,
        match=r"pair similarity must be \[seed_a, seed_b, layer_a, head_a, layer_b, head_b\] \(6 axes\) or same-layer",
    ):
        commonness_table(np.zeros((2, 2, 3)), [1, 2], "p")
    with pytest.raises(ValueError, match=r"pair similarity has 2 x 2 refits but 3 seeds were given \(\[1, 2, 3\]\)"):
        pair_stability_table(hand_similarity(n_seeds=2), [1, 2, 3], "p")
    with pytest.raises(
        ValueError,
        match=r"scope 'cross_layer' is not available for a similarity tensor of shape \(3, 3, 3, 2, 2\); choose from \['same_layer'\]",
    ):
        pair_stability_table(np.zeros((3, 3, 3, 2, 2)), [1, 2, 3], "p", scopes=["cross_layer"])
    with pytest.raises(
        ValueError,
        match=r"pair_table has no scope 'cross_layer' rows; build it with pair_stability_table on the full \[seed_a, seed_b, layer_a, head_a, layer_b, head_b\] tensor",
    ):
        alignment_map_table(pair_stability_table(hand_similarity(), [1, 2, 3], "p", scopes=["same_layer"]))
    missing = r"lacks columns \['similarity'\]; expected \['promptset'"
    pairs = pair_stability_table(hand_similarity(), [1, 2, 3], "p").drop(columns="similarity")
    with pytest.raises(ValueError, match="pair_table " + missing):
        head_stability_table(pairs)
    with pytest.raises(ValueError, match="pair_table " + missing):
        alignment_map_table(pairs)
    with pytest.raises(ValueError, match=r"head_table lacks columns \['n_pairs'\]"):
        layer_stability_table(hand_heads().drop(columns="n_pairs"))
    with pytest.raises(ValueError, match=r"alignment_map lacks columns \['fraction'\]"):
        alignment_dispersion_table(hand_alignment_map({0: [1.0]}).drop(columns="fraction"))
