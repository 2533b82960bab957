"""Head-type thresholds, calibrated on held-out initialisations or fixed, and the types they give each head.

Refits trained here (threshold_rule "held_out_step0"): the architecture is initialised from extra seeds (the
held-out draws, `headstab.plan.seed_design.held_out_seeds`: disjoint from every refit's seed, never compared
with anything). Per layer and score, the threshold is the `quantile` of the layer's maximum over its heads
across the draws, raised to the score's floor. A step-0 refit then has some head of the layer above the
threshold with probability about 1 - quantile whatever the number of heads H (a quantile over single heads
gives about 1 - quantile^H), and the refits it is compared with never set it. The floor keeps near-uniform
heads untyped: even attention scores 0.01-0.04 on a 100-token probe set (column `even_attention`), and an
untrained layer's maximum barely more.

Published and hub refits (rule "fixed"), whose initialisation our seeds cannot rebuild: the config's fixed
thresholds, the same at every layer. The two rules are reported side by side, never pooled.

A head has every type (`headstab.head_types.TYPE_CRITERIA`) whose scores all exceed their thresholds.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from headstab.head_types import CRITERIA, HEAD_TYPES, NO_TYPE, SCORE_COLUMNS, TYPE_CRITERIA

__all__ = [
    "FIXED",
    "HEAD_TYPE_COLUMNS",
    "HELD_OUT",
    "THRESHOLD_COLUMNS",
    "calibrated_thresholds",
    "fixed_thresholds",
    "type_heads",
]

HELD_OUT, FIXED = "held_out_step0", "fixed"
THRESHOLD_COLUMNS = ["score", "layer", "threshold", "threshold_rule", "quantile", "calibrated", "floor"]
THRESHOLD_COLUMNS += ["even_attention", "n_refits"]
HEAD_TYPE_COLUMNS = ["refit", "layer", "head", *SCORE_COLUMNS, "type", "threshold_rule"]


def calibrated_thresholds(
    held_out: pd.DataFrame,
    quantile: float,
    floors: Mapping[str, float] | None,
    even_attention: Mapping[str, float],
) -> pd.DataFrame:
    """THRESHOLD_COLUMNS per layer and score of CRITERIA, rule "held_out_step0".

    held_out: score_table rows (refit, layer, head, scores) of the held-out initialisations of one
    architecture. calibrated: the `quantile` over draws of the layer's maximum over heads; threshold: the
    larger of it and floors[score] (no floor when `floors` is None); even_attention: `even_attention[score]`
    (NaN where absent). Raises ValueError for a quantile outside (0, 1), no rows, or a floor missing.
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"config key 'head_types.quantile' must be in (0, 1); got {quantile}")
    if held_out.empty:
        raise ValueError("no held-out step-0 scores to calibrate the head-type thresholds on")
    missing = [] if floors is None else [name for name in CRITERIA if name not in floors]
    if missing:
        raise ValueError(f"config key 'head_types.floors' lacks {missing}; it needs {list(CRITERIA)}")
    maxima = held_out.groupby(["layer", "refit"])[list(CRITERIA)].max()
    calibrated = maxima.groupby(level="layer").quantile(quantile)
    n_refits = held_out["refit"].nunique()
    rows = []
    for layer in calibrated.index:
        for name in CRITERIA:
            value = float(calibrated.loc[layer, name])
            floor = np.nan if floors is None else float(floors[name])
            threshold = value if floors is None else max(value, floor)
            even = even_attention.get(name, np.nan)
            rows.append((name, int(layer), threshold, HELD_OUT, quantile, value, floor, even, n_refits))
    return pd.DataFrame(rows, columns=THRESHOLD_COLUMNS)


def fixed_thresholds(
    thresholds: Mapping[str, float], n_layers: int, even_attention: Mapping[str, float]
) -> pd.DataFrame:
    """THRESHOLD_COLUMNS of the fixed thresholds (config key head_types.fixed_thresholds) at each of n_layers,
    rule "fixed"; even_attention as in calibrated_thresholds."""
    missing = [name for name in CRITERIA if name not in thresholds]
    if missing:
        raise ValueError(f"config key 'head_types.fixed_thresholds' lacks {missing}; it needs {list(CRITERIA)}")
    rows = [
        (name, layer, float(thresholds[name]), FIXED, np.nan, np.nan, np.nan, even_attention.get(name, np.nan), 0)
        for layer in range(n_layers)
        for name in CRITERIA
    ]
    return pd.DataFrame(rows, columns=THRESHOLD_COLUMNS)


def type_heads(scores: pd.DataFrame, thresholds: pd.DataFrame) -> pd.DataFrame:
    """HEAD_TYPE_COLUMNS: the score rows with `type`, every type of HEAD_TYPES whose criteria all exceed their
    layer's thresholds, joined by "+" ("none" when none does; a NaN score exceeds nothing), and the rule."""
    rules = thresholds["threshold_rule"].unique()
    message = f"thresholds must give every score of {list(CRITERIA)} once at every layer, under one rule"
    if len(rules) != 1 or thresholds.duplicated(["layer", "score"]).any():
        raise ValueError(message)
    limits = thresholds.pivot(index="layer", columns="score", values="threshold")
    if set(limits.columns) != set(CRITERIA) or limits.isna().to_numpy().any():
        raise ValueError(message)
    unknown = sorted(set(scores["layer"]) - set(limits.index))
    if unknown:
        raise ValueError(f"no head-type thresholds for layers {unknown}; they cover {sorted(limits.index)}")
    at_layer = limits.loc[scores["layer"].to_numpy()]
    above = {name: scores[name].to_numpy() > at_layer[name].to_numpy() for name in CRITERIA}
    typed = np.stack([np.logical_and.reduce([above[c] for c in TYPE_CRITERIA[t]]) for t in HEAD_TYPES], axis=1)
    names = np.array(HEAD_TYPES)
    labels = ["+".join(names[row]) or NO_TYPE for row in typed]
    return scores.assign(type=labels, threshold_rule=rules[0])[HEAD_TYPE_COLUMNS]
