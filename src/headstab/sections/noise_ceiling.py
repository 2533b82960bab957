"""The noise ceiling of head types: how well typing agrees within one refit, and cross-seed agreement set
against it (attenuation-corrected), per layer and type.

Head stability needs no such ceiling: it compares two heads' patterns on the same prompts, so a refit against
itself scores exactly 1 on every prompt, and prompt sampling enters only through its interval. Head types are
measured on a sample of probe sequences, and two samples can type one head differently. So every refit is
typed on two disjoint halves of the probe set (`headstab.head_types.ProbeSet.rows`), "first" and "second",
and per layer and type of HEAD_TYPES (its score: the attention score of the same name):

- typed_share: the share of (refit, head) with the type on either half (where it is 0, every label agrees
  trivially and the label rows say nothing);
- reliability_label: the share of (refit, head) whose label (has the type or not) agrees between the halves;
- reliability_score: the split-half correlation of the score over (refit, head), Pearson's r over both orderings
  of the two halves (the double-entry intraclass correlation: the halves are exchangeable); reliability_score_full:
  its Spearman-Brown correction to the whole probe set, 2 r / (1 + r);
- cross_seed_label, cross_seed_score: for every (anchor head, pair refit) of pair_stability.csv, the anchor typed
  on one half against its best match typed on the other (both ways round): label agreement and score r (double
  entry, as every r here);
- corrected_label: cross_seed_label / sqrt(a_anchor a_partner), where a_anchor and a_partner are the within-refit
  label agreements of the same anchors and partners (the ratio of agreements when every head is as reliable);
- corrected_score: r_xy / sqrt(r_xx r_yy) (Spearman's correction for attenuation), r_xx and r_yy the split-half r
  of the same anchors' and partners' scores; NaN where either is not positive.

Intervals are NaN with 2 refits: a resample must hold two distinct refits, so it draws both once.

A refit against a copy of itself gives corrected agreement 1: its partners' cross-half agreement is its own
within-refit agreement. Intervals resample refits (`headstab.statistics.bootstrap.draw_resamples`): a refit's
units weigh k_a, a pair's k_a k_b, and each statistic is recomputed from the resampled sums. They are
descriptive (method noise_ceiling_refit_bootstrap, `headstab.statistics.calibration`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from headstab.head_types import HEAD_TYPES, has_type
from headstab.statistics.bootstrap import draw_resamples, percentile_interval
from headstab.statistics.calibration import calibration_label

__all__ = ["CEILING_COLUMNS", "CEILING_METHOD", "CEILING_STATISTICS", "noise_ceiling_table", "spearman_brown"]

CEILING_METHOD = "noise_ceiling_refit_bootstrap"
REFIT_STATISTICS = ("typed_share", "reliability_label", "reliability_score", "reliability_score_full")
PAIR_STATISTICS = ("cross_seed_label", "cross_seed_score", "corrected_label", "corrected_score")
CEILING_STATISTICS = (*REFIT_STATISTICS, *PAIR_STATISTICS)
CEILING_COLUMNS = ["layer", "relative_depth", "type", "statistic", "estimate", "ci_low", "ci_high", "n"]
CEILING_COLUMNS += ["n_boot", "threshold_rule", "calibration"]
MOMENTS = ("n", "x", "y", "xx", "yy", "xy")


def spearman_brown(r: np.ndarray | float) -> np.ndarray:
    """The reliability of a score on the whole probe set from the split-half correlation r: 2 r / (1 + r); NaN
    where r < 0 (halves that disagree more than chance have no reliability to extend)."""
    r = np.asarray(r, dtype=np.float64)
    out = np.full(r.shape, np.nan)
    return np.divide(2 * r, 1 + r, out=out, where=r >= 0)


def _moments(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """The sums behind Pearson's r over both orderings (x, y) and (y, x) of each unit: 2, x + y, x + y, x^2 + y^2,
    x^2 + y^2, 2 x y. The halves are exchangeable, so r is the double-entry (intraclass) correlation."""
    total, squares = x + y, x * x + y * y
    return dict(zip(MOMENTS, (np.full_like(x, 2.0), total, total, squares, squares, 2 * x * y), strict=True))


def _pearson(totals: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    """Pearson's r from summed moments `prefix`_n, ..., `prefix`_xy; NaN where either variance is zero."""
    n, x, y, xx, yy, xy = (totals[f"{prefix}_{name}"] for name in MOMENTS)
    covariance, var_x, var_y = n * xy - x * y, n * xx - x * x, n * yy - y * y
    denominator = np.sqrt(np.clip(var_x, 0, None) * np.clip(var_y, 0, None))
    out = np.full(np.shape(n), np.nan)
    # a variance below the rounding of its sums is zero: the score is constant over the units
    scale = np.sqrt(np.abs(n * xx) * np.abs(n * yy))
    return np.divide(covariance, denominator, out=out, where=denominator > 1e-12 * scale)


def _divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    out = np.full(np.shape(numerator), np.nan)
    return np.divide(numerator, denominator, out=out, where=np.asarray(denominator) > 0)


def _grids(types: pd.DataFrame, seeds: Sequence, shape: tuple[int, int, int], half: str) -> dict[str, np.ndarray]:
    """{type: score float64 [refit, layer, head]} and {type + "_member": bool [refit, layer, head]} of one half."""
    index = {seed: i for i, seed in enumerate(seeds)}
    refit = types["refit"].map(index)
    keys = types[["refit", "layer", "head"]]
    inside = types["layer"].between(0, shape[1] - 1) & types["head"].between(0, shape[2] - 1)
    if refit.isna().any() or len(types) != np.prod(shape) or keys.duplicated().any() or not inside.all():
        raise ValueError(
            f"the {half} probe half's head types cover refits {sorted(types['refit'].unique().tolist())} in {len(types)} rows; "
            f"the noise ceiling needs every head of refits {list(seeds)} x {shape[1]} layers x {shape[2]} heads once. "
            "Rebuild noise_ceiling_scores.csv from the same refits as pair_stability.csv"
        )
    where = (refit.to_numpy(int), types["layer"].to_numpy(int), types["head"].to_numpy(int))
    out = {}
    for name in HEAD_TYPES:
        score, member = np.full(shape, np.nan), np.zeros(shape, dtype=bool)
        score[where], member[where] = types[name].to_numpy(np.float64), has_type(types["type"], name)
        out[name], out[f"{name}_member"] = score, member
    return out


def _pair_index(pairs: pd.DataFrame, seeds: Sequence, n_layers: int, n_heads: int) -> dict[str, np.ndarray]:
    """Columns a, b (refit indices), layer, head, best_head of same-layer pair_stability rows, checked complete."""
    index = {seed: i for i, seed in enumerate(seeds)}
    a, b = pairs["anchor_seed"].map(index), pairs["pair_seed"].map(index)
    n = len(seeds)
    keys = pairs[["anchor_seed", "pair_seed", "layer", "head"]]
    if (
        a.isna().any()
        or b.isna().any()
        or (a == b).any()
        or len(pairs) != n * (n - 1) * n_layers * n_heads
        or keys.duplicated().any()
        or ("best_layer" in pairs and (pairs["best_layer"] != pairs["layer"]).any())
    ):
        raise ValueError(
            f"pair_stability rows ({len(pairs)}) must give the same-layer best match of every head of every refit "
            f"of {list(seeds)} in every other refit once ({n * (n - 1) * n_layers * n_heads} rows); select scope "
            "same_layer and one promptset, and rebuild it from the same refits as the head types"
        )
    columns = {name: pairs[name].to_numpy(int) for name in ("layer", "head", "best_head")}
    return {"a": a.to_numpy(int), "b": b.to_numpy(int), **columns}


def _refit_units(first: dict, second: dict, name: str, layer: int) -> dict[str, np.ndarray]:
    """{sum: float64 [refit]} of one layer: label agreements between the halves, heads, and the score moments."""
    x, y = first[name][:, layer], second[name][:, layer]
    agree = first[f"{name}_member"][:, layer] == second[f"{name}_member"][:, layer]
    typed = first[f"{name}_member"][:, layer] | second[f"{name}_member"][:, layer]
    units = {"agree": agree, "typed": typed, "count": np.ones_like(x)}
    units |= {f"within_{key}": value for key, value in _moments(x, y).items()}
    return {key: np.asarray(value, dtype=np.float64).sum(axis=1) for key, value in units.items()}


def _pair_units(first: dict, second: dict, name: str, pairs: dict, layer: int, n: int) -> dict[str, np.ndarray]:
    """{sum: float64 [a, b]} of one layer over its (anchor head, pair refit) rows, the anchor on each half and
    its best match on the other: cross-half agreements, the anchors' and partners' own, and the moments."""
    rows = pairs["layer"] == layer
    a, b, head, partner = (pairs[key][rows] for key in ("a", "b", "head", "best_head"))
    member = {half: grids[f"{name}_member"][:, layer] for half, grids in (("first", first), ("second", second))}
    score = {half: grids[name][:, layer] for half, grids in (("first", first), ("second", second))}
    units = {
        "cross_agree": (member["first"][a, head] == member["second"][b, partner]).astype(float)
        + (member["second"][a, head] == member["first"][b, partner]),
        "cross_count": np.full(a.size, 2.0),
        "anchor_agree": (member["first"][a, head] == member["second"][a, head]).astype(float),
        "partner_agree": (member["first"][b, partner] == member["second"][b, partner]).astype(float),
        "count": np.ones(a.size),
    }
    cross = _moments(score["first"][a, head], score["second"][b, partner])
    back = _moments(score["second"][a, head], score["first"][b, partner])
    units |= {f"cross_{key}": cross[key] + back[key] for key in MOMENTS}
    units |= {f"anchor_{k}": v for k, v in _moments(score["first"][a, head], score["second"][a, head]).items()}
    units |= {f"partner_{k}": v for k, v in _moments(score["first"][b, partner], score["second"][b, partner]).items()}
    cell = np.ravel_multi_index((a, b), (n, n))
    return {key: np.bincount(cell, weights=value, minlength=n * n).reshape(n, n) for key, value in units.items()}


def _refit_statistics(totals: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    r = _pearson(totals, "within")
    return {
        "typed_share": _divide(totals["typed"], totals["count"]),
        "reliability_label": _divide(totals["agree"], totals["count"]),
        "reliability_score": r,
        "reliability_score_full": spearman_brown(r),
    }


def _pair_statistics(totals: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    cross_label = _divide(totals["cross_agree"], totals["cross_count"])
    own = _divide(totals["anchor_agree"], totals["count"]) * _divide(totals["partner_agree"], totals["count"])
    cross_score = _pearson(totals, "cross")
    anchor, partner = _pearson(totals, "anchor"), _pearson(totals, "partner")
    reliabilities = np.where((anchor > 0) & (partner > 0), anchor * partner, np.nan)  # two negatives: no reliability
    return {
        "cross_seed_label": cross_label,
        "cross_seed_score": cross_score,
        "corrected_label": _divide(cross_label, np.sqrt(np.where(own > 0, own, np.nan))),
        "corrected_score": _divide(cross_score, np.sqrt(reliabilities)),
    }


def _estimates(units: dict[str, np.ndarray], refit_counts: np.ndarray | None, statistics, confidence: float):
    """{statistic: (estimate, low, high)} from per-refit [r] or per-pair [a, b] sums; a resample (refit_counts
    [boot, refit]) weighs refit a by k_a and pair (a, b) by k_a k_b; NaN interval where no resample is finite or
    there are no resamples (None)."""

    def totals(weights: np.ndarray) -> dict[str, np.ndarray]:
        if next(iter(units.values())).ndim == 1:
            return {key: weights @ value for key, value in units.items()}
        return {key: ((weights @ value) * weights).sum(axis=-1) for key, value in units.items()}

    n = next(iter(units.values())).shape[0]
    observed = statistics(totals(np.ones(n)))
    if refit_counts is None:
        return {key: (float(value), np.nan, np.nan) for key, value in observed.items()}
    replicates = statistics(totals(refit_counts.astype(np.float64)))
    out = {}
    for key, value in observed.items():
        finite = replicates[key][np.isfinite(replicates[key])]
        low, high = percentile_interval(finite, confidence) if finite.size else (np.nan, np.nan)
        out[key] = (float(value), float(low), float(high))
    return out


def noise_ceiling_table(
    first: pd.DataFrame,
    second: pd.DataFrame,
    pairs: pd.DataFrame,
    seeds: Sequence,
    *,
    n_boot: int,
    seed: int,
    confidence: float,
) -> pd.DataFrame:
    """CEILING_COLUMNS: every statistic of CEILING_STATISTICS per layer and type of HEAD_TYPES.

    first, second: HEAD_TYPE_COLUMNS (`headstab.head_type_thresholds.type_heads`) of every head of every refit in
    `seeds`, typed on the first and the second half of the probe set by the same thresholds; pairs: the same
    refits' same-layer pair_stability rows of one prompt set (anchor_seed, pair_seed, layer, head, best_head).
    n: the (refit, head) units behind a within-refit statistic, the (anchor head, pair refit) units behind a
    cross-seed one. Intervals: `n_boot` refit resamples drawn with `seed`.
    """
    seeds = list(seeds)
    if len(seeds) < 2:
        raise ValueError(f"the noise ceiling compares refits: it needs at least 2; got {seeds}")
    rules = set(first["threshold_rule"]) | set(second["threshold_rule"])
    if len(rules) != 1:
        raise ValueError(f"the two probe halves must be typed by one threshold rule; got {sorted(rules)}")
    n_layers, n_heads = int(first["layer"].max()) + 1, int(first["head"].max()) + 1
    shape = (len(seeds), n_layers, n_heads)
    grids = [_grids(types, seeds, shape, half) for types, half in ((first, "first"), (second, "second"))]
    pair_index = _pair_index(pairs, seeds, n_layers, n_heads)
    # a resample of 2 refits draws both once (at least two distinct refits): it cannot vary them, so no interval
    refit_counts = draw_resamples(n_boot, len(seeds), 1, seed).refit_counts if len(seeds) > 2 else None
    label, rule = calibration_label(CEILING_METHOD, len(seeds)), rules.pop()
    sizes = {"refit": len(seeds) * n_heads, "pair": len(seeds) * (len(seeds) - 1) * n_heads}
    rows = []
    for name in HEAD_TYPES:
        for layer in range(n_layers):
            within = _refit_units(*grids, name, layer)
            cross = _pair_units(*grids, name, pair_index, layer, len(seeds))
            values = _estimates(within, refit_counts, _refit_statistics, confidence)
            values |= _estimates(cross, refit_counts, _pair_statistics, confidence)
            for statistic in CEILING_STATISTICS:
                n = sizes["refit" if statistic in REFIT_STATISTICS else "pair"]
                depth = (layer + 1) / n_layers
                rows.append((layer, depth, name, statistic, *values[statistic], n, n_boot, rule, label))
    return pd.DataFrame(rows, columns=CEILING_COLUMNS)
