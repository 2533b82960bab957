"""Universal neurons across refits and their share per layer, with refit-resampled intervals and the null's share.

Gurnee et al. 2024 call a neuron of an anchor refit universal when its maximum correlation with the other
refits' neurons, averaged over those partner refits, exceeds a threshold (0.5); with one partner it is that
maximum. Here every refit is an anchor in turn. The same rule applied to the null maxima (random maps of the
partners' neurons, `headstab.neurons.universality.null_max_correlations`, averaged over draws) gives the share
universal by chance, the chance level the share is read against; excess = mean maximum - mean null maximum.

Intervals resample refits as the head-stability multi-bootstrap does (`headstab.statistics.bootstrap.
draw_resamples`): each anchor's partners with replacement from the other refits (the anchor's score is the
mean over the drawn partners), and the anchors with replacement (counts k_a weigh anchor a). They are
descriptive (method `neuron_share_bootstrap`). A neuron dead on the stream (NaN maximum) is in no share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from headstab.statistics.bootstrap import draw_resamples, percentile_interval
from headstab.statistics.calibration import calibration_label

__all__ = [
    "NEURON_COLUMNS",
    "SHARE_COLUMNS",
    "SHARE_METHOD",
    "UNIVERSAL_THRESHOLD",
    "neuron_rows",
    "neuron_scores",
    "stack_pairs",
    "universal_share_table",
]

UNIVERSAL_THRESHOLD = 0.5  # Gurnee et al. 2024's
SHARE_METHOD = "neuron_share_bootstrap"
NEURON_COLUMNS = ["anchor_seed", "layer", "neuron", "max_correlation", "null_max_correlation", "excess", "universal"]
SHARE_COLUMNS = [
    "layer",
    "relative_depth",
    "n_refits",
    "n_neurons",
    "n_dead",
    "threshold",
    "universal_share",
    "ci_low",
    "ci_high",
    "null_share",
    "null_ci_low",
    "null_ci_high",
    "mean_max",
    "mean_null_max",
    "excess",
    "excess_ci_low",
    "excess_ci_high",
    "n_boot",
    "calibration",
]


def stack_pairs(values: Mapping[tuple[str, str], np.ndarray], refits: Sequence[str]) -> np.ndarray:
    """{(anchor, other): [layer, d_mlp]} of every ordered pair of distinct refits -> float64
    [anchor, other, layer, d_mlp] in `refits` order, NaN on the diagonal."""
    refits = list(refits)
    missing = [(a, b) for a in refits for b in refits if a != b and (a, b) not in values]
    if missing:
        raise ValueError(
            f"neuron maxima of the refit pairs {missing[:3]} are missing ({len(missing)} of "
            f"{len(refits) * (len(refits) - 1)} ordered pairs); compute every pair, each in both directions "
            "(PairStatistics.swapped gives the other direction)"
        )
    first = np.asarray(values[(refits[0], refits[1])])
    out = np.full((len(refits), len(refits), *first.shape), np.nan)
    for i, a in enumerate(refits):
        for j, b in enumerate(refits):
            if a != b:
                out[i, j] = values[(a, b)]
    return out


def _partner_means(pair_values: np.ndarray, pair_counts: np.ndarray) -> np.ndarray:
    """[anchor, other, layer, neuron] and [resample, anchor, other] partner counts (zero diagonal) ->
    [resample, anchor, layer, neuron]: each anchor's mean over its drawn partners."""
    off_diagonal = np.where(np.eye(pair_values.shape[0], dtype=bool)[:, :, None, None], 0.0, pair_values)
    return np.einsum("rab,abli->rali", pair_counts, off_diagonal) / pair_counts.sum(axis=2)[:, :, None, None]


def neuron_scores(
    pair_max: np.ndarray, pair_null: np.ndarray, threshold: float = UNIVERSAL_THRESHOLD
) -> dict[str, np.ndarray]:
    """Per anchor neuron: "max" (mean over partner refits of the maximum correlation), "null" (the same of
    the null maximum), "excess" (max - null), each float64 [anchor, layer, neuron], and "universal" (bool, max >
    threshold; False for a dead neuron). pair_max, pair_null: [anchor, other, layer, neuron] (`stack_pairs`)."""
    n = pair_max.shape[0]
    counts = (1 - np.eye(n, dtype=np.int64))[None]
    score, null = _partner_means(pair_max, counts)[0], _partner_means(pair_null, counts)[0]
    return {"max": score, "null": null, "excess": score - null, "universal": score > threshold}


def neuron_rows(
    pair_max: np.ndarray, pair_null: np.ndarray, refits: Sequence[str], threshold: float = UNIVERSAL_THRESHOLD
) -> pd.DataFrame:
    """NEURON_COLUMNS, one row per neuron of every anchor refit (`neuron_scores` as a table; NaN: dead)."""
    scores = neuron_scores(pair_max, pair_null, threshold)
    anchor, layer, neuron = np.indices(scores["max"].shape).reshape(3, -1)
    columns = {"max_correlation": "max", "null_max_correlation": "null", "excess": "excess", "universal": "universal"}
    table = {"anchor_seed": np.asarray(list(refits))[anchor], "layer": layer, "neuron": neuron}
    table |= {column: scores[key].ravel() for column, key in columns.items()}
    return pd.DataFrame(table, columns=NEURON_COLUMNS)


def _layer_replicates(
    pair_max: np.ndarray, pair_null: np.ndarray, pair_counts: np.ndarray, refit_counts: np.ndarray, threshold: float
) -> dict[str, np.ndarray]:
    """One layer's statistics per resample: pair_* [anchor, other, 1, neuron]; pair_counts [resample, anchor,
    other]; refit_counts [resample, anchor]. Returns {name: float64 [resample]}."""
    score = _partner_means(pair_max, pair_counts)[:, :, 0]  # [resample, anchor, neuron]
    null = _partner_means(pair_null, pair_counts)[:, :, 0]
    live = np.isfinite(score) & np.isfinite(null)
    k = refit_counts.astype(np.float64)
    neurons = np.einsum("ra,ra->r", k, live.sum(axis=2))

    def share(values: np.ndarray) -> np.ndarray:
        return np.einsum("ra,ra->r", k, np.where(live, values, 0.0).sum(axis=2)) / neurons

    return {
        "universal_share": share(score > threshold),
        "null_share": share(null > threshold),
        "mean_max": share(score),
        "mean_null_max": share(null),
        "excess": share(score - null),
    }


def universal_share_table(
    pair_max: np.ndarray,
    pair_null: np.ndarray,
    *,
    threshold: float = UNIVERSAL_THRESHOLD,
    n_boot: int,
    seed: int,
    confidence: float,
) -> pd.DataFrame:
    """SHARE_COLUMNS, one row per layer: the universal share of the refits' neurons, its null share and the
    excess, each with a refit-resampled percentile interval (n_boot resamples drawn with `seed`).

    pair_max, pair_null: float64 [anchor, other, layer, neuron] (`stack_pairs` of `max_correlations` and of
    `null_max_correlations` averaged over draws), at least 2 refits; with 2 every interval is NaN (the resamples
    can only repeat the sample). n_neurons: live neurons over all anchors.
    """
    n_refits, n_layers = pair_max.shape[0], pair_max.shape[2]
    if pair_null.shape != pair_max.shape:
        raise ValueError(f"null maxima of shape {pair_null.shape} for maxima of shape {pair_max.shape}; stack both")
    resamples = draw_resamples(n_boot, n_refits, 1, seed)
    full_pairs = (1 - np.eye(n_refits, dtype=np.int64))[None]
    full_refits = np.ones((1, n_refits), dtype=np.int64)
    label = calibration_label(SHARE_METHOD, n_refits)
    rows = []
    for layer in range(n_layers):
        part = (pair_max[:, :, layer : layer + 1], pair_null[:, :, layer : layer + 1])
        estimate = _layer_replicates(*part, full_pairs, full_refits, threshold)
        replicates = _layer_replicates(*part, resamples.pair_counts, resamples.refit_counts, threshold)
        intervals = {name: percentile_interval(values, confidence) for name, values in replicates.items()}
        if n_refits < 3:  # each resample is the sample itself (the only partner is the other refit): no interval
            intervals = dict.fromkeys(intervals, (np.nan, np.nan))
        scores = neuron_scores(*part)
        live = (np.isfinite(scores["max"]) & np.isfinite(scores["null"])).sum()
        rows.append(
            {
                "layer": layer,
                "relative_depth": (layer + 1) / n_layers,
                "n_refits": n_refits,
                "n_neurons": int(live),
                "n_dead": int(n_refits * pair_max.shape[3] - live),
                "threshold": threshold,
                **{name: float(values[0]) for name, values in estimate.items()},
                "ci_low": float(intervals["universal_share"][0]),
                "ci_high": float(intervals["universal_share"][1]),
                "null_ci_low": float(intervals["null_share"][0]),
                "null_ci_high": float(intervals["null_share"][1]),
                "excess_ci_low": float(intervals["excess"][0]),
                "excess_ci_high": float(intervals["excess"][1]),
                "n_boot": n_boot,
                "calibration": label,
            }
        )
    return pd.DataFrame(rows, columns=SHARE_COLUMNS)
