"""headstab.sections.layer_robustness: drop/swap tables beside layer stability (issue 14 part 3)."""

import math

import numpy as np
import pandas as pd
import pytest
from tolerances import reduction_atol

from headstab.sections.layer_robustness import (
    drop_swap_table,
    extreme_depths,
    robustness_by_layer,
    robustness_correlation,
    robustness_with_stability,
)

N_LAYERS = 4


def _counts(n=100):
    plan = [("drop", layer) for layer in range(N_LAYERS)] + [("swap", layer) for layer in range(N_LAYERS - 1)]
    return {
        "n_predictions": n,
        "intact_loss": n * math.log(10.0),
        "conditions": plan,
        "loss": np.array([n * math.log(10.0 + i) for i in range(len(plan))]),
        "agree": np.array([n - 10 * i for i in range(len(plan))]),
    }


def _stability(seeds):
    """Layer stability falling with depth and differing by refit."""
    return pd.DataFrame(
        [(s, layer, 0.9 - 0.1 * layer + 0.01 * s) for s in seeds for layer in range(N_LAYERS)],
        columns=["anchor_seed", "layer", "mean"],
    )


def test_table_has_perplexities_and_agreement_per_condition():
    table = drop_swap_table(_counts(), seed=7)
    assert table["ppl_intact"].tolist() == pytest.approx([10.0] * 7)
    assert table["ppl"].tolist() == pytest.approx([10.0 + i for i in range(7)])
    assert table["delta_ppl"].tolist() == pytest.approx(list(range(7)))
    assert table["top1_agreement"].tolist() == pytest.approx([1 - 0.1 * i for i in range(7)])
    assert set(table["seed"]) == {7}


def test_a_swap_sits_beside_the_mean_stability_of_its_two_layers():
    table = robustness_with_stability(drop_swap_table(_counts(), seed=1), _stability([1]))
    swaps = table[table["condition"] == "swap"].sort_values("layer")
    expected = [(0.91 - 0.1 * layer + 0.91 - 0.1 * (layer + 1)) / 2 for layer in range(N_LAYERS - 1)]
    assert swaps["stability"].tolist() == pytest.approx(expected)
    drops = table[table["condition"] == "drop"].sort_values("layer")
    assert drops["stability"].tolist() == pytest.approx([0.91 - 0.1 * layer for layer in range(N_LAYERS)])


def test_a_refit_without_layer_stability_is_refused():
    with pytest.raises(ValueError, match=r"no anchor_seed \[2\]"):
        robustness_with_stability(drop_swap_table(_counts(), seed=2), _stability([1]))


def _table(seeds=(1, 2, 3)):
    """Agreement exactly 1 - stability: r = -1 within and across refits."""
    table = pd.concat([drop_swap_table(_counts(), seed=s) for s in seeds], ignore_index=True)
    table = robustness_with_stability(table, _stability(seeds))
    return table.assign(top1_agreement=1.0 - table["stability"])


def test_agreement_tied_to_stability_correlates_at_minus_one():
    correlation = robustness_correlation(_table(), n_boot=100, seed=0, confidence=0.95)
    rows = correlation[(correlation["metric"] == "top1_agreement") & (correlation["condition"] == "drop")]
    assert len(rows) == 3 + 1  # each refit, then across refits
    values = rows[["pearson_r"]].to_numpy()
    np.testing.assert_allclose(values, -1.0, atol=reduction_atol(np.float64, 12))
    across = rows[rows["scope"] == "across_refits"]
    np.testing.assert_allclose(across[["ci_low", "ci_high"]].to_numpy(), -1.0, atol=reduction_atol(np.float64, 12))


def test_mean_over_refits_and_relative_depth():
    by_layer = robustness_by_layer(_table(), N_LAYERS, n_boot=100, seed=0, confidence=0.95)
    drop0 = by_layer[
        (by_layer["condition"] == "drop") & (by_layer["layer"] == 0) & (by_layer["metric"] == "top1_agreement")
    ]
    assert drop0["mean"].item() == pytest.approx(1 - (0.91 + 0.92 + 0.93) / 3)
    assert drop0["relative_depth"].item() == 0.25
    assert drop0["ci_low"].item() <= drop0["mean"].item() <= drop0["ci_high"].item()


def test_extreme_depths_name_the_layers_as_l_over_L():
    by_layer = robustness_by_layer(_table(), N_LAYERS, n_boot=50, seed=0, confidence=0.95)
    pooled = pd.DataFrame({"layer": range(N_LAYERS), "stability": [0.5, 0.9, 0.7, 0.6]})
    depths = extreme_depths(by_layer, pooled, N_LAYERS)
    # agreement = 1 - stability rises with depth: the last layer is the most robust, the first the least
    assert depths == {"r_most_robust": 1.0, "r_least_robust": 0.25, "r_most_stable": 0.5, "r_least_stable": 0.25}
