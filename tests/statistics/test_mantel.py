"""headstab.statistics.mantel: Mantel's r, permutations within strata, and what the strata control for."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from helpers.tolerances import reduction_atol

from headstab.statistics.mantel import MANTEL_COLUMNS, mantel_test, stratified_permutation


def _distances(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    return np.sqrt(((values[:, None] - values[None, :]) ** 2).sum(-1))


def test_a_stratified_permutation_moves_objects_within_their_stratum_only():
    strata = np.array(["b", "a", "b", "c", "a", "b"])
    rng = np.random.default_rng(0)
    for _ in range(50):
        order = stratified_permutation(strata, rng)
        assert sorted(order) == list(range(6)) and (strata[order] == strata).all()


def test_a_stratified_permutation_draws_every_order_of_a_stratum_equally_often():
    rng = np.random.default_rng(1)
    counts = dict.fromkeys(itertools.permutations(range(3)), 0)
    draws = 6000
    for _ in range(draws):
        counts[tuple(stratified_permutation(np.zeros(3), rng))] += 1
    # binomial(6000, 1/6): s.d. 28.9; five s.d. either side
    assert all(abs(count - draws / 6) < 5 * 28.9 for count in counts.values())


def test_mantel_r_is_the_pearson_r_of_the_pair_values():
    rng = np.random.default_rng(2)
    depth, noise = rng.uniform(size=12), rng.normal(size=(12, 3))
    response = _distances(noise) + _distances(depth)
    result = mantel_test(response, depth, np.zeros(12), n_permutations=20, seed=0)
    rows, cols = np.triu_indices(12, k=1)
    expected = np.corrcoef(response[rows, cols], np.abs(depth[rows] - depth[cols]))[0, 1]
    assert result["mantel_r"] == pytest.approx(expected, abs=reduction_atol(np.float64, 66))
    assert list(result) == MANTEL_COLUMNS and result["n_objects"] == 12 and result["n_strata"] == 1


def test_a_planted_depth_gradient_is_found_within_strata():
    """Descriptions that move with depth in every stratum: r high and p at its floor 1 / (1 + permutations)."""
    rng = np.random.default_rng(3)
    depth = np.tile(np.repeat([0.25, 0.5, 0.75, 1.0], 4), 3)
    strata = np.repeat([0, 1, 2], 16)
    response = _distances(np.column_stack([depth + 0.05 * rng.normal(size=48), rng.normal(size=48) * 0.05]))
    result = mantel_test(response, depth, strata, n_permutations=199, seed=0)
    assert result["mantel_r"] > 0.8 and result["p_value"] == 1 / 200
    assert abs(result["null_mean"]) < 0.1


def test_structure_shared_by_a_stratum_is_not_taken_for_a_depth_effect():
    """Planted confound: the two strata (architectures) sit far apart in description space and cover different
    depths, but within each stratum description says nothing about depth. Unrestricted permutations call that
    a depth effect in every dataset; permutations within strata reject at about their level."""
    within_p = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        strata = np.repeat([0, 1], 20)
        depth = np.where(strata == 0, rng.uniform(0.0, 0.5, 40), rng.uniform(0.5, 1.0, 40))
        response = _distances(np.column_stack([5.0 * strata, rng.normal(size=40)]))
        unrestricted = mantel_test(response, depth, np.zeros(40), n_permutations=99, seed=seed)
        within = mantel_test(response, depth, strata, n_permutations=99, seed=seed)
        assert unrestricted["mantel_r"] == within["mantel_r"] > 0.5 and unrestricted["p_value"] == 1 / 100
        within_p.append(within["p_value"])
    # under the null, p < 0.05 in 1 of 20 datasets on average; 5 or more has probability 0.003
    assert sum(p < 0.05 for p in within_p) <= 4 and np.median(within_p) > 0.2


def test_a_constant_distance_gives_no_r_and_bad_shapes_are_named():
    result = mantel_test(_distances(np.arange(5.0)), np.ones(5), np.zeros(5), n_permutations=5, seed=0)
    assert np.isnan(result["mantel_r"]) and np.isnan(result["p_value"])
    assert np.isnan(result["null_mean"]) and np.isnan(result["null_sd"])
    flat = mantel_test(1.0 - np.eye(5), np.arange(5.0), np.zeros(5), n_permutations=5, seed=0)  # response constant
    assert np.isnan(flat["mantel_r"]) and np.isnan(flat["p_value"])
    # three points at equal distances: a constant, nonzero predictor
    triangle = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3) / 2]])
    equilateral = mantel_test(_distances(np.arange(3.0)), triangle, np.zeros(3), 5, 0)
    assert np.isnan(equilateral["mantel_r"]) and np.isnan(equilateral["null_mean"])
    with pytest.raises(ValueError, match=r"square \[n >= 3, n\] distance matrix, got shape \(2, 3\)"):
        mantel_test(np.zeros((2, 3)), np.zeros(2), np.zeros(2), 5, 0)
    with pytest.raises(ValueError, match=r"strata must be \[n\] = \(4,\) labels"):
        mantel_test(np.zeros((4, 4)), np.zeros(4), np.zeros(3), 5, 0)


def test_count_permutations_at_once_are_those_drawn_one_after_the_other():
    strata = np.array([2, 0, 2, 1, 0, 2, 2])
    batch = stratified_permutation(strata, np.random.default_rng(4), count=5)
    one_by_one = np.random.default_rng(4)
    np.testing.assert_array_equal(batch, [stratified_permutation(strata, one_by_one) for _ in range(5)])


def _layer_objects(n_refits: int, n_layers: int, n_heads: int):
    """depth (l + 1) / L, strata (refit) and blocks (refit, layer) of every head, refit-major."""
    refit, layer, _ = np.meshgrid(np.arange(n_refits), np.arange(n_layers), np.arange(n_heads), indexing="ij")
    refit, layer = refit.ravel(), layer.ravel()
    return (layer + 1) / n_layers, refit, refit * n_layers + layer


def test_with_blocks_r_is_still_the_pearson_r_of_the_pair_values():
    rng = np.random.default_rng(7)
    depth, strata, blocks = _layer_objects(3, 4, 2)
    response = _distances(rng.normal(size=(24, 3)) + depth[:, None])
    result = mantel_test(response, depth, strata, n_permutations=10, seed=0, blocks=blocks)
    rows, cols = np.triu_indices(24, k=1)
    expected = np.corrcoef(response[rows, cols], np.abs(depth[rows] - depth[cols]))[0, 1]
    assert result["mantel_r"] == pytest.approx(expected, abs=reduction_atol(np.float64, 276))
    assert result["n_blocks"] == 12 and result["n_strata"] == 3 and result["n_objects"] == 24


def test_a_block_permutation_moves_whole_layers_so_the_null_is_the_mean_over_layer_orders():
    """One refit of 3 layers of 2 heads: the null is r over the 3! orders of the layers, each as likely; computed
    by hand over the orders with numpy's Pearson r, it is the permutation null's mean and s.d."""
    rng = np.random.default_rng(8)
    depth, strata, blocks = _layer_objects(1, 3, 2)
    response = _distances(rng.normal(size=(6, 2)))
    rows, cols = np.triu_indices(6, k=1)
    by_order = []
    for order in itertools.permutations(range(3)):
        moved = (np.array(order)[blocks] + 1) / 3
        by_order.append(np.corrcoef(response[rows, cols], np.abs(moved[rows] - moved[cols]))[0, 1])
    result = mantel_test(response, depth, strata, n_permutations=6000, seed=0, blocks=blocks)
    # the mean of 6000 draws of 6 equally likely values: s.e. sd / sqrt(6000)
    assert result["null_mean"] == pytest.approx(np.mean(by_order), abs=5 * np.std(by_order) / np.sqrt(6000))
    assert result["null_sd"] == pytest.approx(np.std(by_order), rel=0.1)
    observed = by_order[0]  # the identity order
    share = np.mean(np.array(by_order) >= observed - 1e-12)
    assert result["p_value"] == pytest.approx(share, abs=5 * np.sqrt(share * (1 - share) / 6000) + 1 / 6001)


def test_layers_clustered_within_refits_pass_for_depth_when_heads_are_permuted_and_not_when_layers_are():
    """Each refit's layers gather around centroids of their own, in no depth order (what heads that read one
    residual stream look like): permuting single heads breaks the clusters and calls them a depth effect; permuting
    whole layers within refits rejects at about its level."""
    depth, strata, blocks = _layer_objects(6, 4, 4)
    heads, layers = [], []
    for seed in range(30):
        rng = np.random.default_rng(seed)
        centroids = 3.0 * rng.normal(size=(6 * 4, 5))
        response = _distances(centroids[blocks] + 0.3 * rng.normal(size=(96, 5)))
        heads.append(mantel_test(response, depth, strata, n_permutations=99, seed=seed)["p_value"])
        layers.append(mantel_test(response, depth, strata, n_permutations=99, seed=seed, blocks=blocks)["p_value"])
    assert np.mean(np.array(heads) <= 0.05) > 0.8
    # under the null, p <= 0.05 in 1.5 of 30 datasets on average; 6 or more has probability 0.003
    assert sum(p <= 0.05 for p in layers) <= 5 and np.median(layers) > 0.2


def test_blocks_must_share_a_point_and_lie_in_one_stratum():
    depth, strata, blocks = _layer_objects(2, 3, 2)
    response = _distances(depth)
    with pytest.raises(
        ValueError, match=r"^the objects of a block must share their point \(e.g. the heads of one layer its depth\)$"
    ):
        mantel_test(response, depth + np.arange(12) * 0.01, strata, 5, 0, blocks=blocks)
    with pytest.raises(ValueError, match="^every block must lie in one stratum; a block label spans two strata$"):
        mantel_test(response, depth, strata, 5, 0, blocks=blocks % 3)
    with pytest.raises(ValueError, match=r"blocks must be \[n\] = \(12,\) labels, got shape \(6,\)"):
        mantel_test(response, depth, strata, 5, 0, blocks=blocks[:6])
    with pytest.raises(ValueError, match="n_permutations must be >= 1, got 0"):
        mantel_test(response, depth, strata, 0, 0, blocks=blocks)


def test_a_stratified_permutation_by_hand_kth_member_takes_the_member_of_kth_smallest_draw():
    strata = np.random.default_rng(0).integers(0, 3, size=200)  # many ties: an unstable sort would reorder them
    order = stratified_permutation(strata, np.random.default_rng(7))
    draws = np.random.default_rng(7).random((1, 200))[0]
    expected = np.empty(200, dtype=int)
    for stratum in range(3):
        members = np.flatnonzero(strata == stratum)  # ascending
        expected[members] = members[np.argsort(draws[members])]
    np.testing.assert_array_equal(order, expected)


def test_the_null_is_r_over_the_seeds_permutations_in_batches_of_many_objects():
    # 300 objects: orders go in batches of 2**22 // 300**2 = 46, so 100 permutations take 46 + 46 + 8
    rng = np.random.default_rng(8)
    depth, strata = rng.random(300), rng.integers(0, 2, size=300)
    response = _distances(depth + rng.normal(scale=0.5, size=300))
    result = mantel_test(response, depth, strata, 100, seed=3)
    orders = stratified_permutation(strata, np.random.default_rng(3), count=100)
    rows, cols = np.triu_indices(300, k=1)
    null = np.array([np.corrcoef(response[rows, cols], np.abs(depth[o][rows] - depth[o][cols]))[0, 1] for o in orders])
    observed = np.corrcoef(response[rows, cols], np.abs(depth[rows] - depth[cols]))[0, 1]
    assert result["mantel_r"] == pytest.approx(observed, rel=1e-9) and observed > 0.1
    assert result["null_mean"] == pytest.approx(null.mean(), abs=1e-9)
    assert result["null_sd"] == pytest.approx(null.std(), rel=1e-6)
    assert result["p_value"] == pytest.approx(1 / 101)


def test_the_seed_alone_fixes_the_null():
    depth, strata, blocks = _layer_objects(4, 4, 2)
    response = _distances(depth + np.random.default_rng(9).normal(scale=0.3, size=len(depth)))
    runs = [mantel_test(response, depth, strata, 50, seed, blocks=blocks) for seed in (0, 0, 1)]
    assert runs[0] == runs[1] and runs[0]["null_mean"] != runs[2]["null_mean"]


def test_one_permutation_is_enough_and_float32_distances_are_read_in_float64():
    rng = np.random.default_rng(12)
    depth = rng.random(6)
    response = _distances(depth + rng.normal(scale=0.1, size=6)).astype(np.float32) * np.float32(1000.1)
    single = mantel_test(response, depth, np.zeros(6), 1, 0)
    assert single["n_permutations"] == 1 and single["p_value"] in (0.5, 1.0)
    wide = mantel_test(response.astype(np.float64), depth, np.zeros(6), 20, 0)
    assert mantel_test(response, depth, np.zeros(6), 20, 0) == wide


def test_a_response_of_unit_sd_has_an_r_and_constants_give_nan_without_warnings():
    unit = np.zeros((4, 4))
    unit[np.triu_indices(4, k=1)] = [0.5, 2.5, 0.5, 0.5, 2.5, 2.5]  # 1.5 ± 1: s.d. exactly 1
    unit += unit.T
    r = np.corrcoef(unit[np.triu_indices(4, k=1)], _distances(np.arange(4.0))[np.triu_indices(4, k=1)])[0, 1]
    assert mantel_test(unit, np.arange(4.0), np.zeros(4), 5, 0)["mantel_r"] == pytest.approx(r)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for response, points in [
            (np.full((5, 5), 0.1), np.arange(5.0)),  # a constant response
            (_distances(np.arange(5.0)), np.ones(5)),  # a constant predictor: the null is NaN too
            (_distances(np.arange(3.0)), 1e6 * np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3) / 2]])),
        ]:
            result = mantel_test(response, points, np.zeros(len(points)), 5, 0)
            assert np.isnan([result["mantel_r"], result["p_value"], result["null_mean"], result["null_sd"]]).all()


def test_a_response_that_is_not_a_square_matrix_is_named():
    for shape in [(5,), (3, 4)]:
        with pytest.raises(ValueError, match=r"^response must be a square \[n >= 3, n\] distance matrix, got shape "):
            mantel_test(np.zeros(shape), np.zeros(3), np.zeros(3), 5, 0)


def test_every_stratified_order_lists_each_map_within_strata_once_the_identity_first():
    from headstab.statistics.mantel import every_stratified_order

    strata = np.array([1, 0, 1, 0, 1])  # blocks 1, 3 in stratum 0; 0, 2, 4 in stratum 1: 2! x 3! maps
    orders = every_stratified_order(strata)
    assert orders.shape == (12, 5) and len({tuple(order) for order in orders}) == 12
    np.testing.assert_array_equal(orders[0], np.arange(5))
    assert (strata[orders] == strata).all()  # every block goes to a block of its own stratum


def test_few_block_orders_give_the_exact_p_over_all_of_them():
    # 3 blocks of one stratum on a line, the response equal to the predictor: the identity and its reverse
    # (the same distances) are the 2 of 3! orders with the largest r
    points = np.repeat(np.arange(3.0), 2)
    response = np.abs(points[:, None] - points[None, :])
    out = mantel_test(response, points, np.zeros(6), 999, 0, blocks=np.repeat(np.arange(3), 2))
    assert out["n_permutations"] == 6 and out["p_value"] == pytest.approx(2 / 6)
    random = mantel_test(response, points, np.zeros(6), 5, 0, blocks=np.repeat(np.arange(3), 2))
    assert random["n_permutations"] == 5  # 3! > 5: random orders, add-one p
    assert random["p_value"] * 6 == pytest.approx(round(random["p_value"] * 6))
