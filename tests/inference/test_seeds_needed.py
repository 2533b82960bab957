"""The seeds-needed curve shrinks like 1/sqrt(n), and the needed n is read off or extrapolated."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headstab.inference.seeds_needed import seeds_needed, seeds_needed_curve, subset_sizes


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
