"""Head ablation importance vs head stability (paper §4.8, Fig. 10 / B.9).

The anchor refit's perplexity on the primary prompts, unablated and with each head's hook_z zeroed
in turn (`headstab.evaluation`); ΔPPL = ablated - baseline per head beside that head's stability;
per layer the Pearson correlation of the two, and its linear trend over depth.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats

from headstab.evaluation import head_ablation_perplexities, perplexity
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
    """(seed, [layer, head] ablated perplexities, baseline) of an ablation_perplexity.csv table."""
    seed = int(perplexities["seed"].iloc[0])
    grid = perplexities.pivot(index="layer", columns="head", values="ppl_ablated").sort_index().to_numpy()
    return seed, grid, float(perplexities["ppl_baseline"].iloc[0])


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


def ablation_correlation(table: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per layer Pearson correlation between head stability and ΔPPL, and its trend over depth.

    table: columns layer, stability, delta_ppl (as from `ablation_table`; one seed).
    Returns (per-layer DataFrame with columns layer, pearson_r, p_value, n_heads;
    trend dict with slope, intercept of r against 0-based layer, fitted over layers with finite r,
    plus their r_value and p_value; NaN when fewer than 2 layers have a finite r).
    """
    rows = []
    for layer, group in table.groupby("layer", sort=True):
        r, p = pearson_or_nan(group["stability"].to_numpy(float), group["delta_ppl"].to_numpy(float))
        rows.append((int(layer), r, p, len(group)))
    per_layer = pd.DataFrame(rows, columns=["layer", "pearson_r", "p_value", "n_heads"])
    finite = per_layer[np.isfinite(per_layer["pearson_r"])]
    trend = {"slope": math.nan, "intercept": math.nan, "r_value": math.nan, "p_value": math.nan}
    if len(finite) >= 2 and np.ptp(finite["layer"]) > 0:
        fit = stats.linregress(finite["layer"].to_numpy(float), finite["pearson_r"].to_numpy(float))
        trend = {
            "slope": float(fit.slope),
            "intercept": float(fit.intercept),
            "r_value": float(fit.rvalue),
            "p_value": float(fit.pvalue),
        }
    return per_layer, trend


def ablation_correlation_intervals(table: pd.DataFrame, n_boot: int, seed: int, confidence: float) -> pd.DataFrame:
    """Per layer, the bootstrap interval of the stability-ΔPPL correlation, heads resampled (they are the
    units of the correlation; `headstab.statistics.resampling.pearson_interval`): layer, ci_low, ci_high, n_boot."""
    from headstab.statistics.resampling import pearson_interval

    rows = []
    for layer, group in table.groupby("layer", sort=True):
        low, high = pearson_interval(group["stability"], group["delta_ppl"], n_boot, seed + int(layer), confidence)
        rows.append((int(layer), low, high, n_boot))
    return pd.DataFrame(rows, columns=["layer", "ci_low", "ci_high", "n_boot"])


def correlation_table(per_layer: pd.DataFrame, trend: Mapping[str, float], seed: int) -> pd.DataFrame:
    """Fig. 10's data in one tidy table: every layer's r with the seed and the trend over depth beside it."""
    return per_layer.assign(seed=seed, **{f"trend_{key}": value for key, value in trend.items()})
