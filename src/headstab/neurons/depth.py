"""Do MLP neurons become less universal at mid-depth? The paper's claim for head stability (§4.6) and Gurnee et al.
2024's observation for neurons (their universal share dips there), tested for neurons with refits as units.

The tested statistic is a layer's excess correlation: the mean over live anchor neurons of the maximum
correlation averaged over partner refits minus the same of the null maxima (Gurnee et al.'s "excess
correlation"), every refit an anchor. Each refit's jackknife pseudo-value of it (`excess_pseudo_values`):
psi_r = n theta - (n - 1) theta_(-r), theta_(-r) without refit r as anchor or partner. The dip of a refit is the
mean of its two end layers' pseudo-values minus its interior layers' mean, and
`headstab.statistics.layer_tests.mid_depth_test` gives the one-sided sign-flip p-value over refits (a dip: > 0),
as the heads' `mid_depth_dip` row of layer_tests.csv does. Not the universal share itself:
a share of neurons above a threshold is not smooth in the refits, and the sign-flip test of its pseudo-values is
liberal at 50 refits (docs/statistics.md); the share's dip is described by its intervals only. Method
`neuron_mid_depth_sign_flip`: layers that differ in their universal share, spread and chance floor with no dip,
and refit-specific layer offsets.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headstab.neurons.shares import neuron_scores
from headstab.statistics.calibration import calibration_label
from headstab.statistics.layer_tests import mid_depth_test

__all__ = ["DEPTH_COLUMNS", "DEPTH_METHOD", "excess_correlations", "excess_pseudo_values", "neuron_depth_table"]

DEPTH_METHOD = "neuron_mid_depth_sign_flip"
DEPTH_COLUMNS = [
    "statistic",
    "test",
    "estimate",
    "p_value",
    "min_p",
    "n_refits",
    "n_layers",
    "n_signs",
    "calibration",
    "note",
]


def excess_correlations(pair_max: np.ndarray, pair_null: np.ndarray) -> np.ndarray:
    """Per layer, the mean over live anchor neurons of (partner-mean maximum - partner-mean null maximum), float64
    [layer]; NaN for a layer without a live neuron. pair_max, pair_null: [anchor, other, layer, neuron]
    (`stack_pairs`), >= 2 refits."""
    scores = neuron_scores(pair_max, pair_null)  # the excess does not depend on the threshold
    live = np.isfinite(scores["max"]) & np.isfinite(scores["null"])  # [anchor, layer, neuron]
    counts = live.sum(axis=(0, 2))
    total = np.where(live, scores["excess"], 0.0).sum(axis=(0, 2))
    with np.errstate(invalid="ignore"):  # 0 / 0 for a layer without a live neuron (total is 0 there)
        return np.where(counts > 0, total / counts, np.nan)


def excess_pseudo_values(pair_max: np.ndarray, pair_null: np.ndarray) -> np.ndarray:
    """Jackknife pseudo-values over refits of `excess_correlations`, float64 [refit, layer]; needs >= 3 refits (a
    leave-one-out study keeps a pair)."""
    n = pair_max.shape[0]
    if n < 3:
        raise ValueError(f"jackknife pseudo-values of neuron excess correlations need at least 3 refits; got {n}")
    theta = excess_correlations(pair_max, pair_null)
    left_out = np.stack(
        [
            excess_correlations(pair_max[np.ix_(keep, keep)], pair_null[np.ix_(keep, keep)])
            for keep in (np.delete(np.arange(n), r) for r in range(n))
        ]
    )
    return n * theta[None] - (n - 1) * left_out


def neuron_depth_table(
    pair_max: np.ndarray,
    pair_null: np.ndarray,
    *,
    permutations: int,
    seed: int,
) -> pd.DataFrame:
    """DEPTH_COLUMNS, one row: statistic "excess_correlation", test "mid_depth_dip" (module docstring). estimate: the
    mean over refits of the end layers' pseudo-values minus the interior layers'; NaN with the reason in note
    when there are fewer than 3 layers or 3 refits, or a layer has no live neuron."""
    n_refits, n_layers = pair_max.shape[0], pair_max.shape[2]
    row = {"statistic": "excess_correlation", "test": "mid_depth_dip", "n_refits": n_refits, "n_layers": n_layers}
    empty = {"n_signs": 0}  # estimate, p_value and min_p: NaN, filled in by the columns
    label = calibration_label(DEPTH_METHOD, n_refits)
    if n_refits < 3:
        note = f"needs at least 3 refits for jackknife pseudo-values; this run has {n_refits}"
        return pd.DataFrame([{**row, **empty, "calibration": label, "note": note}], columns=DEPTH_COLUMNS)
    psi = excess_pseudo_values(pair_max, pair_null)
    if not np.isfinite(psi).all():
        note = "a layer has no live neuron in some leave-one-out study"
        return pd.DataFrame([{**row, **empty, "calibration": label, "note": note}], columns=DEPTH_COLUMNS)
    found = mid_depth_test(psi, permutations, seed)
    out = {
        **row,
        "estimate": found["dip"],
        "p_value": found["p_value"],
        "min_p": found["min_p"],
        "n_signs": found["n_signs"],
        "calibration": label,
        "note": found["note"],
    }
    return pd.DataFrame([out], columns=DEPTH_COLUMNS)
