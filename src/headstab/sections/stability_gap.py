"""Stability gap and depth of the extreme layers across architectures (paper §4.6, Fig. 7-8).

Per architecture and anchor: ΔS = S(l_max) - S(l_min) between its most and least stable layer, and
their relative depths r = l / L (l counted from 1, as the paper does).

ΔS is a range over L layer means, so it grows with L even when no layer differs. Beside it: its
expectation when no layer differs (the anchor's head stabilities permuted over its layers' slots,
`headstab.statistics.controls.layer_label_null`), the excess over that, and ΔS of the prompt-permutation
null, of stability above it and of the content variant. "ΔS widens with depth" is tested across
architectures on ΔS and on the excess (`gap_depth_table`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from headstab.statistics.bootstrap import percentile_interval
from headstab.statistics.controls import layer_label_null
from headstab.table_rows import select_rows

GAP_COLUMNS = ["anchor_seed", "s_max", "s_min", "delta_s", "l_max", "l_min", "r_max", "r_min"]
SUMMARY_COLUMNS = ["architecture", "n_layers", "n_heads", "optimizer", "attention_only", *GAP_COLUMNS]
# ΔS of these layer_stability columns: the prompt-permutation null, stability above it, the content variant.
NULL_SOURCES = {
    "delta_s_prompt_null": "null",
    "delta_s_above_null": "above_null",
    "delta_s_content": "stability_content",
    "delta_s_content_above_null": "stability_content_above_null",
}
LAYER_NULL_COLUMNS = ["delta_s_layer_null", "delta_s_layer_null_ci_low", "delta_s_layer_null_ci_high"]
LAYER_NULL_COLUMNS += ["delta_s_layer_null_p", "delta_s_excess"]
GAP_NULL_COLUMNS = [*NULL_SOURCES, *LAYER_NULL_COLUMNS]
DEPTH_COLUMNS = ["quantity", "n_layers", "mean", "sd", "n_architectures", "spearman_rho", "p_value", "n_permutations"]
DEPTH_QUANTITIES = ("delta_s", "delta_s_layer_null", "delta_s_excess", "delta_s_above_null", "delta_s_content")


def stability_gap_table(
    layer_stability: pd.DataFrame,
    n_layers: int,
    promptset: str | None = "primary",
    scope: str | None = "same_layer",
) -> pd.DataFrame:
    """Stability gap and position of the extreme layers per anchor (§4.6, Fig. 7-8).

    layer_stability: columns (promptset, scope,) anchor_seed, layer (0-based), mean.
    Returns GAP_COLUMNS: s_max, s_min, delta_s = S_lmax - S_lmin, l_max, l_min (1-based, as the
    paper counts), r_max = l_max / L, r_min = l_min / L. Ties go to the shallowest layer.
    """
    table = select_rows(layer_stability, "layer stability", promptset=promptset, scope=scope)
    rows = []
    for anchor, group in table.groupby("anchor_seed", sort=True):
        layers = group["layer"].to_numpy(int)
        if sorted(layers) != list(range(n_layers)):
            raise ValueError(f"anchor {anchor} has layers {sorted(layers)} but the architecture has {n_layers}")
        means = group.set_index("layer")["mean"].sort_index().to_numpy(float)
        i_max, i_min = int(np.argmax(means)), int(np.argmin(means))
        l_max, l_min = i_max + 1, i_min + 1
        rows.append(
            (
                anchor,
                means[i_max],
                means[i_min],
                means[i_max] - means[i_min],
                l_max,
                l_min,
                l_max / n_layers,
                l_min / n_layers,
            )
        )
    return pd.DataFrame(rows, columns=GAP_COLUMNS)


def gap_null_table(
    layer_stability: pd.DataFrame,
    head_stability: pd.DataFrame,
    *,
    promptset: str | None = "primary",
    permutations: int,
    seed: int,
    confidence: float,
) -> pd.DataFrame:
    """anchor_seed and GAP_NULL_COLUMNS: per anchor, ΔS of the layer columns of NULL_SOURCES (NaN where the
    table lacks them) and the layer-label null of ΔS (mean, percentile interval and p = share of permuted ΔS
    at least the observed, over `permutations` shuffles of the anchor's head stabilities over its layers)
    with the excess ΔS - its mean.

    layer_stability: columns promptset, scope, anchor_seed, layer, mean and those of NULL_SOURCES;
    head_stability: promptset, scope, anchor_seed, layer, head, stability (same-layer rows are read).
    """
    layers = select_rows(layer_stability, "layer stability", promptset=promptset, scope="same_layer")
    heads = select_rows(head_stability, "head stability", promptset=promptset, scope="same_layer")
    rows = []
    for anchor, group in heads.groupby("anchor_seed", sort=True):
        values = group.pivot(index="layer", columns="head", values="stability").sort_index().to_numpy(float)
        row = {"anchor_seed": anchor}
        layer_rows = layers[layers["anchor_seed"] == anchor].sort_values("layer")
        for name, column in NULL_SOURCES.items():
            row[name] = np.ptp(layer_rows[column].to_numpy(float)) if column in layer_rows else np.nan
        observed = np.ptp(values.mean(axis=1))
        means = layer_label_null(values[None], permutations, seed)[:, 0]
        permuted = means.max(axis=-1) - means.min(axis=-1)
        low, high = percentile_interval(permuted, confidence)
        p_value = (1.0 + np.sum(permuted >= observed - 8 * np.finfo(np.float64).eps)) / (1.0 + permutations)
        row.update(zip(LAYER_NULL_COLUMNS, (permuted.mean(), low, high, p_value, observed - permuted.mean())))
        rows.append(row)
    return pd.DataFrame(rows, columns=["anchor_seed", *GAP_NULL_COLUMNS])


def stability_gap_summary(
    layer_stability: Mapping[str, pd.DataFrame],
    facts: Mapping[str, Mapping[str, Any]],
    promptset: str,
    head_stability: Mapping[str, pd.DataFrame] | None = None,
    nulls: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """SUMMARY_COLUMNS of every architecture: layer_stability maps architecture -> its table, facts
    architecture -> `headstab.sections.architecture_facts`. With head_stability (architecture -> its
    table) and nulls ({permutations, seed, confidence}), GAP_NULL_COLUMNS follow (`gap_null_table`)."""
    frames = []
    for arch, table in layer_stability.items():
        frame = stability_gap_table(table, facts[arch]["n_layers"], promptset=promptset)
        if head_stability is not None:
            extra = gap_null_table(table, head_stability[arch], promptset=promptset, **(nulls or {}))
            frame = frame.merge(extra, on="anchor_seed", how="left", validate="one_to_one")
        frames.append(frame.assign(architecture=arch, **facts[arch]))
    columns = SUMMARY_COLUMNS + (GAP_NULL_COLUMNS if head_stability is not None else [])
    return pd.concat(frames, ignore_index=True)[columns]


def gap_depth_table(summary: pd.DataFrame, permutations: int, seed: int) -> pd.DataFrame:
    """DEPTH_COLUMNS: does a quantity of DEPTH_QUANTITIES (those in `summary`) widen with depth?

    Each architecture counts once, with its mean over anchors. Per quantity and depth: mean and s.d.
    (ddof 0) over architectures; per quantity: Spearman's rho of the architecture means with n_layers
    and its two-sided permutation p-value, the means shuffled over architectures (NaN with one depth).
    """
    quantities = [q for q in DEPTH_QUANTITIES if q in summary.columns and summary[q].notna().any()]
    per_arch = summary.groupby("architecture", sort=False).agg(
        n_layers=("n_layers", "first"), **{q: (q, "mean") for q in quantities}
    )
    depth = per_arch["n_layers"].to_numpy(float)
    rng = np.random.default_rng(seed)
    orders = np.argsort(rng.random((permutations, len(per_arch))), axis=1)
    rows = []
    for quantity in quantities:
        values = per_arch[quantity].to_numpy(float)
        rho, p_value = _spearman_permutation(depth, values, orders)
        for n_layers, group in per_arch.groupby("n_layers", sort=True):
            rows.append(
                (
                    quantity,
                    int(n_layers),
                    group[quantity].mean(),
                    group[quantity].std(ddof=0),
                    len(group),
                    rho,
                    p_value,
                    permutations,
                )
            )
    return pd.DataFrame(rows, columns=DEPTH_COLUMNS)


def _spearman_permutation(depth: np.ndarray, values: np.ndarray, orders: np.ndarray) -> tuple[float, float]:
    """Spearman's rho of values with depth (ties: average ranks) and its permutation p over `orders`."""
    keep = np.isfinite(values)
    if len(np.unique(depth[keep])) < 2 or np.ptp(values[keep]) == 0:
        return np.nan, np.nan
    ranks_x, ranks_y = stats.rankdata(depth[keep]), stats.rankdata(values[keep])
    rho = np.corrcoef(ranks_x, ranks_y)[0, 1]
    kept_orders = np.argsort(np.argsort(orders[:, keep], axis=1), axis=1)  # permutations of the kept units
    permuted = ranks_y[kept_orders]
    centred_x = ranks_x - ranks_x.mean()
    centred = permuted - permuted.mean(axis=1, keepdims=True)
    rhos = centred @ centred_x / np.sqrt((centred**2).sum(axis=1) * (centred_x**2).sum())
    extreme = np.sum(np.abs(rhos) >= abs(rho) - 8 * np.finfo(np.float64).eps)
    return float(rho), float((1.0 + extreme) / (1.0 + len(orders)))
