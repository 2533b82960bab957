"""Heads beside neurons by layer: the layer-label permutations stay within an architecture, the rank test's
p-value is the hand-counted one, uniform (KS) under a null whose architectures differ in both measures, and small
under a planted association; the layer table joins each architecture's layers and names a missing one."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import false_discovery_control, kstest, spearmanr

from headstab.neurons.head_layers import (
    LAYER_COLUMNS,
    RANK_COLUMNS,
    RANK_METHOD,
    head_neuron_layer_table,
    layer_permutations,
    rank_correlation_table,
    rank_permutation_test,
)


def test_every_within_group_permutation_is_enumerated_once_when_they_fit():
    groups = ["a", "a", "b", "b", "b"]
    permutations, exact = layer_permutations(groups, 12, seed=0)
    assert exact and permutations.shape == (2 * 6, 5)
    assert len({tuple(row) for row in permutations}) == 12
    assert set(map(tuple, np.sort(permutations[:, :2], axis=1))) == {(0, 1)}
    assert set(map(tuple, np.sort(permutations[:, 2:], axis=1))) == {(2, 3, 4)}
    assert (0, 1, 2, 3, 4) in {tuple(row) for row in permutations}


def test_drawn_permutations_stay_within_their_group():
    groups = np.repeat(["x", "y", "z"], 5)
    permutations, exact = layer_permutations(groups, 11, seed=3)  # 5!^3 > 11: drawn
    assert not exact and permutations.shape == (11, 15)
    for start in (0, 5, 10):
        block = np.sort(permutations[:, start : start + 5], axis=1)
        np.testing.assert_array_equal(block, np.tile(np.arange(start, start + 5), (11, 1)))
    assert len({tuple(row) for row in permutations}) > 1
    np.testing.assert_array_equal(layer_permutations(groups, 11, seed=3)[0], permutations)
    assert not np.array_equal(layer_permutations(groups, 11, seed=4)[0], permutations)


def test_a_monotone_layer_order_has_rho_one_and_the_exact_p_two_of_twenty_four():
    head = np.array([0.1, 0.2, 0.3, 0.4])
    neuron = np.array([1.0, 5.0, 7.0, 9.0])  # same order, other spacing: Spearman 1
    found = rank_permutation_test(head, neuron, ["g"] * 4, n_permutations=100, seed=0)
    assert found["rho"] == pytest.approx(1.0, abs=1e-12)
    assert found["exact"] and found["n_permutations"] == math.factorial(4)
    assert found["p_value"] == pytest.approx(2 / 24)  # the identity and the reversal (|rho| = 1)


def test_rho_is_scipys_spearman_and_nan_units_are_dropped():
    rng = np.random.default_rng(1)
    head, neuron = rng.normal(size=9), rng.normal(size=9)
    head[4] = np.nan
    found = rank_permutation_test(head, neuron, np.repeat([0, 1, 2], 3), n_permutations=50, seed=0)
    keep = np.isfinite(head)
    assert found["rho"] == pytest.approx(spearmanr(head[keep], neuron[keep]).statistic, abs=1e-12)
    assert found["n_units"] == 8 and not found["exact"] and found["n_permutations"] == 50
    constant = rank_permutation_test(np.ones(5), neuron[:5], [0] * 5, n_permutations=10, seed=0)
    assert math.isnan(constant["rho"]) and math.isnan(constant["p_value"])


def _is_empty(found, n_units):
    """The NaN result: no rho, no p-value, no permutation used."""
    assert sorted(found) == ["exact", "n_permutations", "n_units", "p_value", "rho"]
    assert math.isnan(found["rho"]) and math.isnan(found["p_value"])
    assert found["n_units"] == n_units and found["n_permutations"] == 0 and found["exact"] is False


def test_three_units_are_enough_and_fewer_or_a_constant_measure_give_nan():
    reversed_order = rank_permutation_test([0.1, 0.2, 0.3], [9.0, 5.0, 1.0], [0] * 3, n_permutations=10, seed=0)
    assert reversed_order["rho"] == pytest.approx(-1.0, abs=1e-12) and reversed_order["exact"]
    assert reversed_order["p_value"] == pytest.approx(2 / 6) and reversed_order["n_permutations"] == 6
    _is_empty(rank_permutation_test([0.1, np.nan, 0.3], [9.0, 5.0, 1.0], [0] * 3, 10, seed=0), n_units=2)
    _is_empty(rank_permutation_test([0.1, 0.2, 0.3, 0.4], [2.0] * 4, [0] * 4, 10, seed=0), n_units=4)
    # a measure spanning exactly 1 is not constant
    spans_one = rank_permutation_test([0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 1.0, 1.0], [0] * 4, 100, seed=0)
    assert spans_one["rho"] == pytest.approx(spearmanr([1, 2, 3, 4], [0, 0, 1, 1]).statistic, abs=1e-12)


def test_missing_values_given_as_none_are_dropped_like_nan():
    head = [0.4, None, 0.1, 0.3, 0.2, 0.5]
    neuron = [1.0, 2.0, 3.0, None, 4.0, 6.0]
    found = rank_permutation_test(head, neuron, [0] * 6, n_permutations=100, seed=0)
    assert found["n_units"] == 4 and found["exact"] and found["n_permutations"] == 24
    assert found["rho"] == pytest.approx(spearmanr([0.4, 0.1, 0.2, 0.5], [1.0, 3.0, 4.0, 6.0]).statistic, abs=1e-12)


def test_the_drawn_p_value_counts_the_observed_order_among_the_seeds_draws():
    rng = np.random.default_rng(6)
    groups = np.repeat(["a", "b", "c"], 6)
    head = rng.normal(size=18)
    neuron = 0.3 * head + rng.normal(size=18)
    rho = spearmanr(head, neuron).statistic
    p_values = []
    for seed in (0, 1):
        permutations, exact = layer_permutations(groups, 99, seed)
        permuted = np.array([spearmanr(head, neuron[order]).statistic for order in permutations])
        extreme = int((np.abs(permuted) >= abs(rho) - 1e-9).sum())
        found = rank_permutation_test(head, neuron, groups, n_permutations=99, seed=seed)
        assert not exact and not found["exact"] and found["n_permutations"] == 99
        assert found["p_value"] == pytest.approx((1 + extreme) / (1 + 99), abs=1e-12)
        p_values.append(found["p_value"])
    # the seed matters: seed 0's draws hold 26 orders as extreme as the observed one, seed 1's hold 38
    assert p_values == pytest.approx([27 / 100, 39 / 100], abs=1e-12)


def _null_study(rng, n_arch=3, n_layers=6, planted=0.0):
    """Layers of n_arch architectures: each architecture's level is shared by both measures (an association
    across architectures only), and within one the layers' values are independent unless `planted`."""
    groups = np.repeat(np.arange(n_arch), n_layers)
    level = rng.normal(scale=3.0, size=n_arch)[groups]
    head = level + rng.normal(size=groups.size)
    neuron = level + planted * (head - level) + rng.normal(size=groups.size)
    return head, neuron, groups


def test_the_permutation_p_is_uniform_under_a_null_with_architecture_levels():
    rng = np.random.default_rng(2026)
    p_values = [rank_permutation_test(*_null_study(rng), n_permutations=199, seed=s)["p_value"] for s in range(300)]
    # Pooled over architectures the levels make rho large; within architectures the p-value stays uniform.
    assert kstest(p_values, "uniform").pvalue > 0.01
    assert np.mean(np.asarray(p_values) <= 0.05) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 300)


def test_a_planted_within_architecture_association_is_found():
    rng = np.random.default_rng(7)
    p_values = [
        rank_permutation_test(*_null_study(rng, planted=3.0), n_permutations=199, seed=s)["p_value"] for s in range(20)
    ]
    assert np.mean(np.asarray(p_values) <= 0.05) >= 0.9


def _chance_rows(arch, n_layers, scope="same_layer", promptset="primary"):
    return [
        {
            "architecture": arch,
            "promptset": promptset,
            "scope": scope,
            "layer": layer,
            "n_refits": 4,
            "above_null": 0.1 * layer,
            "above_null_ci_low": 0.1 * layer - 0.01,
            "above_null_ci_high": 0.1 * layer + 0.01,
            "one_to_one_above_null": 0.2 * layer,
            "one_to_one_above_null_ci_low": 0.2 * layer - 0.02,
            "one_to_one_above_null_ci_high": 0.2 * layer + 0.02,
        }
        for layer in range(n_layers)
    ]


def _share(n_layers, shares):
    return pd.DataFrame(
        {
            "layer": range(n_layers),
            "universal_share": shares,
            "ci_low": np.asarray(shares) - 0.05,
            "ci_high": np.asarray(shares) + 0.05,
            "null_share": 0.0,
            "null_ci_low": 0.0,
            "null_ci_high": 0.0,
            "excess": np.asarray(shares) / 2,
            "excess_ci_low": 0.0,
            "excess_ci_high": 1.0,
            "n_refits": 3,
            "calibration": "descriptive",
        }
    )


def test_the_layer_table_sets_each_layers_heads_beside_its_neurons():
    chance = pd.DataFrame(
        _chance_rows("a", 2) + _chance_rows("b", 3) + _chance_rows("a", 2, scope="cross_layer") + _chance_rows("c", 2)
    )
    layers = head_neuron_layer_table(chance, {"a": _share(2, [0.3, 0.1]), "b": _share(3, [0.5, 0.2, 0.4])}, "primary")
    assert list(layers.columns) == LAYER_COLUMNS
    assert list(zip(layers["architecture"], layers["layer"])) == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2)]
    assert layers["n_layers"].tolist() == [2, 2, 3, 3, 3]
    np.testing.assert_allclose(layers["relative_depth"], [0.5, 1.0, 1 / 3, 2 / 3, 1.0])
    np.testing.assert_allclose(layers["above_null"], [0.0, 0.1, 0.0, 0.1, 0.2])
    np.testing.assert_allclose(layers["universal_share"], [0.3, 0.1, 0.5, 0.2, 0.4])
    np.testing.assert_allclose(layers["neuron_ci_high"], [0.35, 0.15, 0.55, 0.25, 0.45])
    assert set(layers["n_head_refits"]) == {4} and set(layers["neuron_n_refits"]) == {3}
    with pytest.raises(ValueError, match=r"architecture 'b', prompt set 'primary', layer\(s\) \[2\]"):
        head_neuron_layer_table(pd.DataFrame(_chance_rows("b", 2)), {"b": _share(3, [0.5, 0.2, 0.4])}, "primary")
    empty = head_neuron_layer_table(chance, {}, "primary")
    assert empty.empty and list(empty.columns) == LAYER_COLUMNS


def test_the_rank_table_has_every_measure_pair_with_bh_q_values_and_is_descriptive():
    rng = np.random.default_rng(4)
    layers = pd.DataFrame(
        {
            "architecture": np.repeat(["a", "b"], 4),
            "above_null": rng.normal(size=8),
            "one_to_one_above_null": rng.normal(size=8),
            "universal_share": rng.uniform(size=8),
            "excess": rng.uniform(size=8),
        }
    )
    layers.loc[2, "excess"] = np.nan
    table = rank_correlation_table(layers, n_permutations=1000, seed=0)
    assert list(table.columns) == RANK_COLUMNS and len(table) == 4
    assert table["exact"].tolist() == [True] * 4 and table["n_permutations"].tolist() == [24 * 24, 6 * 24] * 2
    assert table["n_units"].tolist() == [8, 7, 8, 7]
    np.testing.assert_allclose(table["q_value"], false_discovery_control(table["p_value"].to_numpy()))
    assert set(table["calibration"]) == {"descriptive"} and set(table["n_architectures"]) == {2}
    row = table[(table["head_measure"] == "above_null") & (table["neuron_measure"] == "excess")].iloc[0]
    keep = layers["excess"].notna()
    rho = spearmanr(layers["above_null"][keep], layers["excess"][keep]).statistic
    assert row["spearman_rho"] == pytest.approx(rho, abs=1e-12)


def test_the_rank_table_draws_with_its_seed_and_labels_by_architectures(monkeypatch):
    """Drawn permutations (3!^4 > 99) are the seed's; planted: calibrated from 4 architectures on."""
    from headstab.statistics import calibration

    planted = calibration.Method(RANK_METHOD, "p_value", "architectures", 4, "head-neuron rank correlation")
    monkeypatch.setitem(calibration.METHODS, RANK_METHOD, planted)
    rng = np.random.default_rng(8)
    measures = ["above_null", "one_to_one_above_null", "universal_share", "excess"]
    layers = pd.DataFrame(rng.normal(size=(12, 4)), columns=measures)
    layers["architecture"] = np.repeat(["a", "b", "c", "d"], 3)
    table = rank_correlation_table(layers, n_permutations=99, seed=3)
    assert table["exact"].tolist() == [False] * 4 and table["n_permutations"].tolist() == [99] * 4
    for row in table.itertuples():
        found = rank_permutation_test(
            layers[row.head_measure], layers[row.neuron_measure], layers["architecture"], 99, seed=3
        )
        assert row.p_value == found["p_value"] and row.spearman_rho == found["rho"]
    assert table["calibration"].tolist() == ["calibrated"] * 4
    two = rank_correlation_table(layers[layers["architecture"] != "d"], n_permutations=99, seed=3)
    assert two["calibration"].tolist() == ["descriptive"] * 4
