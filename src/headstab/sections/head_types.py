"""Are head types universal across refits? Weak and strong universality per layer and type.

From the typed heads of every refit (`headstab.head_type_thresholds.type_heads`), the same-layer best match
and one-to-one partner of every head in every other refit (pair_stability.csv) and head stability
(head_stability.csv), per layer and type (the four of `HEAD_TYPES`, and "none" for untyped heads):

- weak_universality: the share of refits with at least one head of the type in the layer, with its exact
  (Clopper-Pearson) interval;
- head_share: the share of the layer's heads that have the type (mean over refits);
- strong_universality_best_match, strong_universality_one_to_one: of the (anchor head of the type, pair
  refit) pairs, the share whose best match / one-to-one partner has the type too;
- strong_universality_chance: what a random partner gives, the mean over the same pairs of the pair refit's
  head share (Cohen's chance agreement for the type);
- strong_universality_best_match_corrected, strong_universality_one_to_one_corrected: (strong - chance) /
  (1 - chance), 0 when partners have the type no more often than random heads of their layer, 1 when always;
  NaN where every head of the partner layers has the type (a partner cannot tell);
- stability, stability_one_to_one: the mean over the same pairs of the similarity to the best match /
  one-to-one partner (pair_stability.csv), which is the mean of the type's heads' stability (Eq. 4);
- above_null, one_to_one_above_null: the mean over the type's heads (every refit as anchor) of that column
  of head_stability.csv (the null is per head, not per pair, so these resample anchor refits only).

Weak vs strong universality is the distinction of Chughtai et al. 2023 that the paper calls unresolved:
every refit learns the kind of head (weak), or the heads that match across refits are of the same kind
(strong). The other intervals resample refits (`headstab.statistics.refit_weights`'s weighting): a refit's
row weighs k_a, a pair's k_a k_b; every statistic is a ratio of sums over refits (or pairs), so a resample is
two matrix products. Every interval is NaN where fewer than two refits contribute to it, and `calibration`
says whether its method is calibrated at this number of refits (`headstab.statistics.calibration`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from headstab.head_types import HEAD_TYPES, NO_TYPE, has_type
from headstab.statistics.binomial import share_interval
from headstab.statistics.bootstrap import draw_resamples, percentile_interval
from headstab.statistics.calibration import calibration_label

__all__ = ["STATISTIC_METHODS", "TYPES", "UNIVERSALITY_COLUMNS", "UNIVERSALITY_STATISTICS", "universality_table"]

TYPES = (*HEAD_TYPES, NO_TYPE)
STRONG = ("best_match", "one_to_one")
STRONG_METHOD, PAIR, ANCHOR = "strong_universality_bootstrap", "head_type_pair_bootstrap", "head_type_anchor_bootstrap"
# The calibrated method behind each statistic's interval (`headstab.statistics.calibration.METHODS`).
STATISTIC_METHODS = {
    "weak_universality": "refit_share_exact",
    "head_share": "head_type_share_bootstrap",
    **{f"strong_universality_{kind}": STRONG_METHOD for kind in STRONG},
    "strong_universality_chance": STRONG_METHOD,
    **{f"strong_universality_{kind}_corrected": STRONG_METHOD for kind in STRONG},
    "stability": PAIR,
    "stability_one_to_one": PAIR,
    "above_null": ANCHOR,
    "one_to_one_above_null": ANCHOR,
}
UNIVERSALITY_STATISTICS = tuple(STATISTIC_METHODS)
UNIVERSALITY_COLUMNS = ["layer", "relative_depth", "type", "statistic", "estimate", "ci_low", "ci_high", "n"]
UNIVERSALITY_COLUMNS += ["n_boot", "threshold_rule", "calibration"]
# Per (anchor head, pair refit) in pair_stability.csv: each partner's head and the similarity to it.
PARTNERS = {"best_match": ("best_head", "similarity"), "one_to_one": ("assigned_head", "assigned_similarity")}
HEAD_STATISTICS = ("above_null", "one_to_one_above_null")  # per anchor head only, in head_stability.csv


def _divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, NaN where the denominator is 0."""
    out = np.full(np.shape(numerator), np.nan)
    return np.divide(numerator, denominator, out=out, where=np.asarray(denominator) != 0)


def _ratio(
    sums: np.ndarray, counts: np.ndarray, refit_counts: np.ndarray | None, confidence: float
) -> tuple[float, float, float]:
    """(estimate, ci_low, ci_high) of sum(sums) / sum(counts), each [refit] or [refit_a, refit_b]; a resample
    weighs refit a by k_a and pair (a, b) by k_a k_b. NaN estimate where no unit counts; NaN interval where
    fewer than two refits (anchors, for pairs) count."""
    estimate = float(_divide(sums.sum(), counts.sum()))
    contributing = counts if counts.ndim == 1 else counts.sum(axis=1)
    if np.count_nonzero(contributing) < 2:
        return estimate, np.nan, np.nan
    k = refit_counts
    if sums.ndim == 1:
        numerator, denominator = k @ sums, k @ counts
    else:
        numerator, denominator = ((k @ sums) * k).sum(axis=1), ((k @ counts) * k).sum(axis=1)
    replicates = _divide(numerator, denominator)
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
        grid[refit.to_numpy(), types["layer"].to_numpy(), types["head"].to_numpy()] = has_type(types["type"], name)
        out[name] = grid
    return out


def _pair_units(member: np.ndarray, pairs: dict[str, np.ndarray]) -> tuple[dict[str, tuple], np.ndarray]:
    """({statistic: (sums, counts)}, anchors), each [layer, a, b], over the anchor heads of the type (member
    [refit, layer, head]): strong universality by each partner and the partner's similarity (stability,
    stability_one_to_one); anchors: the typed anchor heads per pair of refits."""
    n_refits, n_layers = member.shape[:2]
    shape = (n_layers, n_refits, n_refits)
    cell = np.ravel_multi_index((pairs["layer"], pairs["a"], pairs["b"]), shape)

    def total(weights: np.ndarray) -> np.ndarray:
        return np.bincount(cell, weights=weights, minlength=np.prod(shape)).reshape(shape)

    anchor = member[pairs["a"], pairs["layer"], pairs["head"]]
    counts = total(anchor)
    units = {}
    for kind, (partner, similarity) in PARTNERS.items():
        units[f"strong_universality_{kind}"] = (
            total(member[pairs["b"], pairs["layer"], pairs[partner]] & anchor),
            counts,
        )
        chosen = anchor & np.isfinite(pairs[similarity])
        units["stability" if kind == "best_match" else "stability_one_to_one"] = (
            total(np.where(chosen, pairs[similarity], 0.0)),
            total(chosen),
        )
    return units, counts


def _strong_units(member: np.ndarray, pair_units: tuple[dict, np.ndarray], layer: int) -> dict[str, tuple]:
    """(sums, counts) [a, b] of one layer's pair statistics (`_pair_units`), with the chance level of strong
    universality and its chance-corrected form."""
    units, anchors = pair_units
    counts = anchors[layer]
    # chance: each anchor head's pair refit b contributes its layer's share of heads with the type
    chance = counts * member[:, layer].mean(axis=1)[None, :]
    out = {name: (sums[layer], total[layer]) for name, (sums, total) in units.items()}
    out["strong_universality_chance"] = (chance, counts)
    for kind in STRONG:
        sums = units[f"strong_universality_{kind}"][0][layer]
        out[f"strong_universality_{kind}_corrected"] = (sums - chance, counts - chance)
    return out


def _pair_index(pairs: pd.DataFrame, seeds: Sequence) -> dict[str, np.ndarray]:
    index = {seed: i for i, seed in enumerate(seeds)}
    # int: pair_stability.csv leaves assigned_head empty on its cross-layer rows, so it is read as float
    columns = {name: pairs[name].to_numpy(int) for name in ("layer", "head", "best_head", "assigned_head")}
    values = {name: pairs[name].to_numpy() for name in ("similarity", "assigned_similarity")}
    a, b = pairs["anchor_seed"].map(index).to_numpy(), pairs["pair_seed"].map(index).to_numpy()
    return {"a": a, "b": b, **columns, **values}


def _head_values(heads: pd.DataFrame, seeds: Sequence, shape: tuple[int, int, int]) -> dict[str, np.ndarray]:
    """{column: float64 [refit, layer, head]} of HEAD_STATISTICS from head_stability rows (the refit as anchor)."""
    index = {seed: i for i, seed in enumerate(seeds)}
    where = (heads["anchor_seed"].map(index).to_numpy(), heads["layer"].to_numpy(), heads["head"].to_numpy())
    out = {}
    for column in HEAD_STATISTICS:
        grid = np.full(shape, np.nan)
        grid[where] = heads[column].to_numpy()
        out[column] = grid
    return out


def _layer_rows(member, layer, strong, values, refit_counts, confidence) -> list[tuple]:
    """(statistic, estimate, low, high, n) of every statistic of one type in one layer."""
    n_refits = member.shape[0]
    present = member[:, layer].any(axis=1)
    rows = [("weak_universality", *share_interval(int(present.sum()), n_refits, confidence), n_refits)]
    units = {"head_share": (member[:, layer].mean(axis=1), np.ones(n_refits))}
    units |= _strong_units(member, strong, layer)
    for column in HEAD_STATISTICS:
        chosen = member[:, layer] & np.isfinite(values[column][:, layer])
        units[column] = (np.where(chosen, values[column][:, layer], 0.0).sum(axis=1), chosen.sum(axis=1))
    anchors = int(units["strong_universality_chance"][1].sum())  # (typed anchor head, pair refit) pairs
    for statistic in UNIVERSALITY_STATISTICS[1:]:
        sums, counts = units[statistic]
        estimate, low, high = _ratio(sums, counts, refit_counts, confidence)
        n = anchors if statistic.startswith("strong") else int(counts.sum())  # head_share: counts are ones
        rows.append((statistic, estimate, low, high, n))
    return rows


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
    set (anchor_seed, pair_seed, layer, head, best_head, similarity, assigned_head, assigned_similarity);
    heads: the same prompt set's same-layer head_stability rows (anchor_seed, layer, head, above_null,
    one_to_one_above_null). n: the refits, the typed anchor heads' pairs, or the typed heads behind each
    estimate. Intervals: exact for weak universality, else `n_boot` refit resamples drawn with `seed`.
    """
    seeds = list(seeds)
    n_layers, n_heads = int(types["layer"].max()) + 1, int(types["head"].max()) + 1
    members = _membership(types, seeds, n_layers, n_heads)
    pair_index = _pair_index(pairs, seeds)
    values = _head_values(heads, seeds, (len(seeds), n_layers, n_heads))
    refit_counts = draw_resamples(n_boot, len(seeds), 1, seed).refit_counts if len(seeds) > 1 else None
    rule = types["threshold_rule"].unique()[0]
    labels = {statistic: calibration_label(method, len(seeds)) for statistic, method in STATISTIC_METHODS.items()}
    rows = []
    for name in TYPES:
        strong = _pair_units(members[name], pair_index)
        for layer in range(n_layers):
            for statistic, *numbers in _layer_rows(members[name], layer, strong, values, refit_counts, confidence):
                depth = (layer + 1) / n_layers
                rows.append((layer, depth, name, statistic, *numbers, n_boot, rule, labels[statistic]))
    return pd.DataFrame(rows, columns=UNIVERSALITY_COLUMNS)
