"""Layer robustness to drop and swap across refits, against layer stability (docs/beyond_the_paper.md).

Per refit and condition (`headstab.layer_surgery`): top-1 agreement with the intact model, ΔPPL and the mean
KL divergence KL(intact || condition) per prediction on the held-out text. Per architecture: robustness by layer (mean over refits, refit-resampled interval); its
Pearson correlation with layer stability within each refit (over layers) and across refits (pooled over
(refit, layer) rows, refit-resampled interval); the relative depth r = l / L (1-based l, as §4.6) of the
most and least robust layers beside the most and least stable ones. A swap of layers l and l + 1 is set
beside the mean stability of those two layers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headstab.evaluation import perplexity_from_loss
from headstab.statistics.calibration import calibration_label
from headstab.statistics.refit_weights import refit_interval
from headstab.table_rows import pearson_or_nan

__all__ = [
    "DROP_SWAP_COLUMNS",
    "drop_swap_table",
    "robustness_with_stability",
    "robustness_by_layer",
    "robustness_correlation",
    "extreme_depths",
]

DROP_SWAP_COLUMNS = [
    "seed",
    "condition",
    "layer",
    "top1_agreement",
    "ppl",
    "ppl_intact",
    "delta_ppl",
    "kl_divergence",
    "n_predictions",
]
METRICS = ("top1_agreement", "delta_ppl", "kl_divergence")


def drop_swap_table(counts: dict, seed: int | str) -> pd.DataFrame:
    """DROP_SWAP_COLUMNS, one row per condition, from `headstab.layer_surgery.drop_swap_counts`.

    kl_divergence: KL(intact || condition) in nats, the mean over the predictions of the per-prediction KL of
    the next-token distributions (Lad et al. 2024's measure)."""
    n = counts["n_predictions"]
    intact = perplexity_from_loss(counts["intact_loss"], n)
    rows = [
        (
            seed,
            condition,
            layer,
            agree / n,
            perplexity_from_loss(loss, n),
            intact,
            perplexity_from_loss(loss, n) - intact,
            kl / n,
            n,
        )
        for (condition, layer), loss, agree, kl in zip(
            counts["conditions"], counts["loss"], counts["agree"], counts["kl"], strict=True
        )
    ]
    return pd.DataFrame(rows, columns=DROP_SWAP_COLUMNS)


def robustness_with_stability(table: pd.DataFrame, layer_stability: pd.DataFrame) -> pd.DataFrame:
    """`table` (DROP_SWAP_COLUMNS) with each row's layer stability (column stability) beside it.

    layer_stability: anchor_seed, layer, mean of one prompt set and scope same_layer. A drop of layer l gets
    the stability of l with its refit as anchor; a swap of l and l + 1 the mean of theirs.
    """
    stability = layer_stability.set_index(["anchor_seed", "layer"])["mean"]
    missing = sorted(set(table["seed"]) - set(layer_stability["anchor_seed"]))
    if missing:
        raise ValueError(f"layer stability has no anchor_seed {missing} of the drop/swap refits")

    def lookup(seed, layer):
        return np.array(stability.loc[list(zip(seed, layer))], dtype=np.float64)

    seed, layer = table["seed"].to_numpy(), table["layer"].to_numpy()
    values = lookup(seed, layer)
    swap = table["condition"].to_numpy() == "swap"
    values[swap] = (values[swap] + lookup(seed[swap], layer[swap] + 1)) / 2
    return table.assign(stability=values)


def robustness_by_layer(table: pd.DataFrame, n_layers: int, n_boot: int, seed: int, confidence: float) -> pd.DataFrame:
    """Per condition, layer and metric: mean over refits with a refit-resampled interval, and r = (l + 1) / L.

    table: `robustness_with_stability` rows. Returns condition, layer, relative_depth, metric, mean, ci_low,
    ci_high, stability (mean over refits), n_refits, calibration (whether the interval is calibrated at the
    architecture's number of refits, `headstab.statistics.calibration`).
    """
    seeds = sorted(set(table["seed"]), key=str)
    index = {value: i for i, value in enumerate(seeds)}
    label = calibration_label("refit_bootstrap_mean_layer_robustness", len(seeds))
    rows = []
    for (condition, layer), group in table.groupby(["condition", "layer"], sort=True):
        for metric in METRICS:
            estimate, low, high = refit_interval(
                "mean",
                group[metric],
                None,
                group["seed"].map(index).to_numpy(),
                len(seeds),
                n_boot,
                seed + int(layer),
                confidence,
            )
            rows.append(
                (
                    condition,
                    int(layer),
                    (int(layer) + 1) / n_layers,
                    metric,
                    estimate,
                    low,
                    high,
                    group["stability"].mean(),
                    len(group),
                    label,
                )
            )
    columns = ["condition", "layer", "relative_depth", "metric", "mean", "ci_low", "ci_high", "stability", "n_refits"]
    columns += ["calibration"]
    return pd.DataFrame(rows, columns=columns)


def robustness_correlation(table: pd.DataFrame, n_boot: int, seed: int, confidence: float) -> pd.DataFrame:
    """Pearson r of each metric with layer stability, per condition: within each refit (over its layers;
    NaN below 3 layers) and across refits (pooled over (refit, layer) rows, refit-resampled interval).

    Returns condition, metric, scope ("within_refit" with its seed, or "across_refits"), seed, pearson_r,
    ci_low, ci_high, n_rows, calibration (of the across-refits interval at the number of refits; empty on the
    within-refit rows, which have no interval).
    """
    seeds = sorted(set(table["seed"]), key=str)
    index = {value: i for i, value in enumerate(seeds)}
    label = calibration_label("refit_bootstrap_pearson_layer_robustness", len(seeds))
    rows = []
    for condition, group in table.groupby("condition", sort=True):
        for metric in METRICS:
            for refit, own in group.groupby("seed", sort=True):
                r, _ = pearson_or_nan(own["stability"].to_numpy(float), own[metric].to_numpy(float))
                rows.append((condition, metric, "within_refit", refit, r, np.nan, np.nan, len(own), None))
            r, low, high = refit_interval(
                "pearson",
                group["stability"],
                group[metric],
                group["seed"].map(index).to_numpy(),
                len(seeds),
                n_boot,
                seed,
                confidence,
            )
            rows.append((condition, metric, "across_refits", None, r, low, high, len(group), label))
    columns = ["condition", "metric", "scope", "seed", "pearson_r", "ci_low", "ci_high", "n_rows", "calibration"]
    return pd.DataFrame(rows, columns=columns)


def extreme_depths(by_layer: pd.DataFrame, pooled_stability: pd.DataFrame, n_layers: int) -> dict[str, float]:
    """Relative depth r = l / L (1-based l) of the most and least robust dropped layer (mean top-1 agreement
    over refits) and of the most and least stable layer (pooled layer stability: layer, stability)."""
    drops = by_layer[(by_layer["condition"] == "drop") & (by_layer["metric"] == "top1_agreement")]
    if drops.empty or pooled_stability.empty:
        raise ValueError("extreme depths need the drop rows of the robustness table and the pooled layer stability")
    robust = drops.set_index("layer")["mean"]
    stable = pooled_stability.set_index("layer")["stability"]
    return {
        "r_most_robust": (int(robust.idxmax()) + 1) / n_layers,
        "r_least_robust": (int(robust.idxmin()) + 1) / n_layers,
        "r_most_stable": (int(stable.idxmax()) + 1) / n_layers,
        "r_least_stable": (int(stable.idxmin()) + 1) / n_layers,
    }
