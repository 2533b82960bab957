"""Head ablation importance vs head stability (paper §4.8, Fig. 10 / B.9).

The anchor refit's perplexity on the primary prompts, unablated and with each head's hook_z zeroed
in turn (`headstab.evaluation`); ΔPPL = ablated - baseline per head beside that head's stability;
per layer the Pearson correlation of the two, and its linear trend over depth.

Each layer's correlation is over its 8-16 heads, and ΔPPL is heavy-tailed (one head can cost twenty times
the next), so Spearman's rho stands beside Pearson's r, and both p-values are permutation p-values over the
layer's heads: t-test p-values reject too often when one head costs most and another head's stability stands
out (docs/statistics.md, "Calibration of the section statistics"). With more than one anchor ablated
(analysis.ablation_anchors) both are also pooled over anchors: the correlation of the values centred
(or ranked, then centred) within each anchor, the repeated-measures correlation (Bakdash & Marusich 2017).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats

from headstab.evaluation import head_ablation_perplexities, perplexity
from headstab.statistics.calibration import calibration_label
from headstab.statistics.hypothesis import benjamini_hochberg
from headstab.statistics.resampling import pearson_interval
from headstab.table_rows import pearson_or_nan, select_rows

log = logging.getLogger(__name__)

PERPLEXITY_COLUMNS = ["seed", "layer", "head", "ppl_ablated", "ppl_baseline"]
ABLATION_COLUMNS = ["seed", "layer", "head", "ppl_ablated", "delta_ppl", "stability"]


def _per_head(seed: int, values: np.ndarray) -> pd.DataFrame:
    """seed, layer, head and ppl_ablated of a [layer, head] grid, row-major."""
    n_layers, n_heads = values.shape
    layer, head = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    return pd.DataFrame({"seed": seed, "layer": layer.ravel(), "head": head.ravel(), "ppl_ablated": values.ravel()})


def ablation_perplexity_table(
    model, tokens: np.ndarray, lengths: np.ndarray, batch_size: int, seed: int
) -> pd.DataFrame:
    """PERPLEXITY_COLUMNS: the anchor's perplexity on prompts (tokens [prompt, pos] right-padded,
    lengths [prompt], as cached), unablated (ppl_baseline) and with each head zeroed (ppl_ablated)."""
    order = np.argsort(lengths, kind="stable")  # similar lengths per batch: less padding, same sums
    tokens, lengths = tokens[order], lengths[order]
    baseline = perplexity(model, tokens, lengths, batch_size=batch_size)
    ablated = head_ablation_perplexities(model, tokens, lengths, batch_size=batch_size)
    log.info("anchor seed %d: perplexity %.3f, ablated %.3f .. %.3f", seed, baseline, ablated.min(), ablated.max())
    return _per_head(seed, ablated).assign(ppl_baseline=baseline)[PERPLEXITY_COLUMNS]


def ablated_grid(perplexities: pd.DataFrame) -> tuple[int, np.ndarray, float]:
    """(seed, [layer, head] ablated perplexities, baseline) of the first anchor of an ablation_perplexity.csv table."""
    seed = int(perplexities["seed"].iloc[0])
    rows = perplexities[perplexities["seed"] == seed]
    grid = rows.pivot(index="layer", columns="head", values="ppl_ablated").sort_index().to_numpy()
    return seed, grid, float(rows["ppl_baseline"].iloc[0])


def ablated_grids(perplexities: pd.DataFrame) -> list[tuple[int, np.ndarray, float]]:
    """`ablated_grid` of every anchor of an ablation_perplexity.csv table, in the table's order."""
    seeds = pd.unique(perplexities["seed"])
    return [ablated_grid(perplexities[perplexities["seed"] == seed]) for seed in seeds]


def ablation_table(
    ppl_ablated: np.ndarray,
    ppl_baseline: float,
    head_stability: pd.DataFrame,
    seed: int,
    promptset: str | None = None,
    scope: str | None = "same_layer",
) -> pd.DataFrame:
    """One row per head of the anchor refit: its ablated perplexity, ΔPPL and stability.

    ppl_ablated: [layer, head] from `head_ablation_perplexities`; ppl_baseline: unablated perplexity.
    head_stability: columns promptset, scope, anchor_seed, layer, head, stability; the rows of
    anchor_seed == seed and the given promptset and scope (`headstab.table_rows.select_rows`) are used.
    Returns ABLATION_COLUMNS.
    """
    ppl_ablated = np.asarray(ppl_ablated, dtype=float)
    if ppl_ablated.ndim != 2:
        raise ValueError(f"ppl_ablated must be [layer, head], got shape {ppl_ablated.shape}")
    chosen = select_rows(head_stability, "head stability", anchor_seed=seed, promptset=promptset, scope=scope)
    if chosen.duplicated(["layer", "head"]).any():
        raise ValueError(
            "head stability has several rows per (layer, head) for this anchor; pass promptset and scope to pick one"
        )
    table = _per_head(seed, ppl_ablated).assign(delta_ppl=ppl_ablated.ravel() - ppl_baseline)
    table = table.merge(
        chosen[["layer", "head", "stability"]].astype({"layer": int, "head": int}),
        on=["layer", "head"],
        how="left",
    )
    if table["stability"].isna().any():
        missing = table.loc[table["stability"].isna(), ["layer", "head"]].head(3).values.tolist()
        raise ValueError(f"head stability lacks (layer, head) {missing} for anchor_seed={seed}")
    return table


CORRELATION_COLUMNS = [
    "layer",
    "pearson_r",
    "p_value",
    "spearman_r",
    "spearman_p",
    "n_heads",
    "pooled_pearson_r",
    "pooled_spearman_r",
    "n_anchors",
]


def _centred_within(values: pd.Series, anchors: pd.Series, ranks: bool) -> np.ndarray:
    """The values (or their ranks, ties averaged) minus their anchor's mean."""
    grouped = values.groupby(anchors, sort=False)
    values = grouped.rank() if ranks else values
    return (values - values.groupby(anchors, sort=False).transform("mean")).to_numpy(float)


def _pooled_r(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r of values already centred within their anchor (no second centring); NaN without spread."""
    scale = math.sqrt((x**2).sum() * (y**2).sum())
    return float((x * y).sum() / scale) if scale > 0 else math.nan


def permutation_p(x: np.ndarray, y: np.ndarray, permutations: int, seed: int) -> float:
    """Two-sided permutation p of Pearson's r over the (x_k, y_k) pairs: y re-paired with x over every pairing
    when n! <= permutations, else over `permutations` random ones, (1 + #extreme) / (1 + permutations) per side.
    NaN where r is undefined (fewer than 3 pairs, or a constant variable)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    method = stats.PermutationMethod(n_resamples=permutations, rng=np.random.default_rng(seed))
    return float(stats.pearsonr(x, y, method=method).pvalue)


def ablation_correlation(
    table: pd.DataFrame, anchor_seed: int | None = None, permutations: int = 10000, seed: int = 0
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per layer the correlation between head stability and ΔPPL, and the trend of Pearson's r over depth.

    table: columns seed, layer, stability, delta_ppl (as from `ablation_table`; one or several anchors).
    anchor_seed: the anchor of the paper's numbers (default: the table's first seed). permutations, seed: the
    permutation p-values (`permutation_p`; layer l draws with seed + l).
    Returns (per-layer DataFrame of CORRELATION_COLUMNS: the anchor's pearson_r and its permutation p_value,
    spearman_r and spearman_p (the permutation p of the ranks) over its n_heads heads; pooled_pearson_r and
    pooled_spearman_r over the n_anchors anchors, the values (ranks) centred within each anchor; trend dict with slope, intercept of the anchor's r against
    0-based layer, fitted over layers with finite r, plus their r_value and p_value; NaN when fewer than 2
    layers have a finite r, and p_value NaN with 2, where the line fits by construction).
    """
    if "seed" not in table.columns:
        table = table.assign(seed=0)
    anchor_seed = table["seed"].iloc[0] if anchor_seed is None else anchor_seed
    rows = []
    for layer, group in table.groupby("layer", sort=True):
        own = group[group["seed"] == anchor_seed]
        x, y = own["stability"].to_numpy(float), own["delta_ppl"].to_numpy(float)
        r, _ = pearson_or_nan(x, y)
        rho, _ = pearson_or_nan(stats.rankdata(x), stats.rankdata(y))  # Spearman: Pearson's r of the ranks
        p = permutation_p(x, y, permutations, seed + int(layer))
        rho_p = permutation_p(stats.rankdata(x), stats.rankdata(y), permutations, seed + int(layer))
        pooled = [
            _pooled_r(*(_centred_within(group[c], group["seed"], ranks) for c in ("stability", "delta_ppl")))
            for ranks in (False, True)
        ]
        rows.append((int(layer), r, p, rho, rho_p, len(own), *pooled, group["seed"].nunique()))
    per_layer = pd.DataFrame(rows, columns=CORRELATION_COLUMNS)
    finite = per_layer[np.isfinite(per_layer["pearson_r"])]
    trend = {"slope": math.nan, "intercept": math.nan, "r_value": math.nan, "p_value": math.nan}
    if len(finite) >= 2 and np.ptp(finite["layer"]) > 0:
        fit = stats.linregress(finite["layer"].to_numpy(float), finite["pearson_r"].to_numpy(float))
        trend = {
            "slope": float(fit.slope),
            "intercept": float(fit.intercept),
            "r_value": float(fit.rvalue),
            "p_value": float(fit.pvalue) if len(finite) > 2 else math.nan,  # two points: +-1 by construction
        }
    return per_layer, trend


def ablation_correlation_intervals(
    table: pd.DataFrame, n_boot: int, seed: int, confidence: float, anchor_seed: int | None = None
) -> pd.DataFrame:
    """Per layer, the bootstrap interval of the anchor's stability-ΔPPL correlation, heads resampled (they are
    the units of the correlation; `headstab.statistics.resampling.pearson_interval`): layer, ci_low, ci_high,
    n_boot. anchor_seed: as in `ablation_correlation` (default: the table's first seed)."""

    if "seed" in table.columns:
        table = table[table["seed"] == (table["seed"].iloc[0] if anchor_seed is None else anchor_seed)]
    rows = []
    for layer, group in table.groupby("layer", sort=True):
        low, high = pearson_interval(group["stability"], group["delta_ppl"], n_boot, seed + int(layer), confidence)
        rows.append((int(layer), low, high, n_boot))
    return pd.DataFrame(rows, columns=["layer", "ci_low", "ci_high", "n_boot"])


def correlation_table(
    per_layer: pd.DataFrame, trend: Mapping[str, float], seed: int, intervals: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Fig. 10's data in one tidy table: every layer's r with the seed and the trend over depth beside it, and
    with `ablation_correlation_intervals` (intervals) its ci_low, ci_high and n_boot.

    The layers' p-values are one family per test: q_value (of p_value) and spearman_q_value (of spearman_p) are
    their Benjamini-Hochberg q-values over the layers. p_calibration, ci_calibration and trend_calibration say
    whether the permutation p-values at n_heads heads, the head-resampled interval at n_heads and the trend's
    p-value over the layers with a finite r are calibrated there (`headstab.statistics.calibration`).
    """
    table = per_layer.assign(seed=seed, **{f"trend_{key}": value for key, value in trend.items()})
    if intervals is not None:
        table = table.merge(intervals, on="layer", how="left")
    heads = table["n_heads"].astype(int)
    return table.assign(
        q_value=benjamini_hochberg(table["p_value"].to_numpy()),
        spearman_q_value=benjamini_hochberg(table["spearman_p"].to_numpy()),
        p_calibration=[calibration_label("permutation_pearson_ablation_heads", n) for n in heads],
        ci_calibration=[calibration_label("head_bootstrap_pearson_ablation", n) for n in heads],
        trend_calibration=calibration_label("linregress_trend_ablation", int(np.isfinite(table["pearson_r"]).sum())),
    )
