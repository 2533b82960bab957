"""Stability gap and depth of the extreme layers across architectures (paper §4.6, Fig. 7-8), and the layer tests.

Per architecture and anchor: ΔS = S(l_max) - S(l_min) between its most and least stable layer, and their
relative depths r = l / L (l counted from 1, as the paper does), with ΔS of the prompt-permutation null, of
stability above it and of the content variant beside it.

ΔS is a range over L layer means, so it grows with L even when no layer differs, and the raw layer means carry
the layers' chance floors. The claims are tested with refits as units (`headstab.statistics.layer_tests`) on
each refit's pseudo-values of pooled layer stability above its null (`layer_pseudo_values`): do the layers
differ beyond chance, is the dip at mid-depth (interior layers below the two end layers), and do deeper models
dip more (architectures as units, `gap_depth_table`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from headstab.sections.optimizer_tests import TESTED_STATISTICS
from headstab.statistics.bootstrap import best_match
from headstab.statistics.calibration import DESCRIPTIVE, calibration_label
from headstab.statistics.hypothesis import pair_pseudo_values
from headstab.statistics.layer_tests import depth_trend_test, layer_heterogeneity_test, mid_depth_test, q_values
from headstab.table_rows import select_rows

GAP_COLUMNS = ["anchor_seed", "s_max", "s_min", "delta_s", "l_max", "l_min", "r_max", "r_min"]
FACT_COLUMNS = ["architecture", "n_layers", "n_heads", "optimizer", "attention_only"]
# ΔS of these layer_stability columns: the prompt-permutation null, stability above it, the content variant.
NULL_SOURCES = {
    "delta_s_prompt_null": "null",
    "delta_s_above_null": "above_null",
    "delta_s_content": "stability_content",
    "delta_s_content_above_null": "stability_content_above_null",
}
SUMMARY_COLUMNS = [*FACT_COLUMNS, *GAP_COLUMNS, *NULL_SOURCES]
PSEUDO_VALUE_COLUMNS = ["statistic", "seed", "layer", "relative_depth", "pseudo_value"]
# Raw statistic -> its version above the prompt-permutation null: only the latter is tested, since the raw
# layer means differ by their chance floors alone.
ABOVE_NULL = {"layer_stability": "layer_above_null", "layer_stability_content": "layer_content_above_null"}
LAYER_TEST_COLUMNS = [*FACT_COLUMNS, "statistic", "test", "estimate", "chance", "p_value", "q_value", "min_p"]
LAYER_TEST_COLUMNS += ["n_refits", "n_signs", "calibration", "note"]
# test -> the calibration method of its p-value (headstab.statistics.calibration)
LAYER_TEST_METHODS = {"layers_differ": "layer_heterogeneity_sign_flip", "mid_depth_dip": "mid_depth_sign_flip"}
DEPTH_COLUMNS = ["quantity", "n_layers", "mean", "sd", "n_architectures", "spearman_rho", "p_value"]
DEPTH_COLUMNS += ["n_permutations", "calibration", "note"]
RANGE_QUANTITIES = ("delta_s", "delta_s_prompt_null", "delta_s_above_null", "delta_s_content")
# quantity -> the layer_tests statistic whose mid-depth dip it is; only the one above the null is tested
DIP_QUANTITIES = {"mid_depth_dip": "layer_above_null", "mid_depth_dip_raw": "layer_stability"}
RAW_NOTE = "raw stability: the layers' chance floors differ, so this describes and does not test"
RANGE_NOTE = "a range over L layer means grows with L when no layer differs: rho describes, it does not test"


def stability_gap_table(
    layer_stability: pd.DataFrame,
    n_layers: int,
    promptset: str | None,
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
        layers = group["layer"].to_numpy()
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


def null_source_gaps(layer_stability: pd.DataFrame, promptset: str | None) -> pd.DataFrame:
    """anchor_seed and NULL_SOURCES: per anchor, ΔS (max - min over layers) of each layer column of NULL_SOURCES,
    NaN where the table lacks it. layer_stability: promptset, scope, anchor_seed, layer and those columns."""
    layers = select_rows(layer_stability, "layer stability", promptset=promptset, scope="same_layer")
    rows = []
    for anchor, group in layers.groupby("anchor_seed"):
        row = {"anchor_seed": anchor}
        for name, column in NULL_SOURCES.items():
            row[name] = np.ptp(group[column].to_numpy(float)) if column in group else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def stability_gap_summary(
    layer_stability: Mapping[str, pd.DataFrame], facts: Mapping[str, Mapping[str, Any]], promptset: str
) -> pd.DataFrame:
    """SUMMARY_COLUMNS of every architecture: layer_stability maps architecture -> its table, facts
    architecture -> `headstab.sections.architecture_facts`."""
    frames = []
    for arch, table in layer_stability.items():
        frame = stability_gap_table(table, facts[arch]["n_layers"], promptset=promptset)
        gaps = null_source_gaps(table, promptset).set_index("anchor_seed").loc[frame["anchor_seed"]]
        frame[list(NULL_SOURCES)] = gaps.to_numpy()
        frames.append(frame.assign(architecture=arch, **facts[arch]))
    return pd.concat(frames, ignore_index=True)[SUMMARY_COLUMNS]


def layer_pseudo_values(grouped) -> pd.DataFrame:
    """PSEUDO_VALUE_COLUMNS: per statistic of TESTED_STATISTICS that `grouped` holds, refit (seed) and layer, the
    jackknife pseudo-value of pooled layer stability (`pair_pseudo_values`): the per-pair value is the mean over
    the layer's heads of the best match (minus the subtracted tensor's best match) from the full-data prompt-group
    means. With fewer than 3 refits pseudo-values are undefined: the rows are there, pseudo_value NaN.

    grouped: `headstab.similarity.prompt_groups.GroupedSimilarity` ([group, seed_a, seed_b, layer, head, head]).
    """
    n_seeds, n_layers = len(grouped.seeds), grouped.observed.shape[3]
    seed, layer = np.meshgrid(np.asarray(grouped.seeds), np.arange(n_layers), indexing="ij")
    frames = []
    for statistic in [name for name in TESTED_STATISTICS if "content" not in name or grouped.has_content]:
        main, subtracted = TESTED_STATISTICS[statistic]
        psi = np.full((n_seeds, n_layers), np.nan)
        if n_seeds >= 3:
            values = best_match(grouped.mean(main)).mean(axis=-1)  # [seed_a, seed_b, layer]
            if subtracted is not None:
                values = values - best_match(grouped.mean(subtracted)).mean(axis=-1)
            psi = pair_pseudo_values(values)
        frames.append(
            pd.DataFrame(
                {
                    "statistic": statistic,
                    "seed": seed.ravel(),
                    "layer": layer.ravel(),
                    "relative_depth": (layer.ravel() + 1) / n_layers,
                    "pseudo_value": psi.ravel(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[PSEUDO_VALUE_COLUMNS]


def _test_rows(psi: np.ndarray, statistic: str, permutations: int, seed: int) -> list[dict[str, Any]]:
    """The layers_differ and mid_depth_dip rows of one statistic's psi [refit, layer] (LAYER_TEST_COLUMNS
    without the facts and q_value; a column a row leaves out is NaN in the table)."""
    n_refits = len(psi)
    tested = statistic in ABOVE_NULL.values()
    base = {"statistic": statistic, "n_refits": n_refits, "n_signs": 0, "calibration": DESCRIPTIVE}
    base["note"] = "" if tested else RAW_NOTE
    if n_refits < 3:  # layer_pseudo_values leaves them NaN; any other NaN is refused by the tests
        note = f"per-refit pseudo-values need at least 3 refits; this architecture has {n_refits}"
        return [{**base, "test": test, "note": note} for test in LAYER_TEST_METHODS]
    spread = layer_heterogeneity_test(psi, permutations, seed)
    dip = mid_depth_test(psi, permutations, seed)
    rows = [
        {**base, "test": "layers_differ", "estimate": spread["delta_s"]},
        {**base, "test": "mid_depth_dip", "estimate": dip["dip"], "note": dip["note"] or base["note"]},
    ]
    if tested:
        rows[0].update({key: spread[key] for key in ("chance", "p_value", "min_p", "n_signs")})
        rows[1].update({key: dip[key] for key in ("p_value", "min_p", "n_signs")})
        rows[1]["chance"] = 0.0 if np.isfinite(dip["dip"]) else np.nan  # a contrast of layers: 0 when none differs
        for row in rows:
            if np.isfinite(row["p_value"]):
                row["calibration"] = calibration_label(LAYER_TEST_METHODS[row["test"]], n_refits)
    return rows


def layer_tests_table(
    pseudo_values: Mapping[str, pd.DataFrame], facts: Mapping[str, Mapping[str, Any]], permutations: int, seed: int
) -> pd.DataFrame:
    """LAYER_TEST_COLUMNS: per architecture and statistic of its pseudo-values (`layer_pseudo_values` tables by
    architecture), with refits as units (`headstab.statistics.layer_tests`):

    - layers_differ: estimate ΔS of the pooled layer means, chance its mean under sign flips of each refit's
      centred layer vector, p_value the share of flipped ranges at least ΔS;
    - mid_depth_dip: estimate the mean of the end layers minus the interior layers' (> 0: a dip), chance 0,
      p_value one-sided over sign flips of the per-refit dips; NaN with fewer than 3 layers.

    Raw statistics (without the null subtracted) are described: no p-value. min_p is the smallest p the test can
    give with these refits; q_value the Benjamini-Hochberg q within each test over the table; calibration from
    `headstab.statistics.calibration` at n_refits; note says why a value is missing or only descriptive.
    """
    rows = []
    for arch, table in pseudo_values.items():
        for statistic, group in table.groupby("statistic", sort=False):
            psi = group.pivot(index="seed", columns="layer", values="pseudo_value").sort_index(axis=1).to_numpy()
            for row in _test_rows(psi, str(statistic), permutations, seed):
                rows.append({"architecture": arch, **{key: facts[arch][key] for key in FACT_COLUMNS[1:]}, **row})
    out = pd.DataFrame(rows, columns=LAYER_TEST_COLUMNS)
    out["q_value"] = out.groupby("test")["p_value"].transform(q_values)
    return out


def _per_architecture(summary: pd.DataFrame, layer_tests: pd.DataFrame | None) -> pd.DataFrame:
    """Per architecture: n_layers, the mean over anchors of each range quantity, and its mid-depth dips."""
    quantities = [q for q in RANGE_QUANTITIES if q in summary.columns and summary[q].notna().any()]
    per_arch = summary.groupby("architecture", sort=False).agg(
        n_layers=("n_layers", "first"), **{q: (q, "mean") for q in quantities}
    )
    if layer_tests is not None:
        dips = layer_tests[layer_tests["test"] == "mid_depth_dip"]
        for quantity, statistic in DIP_QUANTITIES.items():
            values = dips[dips["statistic"] == statistic].set_index("architecture")["estimate"]
            per_arch[quantity] = per_arch.index.map(values)
    return per_arch


def gap_depth_table(
    summary: pd.DataFrame, permutations: int, seed: int, layer_tests: pd.DataFrame | None = None
) -> pd.DataFrame:
    """DEPTH_COLUMNS: each quantity against depth, architectures as units (each with its mean over anchors).

    Per quantity and depth: mean and s.d. (ddof 0) over architectures. Per quantity: Spearman's rho of the
    architectures' values with n_layers (`depth_trend_test`). Only "mid_depth_dip" (of stability above its null,
    from `layer_tests`) is tested: "deeper models dip more", one-sided, its values permuted over the
    architectures that have one (at least 3 layers). The ranges of RANGE_QUANTITIES grow with L when no layer
    differs and the raw dip carries the chance floors, so their rho is descriptive (p NaN, note says why).
    """
    per_arch = _per_architecture(summary, layer_tests)
    depth = per_arch["n_layers"].to_numpy()
    rows = []
    for quantity in per_arch.columns.drop("n_layers"):
        values = per_arch[quantity].to_numpy()
        tested = quantity == "mid_depth_dip"
        trend = depth_trend_test(depth, values, permutations, seed, alternative="greater")
        p_value = trend["p_value"] if tested else np.nan
        label = calibration_label("dip_depth_permutation", trend["n_units"]) if np.isfinite(p_value) else DESCRIPTIVE
        note = "" if tested else (RAW_NOTE if quantity in DIP_QUANTITIES else RANGE_NOTE)
        for n_layers, group in per_arch.dropna(subset=[quantity]).groupby("n_layers"):
            rows.append(
                (
                    quantity,
                    int(n_layers),
                    group[quantity].mean(),
                    group[quantity].std(ddof=0),
                    len(group),
                    trend["rho"],
                    p_value,
                    trend["n_orders"],
                    label,
                    note,
                )
            )
    return pd.DataFrame(rows, columns=DEPTH_COLUMNS)
