"""Are head types universal across refits? Weak and strong universality per layer and type.

From the typed heads of every refit (`headstab.head_types.type_heads`), the same-layer best match and
one-to-one partner of every head in every other refit (pair_stability.csv) and head stability
(head_stability.csv), per layer and type (the four of `HEAD_TYPES`, and "none" for untyped heads):

- weak_universality: the share of refits with at least one head of the type in the layer;
- head_share: the share of the layer's heads that have the type (mean over refits);
- strong_universality_best_match, strong_universality_one_to_one: of the (anchor head of the type, pair
  refit) pairs, the share whose best match / one-to-one partner has the type too;
- stability, stability_one_to_one, above_null, one_to_one_above_null: the mean over the type's heads
  (every refit as anchor) of that column of head_stability.csv.

Weak vs strong universality is the distinction of Chughtai et al. 2023 that the paper calls unresolved:
every refit learns the kind of head (weak), or the heads that match across refits are of the same kind
(strong). Intervals resample refits (`headstab.statistics.refit_weights`'s weighting): a refit's row
weighs k_a, a pair's k_a k_b; every statistic is a ratio of sums over refits (or pairs), so a resample is
two matrix products.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from headstab.head_types import HEAD_TYPES, NO_TYPE, has_type
from headstab.statistics.bootstrap import draw_resamples, percentile_interval

__all__ = ["UNIVERSALITY_COLUMNS", "UNIVERSALITY_STATISTICS", "TYPES", "universality_table"]

TYPES = (*HEAD_TYPES, NO_TYPE)
UNIVERSALITY_STATISTICS = (
    "weak_universality",
    "head_share",
    "strong_universality_best_match",
    "strong_universality_one_to_one",
    "stability",
    "stability_one_to_one",
    "above_null",
    "one_to_one_above_null",
)
UNIVERSALITY_COLUMNS = [
    "layer",
    "relative_depth",
    "type",
    "statistic",
    "estimate",
    "ci_low",
    "ci_high",
    "n",
    "n_boot",
    "threshold_rule",
]
HEAD_STATISTICS = ("stability", "stability_one_to_one", "above_null", "one_to_one_above_null")


def _ratio(
    sums: np.ndarray, counts: np.ndarray, refit_counts: np.ndarray, confidence: float
) -> tuple[float, float, float]:
    """(estimate, ci_low, ci_high) of sum(sums) / sum(counts), each [refit] or [refit_a, refit_b]; a resample
    weighs refit a by k_a and pair (a, b) by k_a k_b. NaN where no unit counts."""
    total = counts.sum()
    estimate = sums.sum() / total if total > 0 else np.nan
    k = refit_counts.astype(np.float64)
    if sums.ndim == 1:
        numerator, denominator = k @ sums, k @ counts
    else:
        numerator = np.einsum("ra,rb,ab->r", k, k, sums, optimize=True)
        denominator = np.einsum("ra,rb,ab->r", k, k, counts, optimize=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        replicates = numerator / denominator
    if not np.isfinite(replicates).any():
        return estimate, np.nan, np.nan
    low, high = percentile_interval(replicates[np.isfinite(replicates)], confidence)
    return estimate, float(low), float(high)


def _membership(types: pd.DataFrame, seeds: Sequence, n_layers: int, n_heads: int) -> dict[str, np.ndarray]:
    """{type: bool [refit, layer, head]} in the order of `seeds`; every (refit, layer, head) must be typed."""
    index = {seed: i for i, seed in enumerate(seeds)}
    refit = types["refit"].map(index)
    if refit.isna().any() or len(types) != len(seeds) * n_layers * n_heads:
        raise ValueError(
            f"the head types cover refits {sorted(types['refit'].unique())} with {len(types)} rows; the stability "
            f"tables cover {list(seeds)} x {n_layers} layers x {n_heads} heads. Rebuild both from the same refits"
        )
    out = {}
    for name in TYPES:
        grid = np.zeros((len(seeds), n_layers, n_heads), dtype=bool)
        grid[refit.to_numpy(int), types["layer"].to_numpy(int), types["head"].to_numpy(int)] = has_type(
            types["type"], name
        )
        out[name] = grid
    return out


def _pair_sums(member: np.ndarray, pairs: dict[str, np.ndarray], partner: str) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, [layer, a, b] sums of 'partner has the type' and counts over anchor heads of the type."""
    n_refits, n_layers = member.shape[:2]
    anchor = member[pairs["a"], pairs["layer"], pairs["head"]]
    agrees = member[pairs["b"], pairs["layer"], pairs[partner]] & anchor
    sums, counts = np.zeros((n_layers, n_refits, n_refits)), np.zeros((n_layers, n_refits, n_refits))
    np.add.at(sums, (pairs["layer"], pairs["a"], pairs["b"]), agrees)
    np.add.at(counts, (pairs["layer"], pairs["a"], pairs["b"]), anchor)
    return sums, counts


def _pair_index(pairs: pd.DataFrame, seeds: Sequence) -> dict[str, np.ndarray]:
    index = {seed: i for i, seed in enumerate(seeds)}
    return {
        "a": pairs["anchor_seed"].map(index).to_numpy(int),
        "b": pairs["pair_seed"].map(index).to_numpy(int),
        "layer": pairs["layer"].to_numpy(int),
        "head": pairs["head"].to_numpy(int),
        "best_head": pairs["best_head"].to_numpy(int),
        "assigned_head": pairs["assigned_head"].to_numpy(int),
    }


def _head_values(heads: pd.DataFrame, seeds: Sequence, shape: tuple[int, int, int]) -> dict[str, np.ndarray]:
    """{column: float64 [refit, layer, head]} of HEAD_STATISTICS from head_stability rows (the refit as anchor)."""
    index = {seed: i for i, seed in enumerate(seeds)}
    where = (heads["anchor_seed"].map(index).to_numpy(int), heads["layer"].to_numpy(int), heads["head"].to_numpy(int))
    out = {}
    for column in HEAD_STATISTICS:
        grid = np.full(shape, np.nan)
        grid[where] = heads[column].to_numpy(dtype=np.float64)
        out[column] = grid
    return out


def universality_table(
    types: pd.DataFrame,
    pairs: pd.DataFrame,
    heads: pd.DataFrame,
    seeds: Sequence,
    *,
    n_boot: int,
    seed: int,
    confidence: float,
) -> pd.DataFrame:
    """UNIVERSALITY_COLUMNS: every statistic of UNIVERSALITY_STATISTICS per layer and type.

    types: HEAD_TYPE_COLUMNS of every refit in `seeds`; pairs: same-layer pair_stability rows of one prompt
    set (anchor_seed, pair_seed, layer, head, best_head, assigned_head); heads: the same prompt set's
    same-layer head_stability rows with its interval columns (stability, stability_one_to_one, above_null,
    one_to_one_above_null). n: the refits, the typed anchor heads' pairs, or the typed heads behind each
    estimate. Intervals: `n_boot` refit resamples drawn with `seed` (NaN with fewer than 2 refits).
    """
    seeds = list(seeds)
    n_layers, n_heads = int(types["layer"].max()) + 1, int(types["head"].max()) + 1
    members = _membership(types, seeds, n_layers, n_heads)
    pair_index = _pair_index(pairs, seeds)
    values = _head_values(heads, seeds, (len(seeds), n_layers, n_heads))
    refit_counts = draw_resamples(n_boot, len(seeds), 1, seed).refit_counts if len(seeds) >= 2 else np.ones((1, 1))
    rules = types["threshold_rule"].unique()
    rows = []
    for name in TYPES:
        member = members[name]
        strong = {partner: _pair_sums(member, pair_index, partner) for partner in ("best_head", "assigned_head")}
        for layer in range(n_layers):
            units = {
                "weak_universality": (member[:, layer].any(axis=1).astype(float), np.ones(len(seeds))),
                "head_share": (member[:, layer].sum(axis=1).astype(float), np.full(len(seeds), float(n_heads))),
                "strong_universality_best_match": tuple(part[layer] for part in strong["best_head"]),
                "strong_universality_one_to_one": tuple(part[layer] for part in strong["assigned_head"]),
            }
            for column in HEAD_STATISTICS:
                chosen = member[:, layer] & np.isfinite(values[column][:, layer])
                units[column] = (np.where(chosen, values[column][:, layer], 0.0).sum(axis=1), chosen.sum(axis=1))
            for statistic in UNIVERSALITY_STATISTICS:
                sums, counts = units[statistic]
                estimate, low, high = _ratio(
                    np.asarray(sums, float), np.asarray(counts, float), refit_counts, confidence
                )
                n = len(seeds) if statistic in ("weak_universality", "head_share") else int(np.sum(counts))
                rows.append((layer, (layer + 1) / n_layers, name, statistic, estimate, low, high, n, n_boot, rules[0]))
    return pd.DataFrame(rows, columns=UNIVERSALITY_COLUMNS)
