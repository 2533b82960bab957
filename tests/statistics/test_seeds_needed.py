"""The seeds-needed curve shrinks like 1/sqrt(n), and the needed n is read off or extrapolated."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_rtol

from headstab.statistics.seeds_needed import (
    CURVE_COLUMNS,
    NEEDED_COLUMNS,
    seeds_needed,
    seeds_needed_curve,
    subset_sizes,
)


def test_subset_sizes_span_three_to_all():
    assert subset_sizes(3) == [3]
    sizes = subset_sizes(50)
    assert sizes[0] == 3 and sizes[-1] == 50 and len(sizes) <= 10
    with pytest.raises(ValueError, match="at least 3 refits"):
        subset_sizes(2)


def test_width_shrinks_like_one_over_sqrt_n():
    rng = np.random.default_rng(0)
    n_seeds, n_groups = 32, 40
    refit = rng.normal(scale=0.1, size=n_seeds)
    noise = rng.normal(scale=0.02, size=(n_groups, n_seeds, n_seeds))
    values = 0.5 + refit[None, :, None] + refit[None, None, :] + (noise + noise.transpose(0, 2, 1)) / 2
    grouped = values[..., None, None, None].astype(np.float32)
    curve = seeds_needed_curve(grouped, np.ones(n_groups), n_boot=300, n_subsets=6, seed=1, confidence=0.95)
    layer = curve[curve["statistic"] == "layer_stability"].set_index("n_refits")["ci_width"]
    ratio = layer.loc[9] / layer.loc[32]
    assert 1.5 <= ratio <= 2.3, ratio  # 1/sqrt(n): sqrt(32 / 9) = 1.89
    assert set(curve["statistic"]) == {"layer_stability", "delta_s"}


def test_needed_n_read_off_the_curve_or_extrapolated():
    curve = pd.DataFrame(
        {
            "statistic": "layer_stability",
            "layer": 0,
            "n_refits": [2, 4, 8],
            "ci_width": [0.08, 0.04, 0.02],
            "ci_width_sd": 0.0,
            "n_subsets": 5,
            "n_boot": 100,
        }
    )
    assert seeds_needed(curve, 0.05).loc[0, "n_refits_needed"] == 4
    extrapolated = seeds_needed(curve, 0.01).iloc[0]
    assert extrapolated["extrapolated"] and extrapolated["n_refits_needed"] == 32  # 8 * (0.02 / 0.01)^2
    # A narrow width at a small size that widens again does not count: every larger size must stay below.
    bumpy = curve.assign(ci_width=[0.005, 0.04, 0.009])
    assert seeds_needed(bumpy, 0.01).loc[0, "n_refits_needed"] == 8


def test_subset_sizes_are_rounded_geometric_steps():
    def by_hand(n, count):  # 3 (n / 3)^(k / (count - 1)), k = 0 .. count - 1
        return sorted({round(3 * (n / 3) ** (k / (count - 1))) for k in range(count)})

    assert subset_sizes(50) == by_hand(50, 10) == [3, 4, 6, 8, 10, 14, 20, 27, 37, 50]
    assert subset_sizes(50, max_sizes=4) == by_hand(50, 4)
    assert subset_sizes(6) == [3, 4, 5, 6]  # num = n - 2: every size once
    assert subset_sizes(10) == by_hand(10, 8) == [3, 4, 5, 6, 7, 8, 10]  # 8 steps: 9 is skipped
    with pytest.raises(ValueError, match="got 2"):
        subset_sizes(2)


def scaled_layers(rng, n_seeds, n_groups):
    """[group, a, b, layer, 1, 1]: layer 1 is twice layer 0 (positive values), so its stability is too."""
    base = rng.random((n_groups, n_seeds, n_seeds)) + 0.5
    base = (base + base.transpose(0, 2, 1)) / 2
    return np.stack([base, 2 * base], axis=-1)[..., None, None].astype(np.float32)


def test_curve_widths_scale_with_the_layer_and_the_gap_follows_the_smaller_layer():
    grouped = scaled_layers(np.random.default_rng(3), n_seeds=5, n_groups=4)
    curve = seeds_needed_curve(grouped, np.array([1, 2, 1, 3]), n_boot=40, n_subsets=3, seed=2, confidence=0.8)
    assert list(curve.columns) == CURVE_COLUMNS
    rows = curve.set_index(["statistic", "layer", "n_refits"]).sort_index()
    assert sorted(set(curve["n_refits"])) == subset_sizes(5)
    layer0, layer1, gap = rows.loc[("layer_stability", 0)], rows.loc[("layer_stability", 1)], rows.loc[("delta_s", -1)]
    rtol = reduction_rtol(np.float32, 4 + 5)  # float32 mixing of the groups, then the pair sums
    # A percentile interval scales with its statistic; delta_s = 2 s - s = s, layer 0's own width
    np.testing.assert_allclose(layer1["ci_width"], 2 * layer0["ci_width"], rtol=rtol)
    np.testing.assert_allclose(layer1["ci_width_sd"], 2 * layer0["ci_width_sd"], rtol=rtol)
    np.testing.assert_allclose(gap["ci_width"], layer0["ci_width"], rtol=rtol)
    np.testing.assert_allclose(gap["ci_width_sd"], layer0["ci_width_sd"], rtol=rtol)
    assert (layer0["ci_width"] > 0).all() and (layer0.loc[[3, 4], "ci_width_sd"] > 0).all()
    assert list(layer0["n_subsets"]) == [3, 3, 1] and layer0.loc[5, "ci_width_sd"] == 0.0  # all refits: one subset
    assert (curve["n_boot"] == 40).all()
    one = seeds_needed_curve(grouped, np.ones(4), n_boot=10, n_subsets=1, seed=0, confidence=0.8)
    assert (one["ci_width_sd"] == 0.0).all() and (one["n_subsets"] == 1).all()  # one subset: no spread
    two = seeds_needed_curve(grouped, np.ones(4), n_boot=10, n_subsets=2, seed=0, confidence=0.8)
    spread = two[two["n_refits"] < 5]["ci_width_sd"]
    assert np.isfinite(spread).all() and (spread > 0).all()  # the s.d. (ddof 1) of two subsets' widths
    pd.testing.assert_frame_equal(
        curve, seeds_needed_curve(grouped, np.array([1, 2, 1, 3]), n_boot=40, n_subsets=3, seed=2, confidence=0.8)
    )


def test_self_similarity_blocks_never_enter_the_curve():
    grouped = scaled_layers(np.random.default_rng(5), n_seeds=6, n_groups=3)
    other = grouped.copy()
    diagonal = np.arange(6)
    other[:, diagonal, diagonal] = 50.0  # a refit against itself: subsets must hold distinct refits
    args = dict(n_boot=20, n_subsets=4, seed=1, confidence=0.9)
    pd.testing.assert_frame_equal(
        seeds_needed_curve(grouped, np.ones(3), **args), seeds_needed_curve(other, np.ones(3), **args)
    )


def test_identical_refits_need_no_more_refits():
    grouped = np.full((3, 4, 4, 2, 2, 2), 0.6, dtype=np.float32)
    curve = seeds_needed_curve(grouped, np.ones(3), n_boot=20, n_subsets=2, seed=0, confidence=0.9)
    assert (curve["ci_width"] == 0).all()
    needed = seeds_needed(curve, 0.01)
    assert (needed["n_refits_needed"] == 3).all() and not needed["extrapolated"].any()


def test_needed_per_statistic_and_layer_in_curve_order_from_unsorted_sizes():
    rows = [("delta_s", -1, n, w) for n, w in ((8, 0.03), (2, 0.2), (4, 0.05))]
    rows += [("layer_stability", 1, n, w) for n, w in ((4, 0.04), (8, 0.02), (2, 0.08))]
    rows += [("layer_stability", 0, n, w) for n, w in ((8, 0.05), (4, 0.07))]
    rows += [("layer_stability", 2, n, w) for n, w in ((2, 0.08), (8, 0.04), (4, 0.05))]
    curve = pd.DataFrame(rows, columns=["statistic", "layer", "n_refits", "ci_width"])
    needed = seeds_needed(curve, 0.04)
    assert list(needed.columns) == NEEDED_COLUMNS
    keys = [("delta_s", -1), ("layer_stability", 1), ("layer_stability", 0), ("layer_stability", 2)]
    assert list(zip(needed["statistic"], needed["layer"])) == keys
    gap, layer, wide = needed.iloc[0], needed.iloc[1], needed.iloc[2]
    assert gap["n_refits_needed"] == 8 and not gap["extrapolated"]  # 4 refits are still above
    assert layer["n_refits_needed"] == 4 and not layer["extrapolated"]  # a width equal to the tolerance is met
    assert wide["extrapolated"] and wide["n_refits_needed"] == 13  # ceil(8 (0.05 / 0.04)^2) = ceil(12.5)
    assert (needed["tolerance"] == 0.04).all() and (needed["n_refits_available"] == 8).all()
    assert list(needed["ci_width_at_available"]) == [0.03, 0.02, 0.05, 0.04]
    at = needed.iloc[3]
    assert at["n_refits_needed"] == 8 and not at["extrapolated"]  # the full set's width equals the tolerance
    for bad in (0.0, -0.1):
        with pytest.raises(ValueError, match=rf"statistics.seeds_needed_tolerance.*got {bad}"):
            seeds_needed(curve, bad)


def test_widths_carry_the_label_of_the_interval_they_measure_at_each_subsets_refits(monkeypatch):
    from headstab.statistics import calibration

    methods = dict(calibration.METHODS)
    methods["multibootstrap_pooled"] = calibration.Method("multibootstrap_pooled", "interval", "refits", 5, "")
    monkeypatch.setattr(calibration, "METHODS", methods)
    rng = np.random.default_rng(2)
    grouped = rng.random((4, 6, 6, 1, 2, 2)).astype(np.float32)
    curve = seeds_needed_curve(grouped, np.full(4, 3), n_boot=20, n_subsets=2, seed=0, confidence=0.9)
    layer = curve[curve["statistic"] == "layer_stability"]
    expected = ["calibrated" if n >= 5 else "descriptive" for n in layer["n_refits"]]
    assert layer["ci_calibration"].tolist() == expected and "calibrated" in expected and "descriptive" in expected
    assert set(curve[curve["statistic"] == "delta_s"]["ci_calibration"]) == {"descriptive"}  # the gap's own method
    needed = seeds_needed(curve, 0.5).set_index("statistic")
    assert needed.loc["layer_stability", "ci_calibration"] == "calibrated"  # at the 6 refits available
    assert needed.loc["delta_s", "ci_calibration"] == "descriptive"
