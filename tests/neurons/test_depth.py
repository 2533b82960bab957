"""headstab.neurons.depth: the excess correlation of MLP neurons by layer, its jackknife pseudo-values over
refits, and the mid-depth dip test on them (known answers by hand, planted dips and bumps)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from headstab.neurons.depth import DEPTH_COLUMNS, excess_correlations, excess_pseudo_values, neuron_depth_table
from headstab.statistics.calibration import calibration_label


def _pairs(values: np.ndarray) -> np.ndarray:
    """[anchor, other, layer, neuron] with NaN on the diagonal."""
    values = np.array(values, dtype=np.float64)
    n = values.shape[0]
    values[np.arange(n), np.arange(n)] = np.nan
    return values


def _outlier_refit(n_layers: int = 1) -> np.ndarray:
    """4 refits whose pairs reach 0.9 except those with refit 3 (0.0): one neuron per layer."""
    values = np.full((4, 4, n_layers, 1), 0.9)
    values[3, :], values[:, 3] = 0.0, 0.0
    return _pairs(values)


def test_excess_correlation_by_hand():
    # anchors 0-2: partner mean (0.9 + 0.9 + 0) / 3 = 0.6; anchor 3: 0; mean over the 4 anchors 0.45
    pair_max = _outlier_refit()
    assert excess_correlations(pair_max, _pairs(np.zeros_like(pair_max))) == pytest.approx([0.45], abs=1e-15)
    assert excess_correlations(pair_max, _pairs(np.full_like(pair_max, 0.2))) == pytest.approx([0.25], abs=1e-15)


def test_pseudo_values_by_hand():
    """theta = 0.45; without refit 3 every anchor has 0.9; without refit 0 anchors 1 and 2 have (0.9 + 0) / 2 and
    refit 3 has 0, a mean of 0.3: pseudo-values 4 * 0.45 - 3 * theta_(-r)."""
    pair_max = _outlier_refit(n_layers=2)
    pair_max[:, :, 1] = 0.5  # a second layer alike in every pair: its pseudo-values are its value
    pair_max[np.arange(4), np.arange(4)] = np.nan
    psi = excess_pseudo_values(pair_max, _pairs(np.zeros_like(pair_max)))
    assert psi[:, 0] == pytest.approx([0.9, 0.9, 0.9, -0.9], abs=1e-12)
    assert psi[:, 1] == pytest.approx([0.5] * 4, abs=1e-12)


def test_identical_refits_give_every_refit_the_layer_value_itself():
    rng = np.random.default_rng(0)
    levels = rng.uniform(0.2, 0.9, size=(3, 16))  # [layer, neuron], the same for every pair
    pair_max = _pairs(np.broadcast_to(levels, (5, 5, 3, 16)))
    pair_null = _pairs(np.full_like(pair_max, 0.1))
    theta = excess_correlations(pair_max, pair_null)
    assert theta == pytest.approx(levels.mean(axis=1) - 0.1, abs=1e-14)
    assert excess_pseudo_values(pair_max, pair_null) == pytest.approx(np.tile(theta, (5, 1)), abs=1e-12)


def test_dead_neurons_are_left_out_and_a_dead_layer_is_nan():
    pair_max = _pairs(np.full((3, 3, 2, 4), 0.9))
    pair_max[:, :, 0, 3] = np.nan  # a neuron dead in every refit
    pair_max[:, :, 1] = np.nan  # a layer without a live neuron
    assert excess_correlations(pair_max, _pairs(np.zeros_like(pair_max))) == pytest.approx([0.9, np.nan], nan_ok=True)
    table = neuron_depth_table(np.concatenate([pair_max] * 2, axis=2)[:, :, :3], _pairs(np.zeros((3, 3, 3, 4))),
                               permutations=100, seed=1)  # fmt: skip
    _assert_untested(table, 3, 3, "a layer has no live neuron in some leave-one-out study")


def test_one_live_neuron_is_enough_for_a_layer_and_no_warning_is_raised():
    pair_max = _pairs(np.full((3, 3, 2, 2), 0.7))
    pair_max[:, :, 1] = np.nan
    pair_max[0, 1:, 1, 0] = 0.6  # layer 1: only anchor 0's neuron 0 is live (its partners 1 and 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a dead layer is NaN by rule, not by a 0 / 0 warning
        values = excess_correlations(pair_max, _pairs(np.zeros_like(pair_max)))
        alone = excess_correlations(pair_max[:, :, 1:], _pairs(np.zeros_like(pair_max[:, :, 1:])))
    assert values == pytest.approx([0.7, 0.6], abs=1e-15)
    pair_max[0, 1:, 1, 0] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(excess_correlations(pair_max, _pairs(np.zeros_like(pair_max)))[1])
    assert alone == pytest.approx([0.6])


def test_drawn_sign_vectors_follow_the_seed():
    """11 refits: 2**11 sign vectors exceed 100 permutations, so the p-value is drawn; it is mid_depth_test's on the
    pseudo-values with the table's seed, and another seed draws other vectors."""
    from headstab.statistics.layer_tests import mid_depth_test

    rng = np.random.default_rng(5)
    pair_max = _pairs(rng.uniform(0.2, 0.8, size=(11, 11, 3, 8)))
    pair_null = _pairs(np.full_like(pair_max, 0.2))
    psi = excess_pseudo_values(pair_max, pair_null)
    p_values = {}
    for seed in (1, 2):
        row = neuron_depth_table(pair_max, pair_null, permutations=100, seed=seed).iloc[0]
        expected = mid_depth_test(psi, 100, seed)
        assert row["p_value"] == expected["p_value"] and row["n_signs"] == 100
        p_values[seed] = row["p_value"]
    assert p_values[1] != p_values[2]


def _planted(profile: list[float], n: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """n refits, one layer per profile value: that share of 20 neurons at 0.9 in every pair, the rest at the
    null's 0.1, so a layer's excess correlation is 0.8 x its share."""
    values = np.full((n, n, len(profile), 20), 0.1)
    for layer, share in enumerate(profile):
        values[:, :, layer, : int(round(share * 20))] = 0.9
    return _pairs(values), _pairs(np.full_like(values, 0.1))


def test_a_planted_dip_is_found_at_the_smallest_p_and_a_bump_is_not():
    dip = neuron_depth_table(*_planted([0.6, 0.2, 0.3, 0.5]), permutations=1000, seed=1).iloc[0]
    assert list(dip.index) == DEPTH_COLUMNS
    assert (dip["statistic"], dip["test"], dip["note"]) == ("excess_correlation", "mid_depth_dip", "")
    assert dip["estimate"] == pytest.approx(0.8 * ((0.6 + 0.5) / 2 - (0.2 + 0.3) / 2), abs=1e-12)
    assert dip["p_value"] == pytest.approx(1 / 32) and dip["min_p"] == pytest.approx(1 / 32)  # 2**5 exact flips
    assert (dip["n_refits"], dip["n_layers"], dip["n_signs"]) == (5, 4, 32)
    bump = neuron_depth_table(*_planted([0.2, 0.6, 0.5, 0.3]), permutations=1000, seed=1).iloc[0]
    assert bump["estimate"] == pytest.approx(0.8 * -0.3, abs=1e-12) and bump["p_value"] == 1.0


def test_the_dip_is_read_from_the_end_layers_not_the_first_two():
    # ends (0.5 + 0.5) / 2 minus interior (0.1 + 0.5) / 2 = 0.2 of share; the first two minus the last two: -0.2
    row = neuron_depth_table(*_planted([0.5, 0.1, 0.5, 0.5]), permutations=1000, seed=1).iloc[0]
    assert row["estimate"] == pytest.approx(0.8 * 0.2, abs=1e-12)


def _assert_untested(table, n_refits: int, n_layers: int, note: str) -> None:
    """One row naming the statistic and test, every number NaN, no sign vector, the registry's label, the reason."""
    assert list(table.columns) == DEPTH_COLUMNS and len(table) == 1
    row = table.iloc[0]
    assert (row["statistic"], row["test"], row["n_refits"], row["n_layers"]) == (
        "excess_correlation",
        "mid_depth_dip",
        n_refits,
        n_layers,
    )
    assert row[["estimate", "p_value", "min_p"]].isna().all() and row["n_signs"] == 0
    assert row["calibration"] == calibration_label("neuron_mid_depth_sign_flip", n_refits)
    assert row["note"].startswith(note)


def test_too_few_layers_or_refits_give_nan_with_the_reason():
    _assert_untested(
        neuron_depth_table(*_planted([0.6, 0.2]), permutations=100, seed=1), 5, 2, "needs at least 3 layers"
    )
    _assert_untested(
        neuron_depth_table(*_planted([0.6, 0.2, 0.6], n=2), permutations=100, seed=1), 2, 3, "needs at least 3 refits"
    )
    with pytest.raises(ValueError, match="at least 3 refits"):
        excess_pseudo_values(*_planted([0.6, 0.2, 0.6], n=2))


def test_the_calibration_label_follows_the_registry(monkeypatch):
    import headstab.neurons.depth as depth

    monkeypatch.setattr(depth, "calibration_label", lambda method, n: f"{method} at {n}")
    row = neuron_depth_table(*_planted([0.6, 0.2, 0.3, 0.5]), permutations=100, seed=1).iloc[0]
    assert row["calibration"] == "neuron_mid_depth_sign_flip at 5"
    assert calibration_label("neuron_mid_depth_sign_flip", 4) == "calibrated"  # the registry's measured min_n
