"""The report's summary: per architecture, the headline numbers of the run beside the paper's.

One long table (HEADLINE_COLUMNS) per architecture, from tables the other sections write: pooled layer
stability by layer with its interval, null (chance) and step-0 baseline (layer_stability_pooled.csv),
the stability gap ΔS and the relative depth of its extreme layers (stability_gap_intervals.csv),
residual-stream CKA by layer (residual_cka_layers.csv), the AdamW - Adam differences of its pair
(compare/{pair}/tables/optimizer_tests.csv), the weight-norm correlation of Table B.5
(summary/tables/weight_norm_correlation.csv) and the final training loss (training_final_loss.csv).

Every number of the paper is for one anchor refit (seed 1), where the headline pools all anchors:
`anchor_estimate` gives the same statistic computed the paper's way, on the first seed's refit as the only
anchor (layer_stability.csv), and for Table B.5 with the whole layer's norm. `paper_source` names where the
paper reports each statistic; `paper_text` and `authors_notebooks` hold the paper's own statements and the
numbers its authors' notebooks printed (resources/paper_values.yaml), which disagree in places.
One row builder per input table (HEADLINE_SECTIONS; a new section adds one and its statistic to PAPER_SOURCES),
then the power rows (`headline_power`); ci_calibration and p_calibration carry each row's labels from its table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headstab.sections.headline_power import detectable_rows
from headstab.sections.stability_gap import stability_gap_table

__all__ = [
    "HEADLINE_COLUMNS",
    "HEADLINE_SECTIONS",
    "PAPER_ORIGINS",
    "PAPER_SOURCES",
    "anchor_layer_difference",
    "headline_table",
    "paper_values_frame",
]

# Where the paper's numbers come from (the keys of resources/paper_values.yaml), each a column of the headline.
PAPER_ORIGINS = ("paper_text", "authors_notebooks")
HEADLINE_COLUMNS = ["architecture", "statistic", "layer", "estimate", "ci_low", "ci_high", "interval", "null", "init"]
HEADLINE_COLUMNS += ["p_value", "ci_calibration", "p_calibration", "anchor_estimate", *PAPER_ORIGINS, "paper_source"]
# Where the paper reports each statistic (its figure, table or section), for the reader to compare.
PAPER_SOURCES = {
    "layer stability": "§4.1, Fig. 2",
    "stability gap ΔS": "§4.6, Fig. 7",
    "relative depth of the most stable layer": "§4.6, Fig. 8",
    "relative depth of the least stable layer": "§4.6, Fig. 8",
    "residual-stream CKA": "§4.7, Fig. 9; §B.8",
    "AdamW - Adam layer stability": "§4.5, Fig. 6; §B.6",
    "AdamW - Adam validation perplexity": "§4.5, Fig. 6; §B.7 figures",
    "weight-norm r with layer stability": "§4.4.1; Table B.5 (W_Q, captioned Fig. 30)",
    "final training loss": "",
}
GAP_STATISTICS = {
    "delta_s": "stability gap ΔS",
    "r_max": "relative depth of the most stable layer",
    "r_min": "relative depth of the least stable layer",
}


@dataclass(frozen=True)
class HeadlineInputs:
    """What every row builder reads: the architecture, the prompt set, the interval label, the paper's anchor
    and the run's tables by argument name (absent: a section the run left out)."""

    arch: str
    promptset: str
    interval: str
    anchor_seed: int | str | None
    tables: Mapping[str, pd.DataFrame]
    anchors: str = "all"  # "first": estimate is the paper's anchor's own where a section has one per anchor

    @property
    def first(self) -> bool:
        return self.anchors == "first"

    @property
    def anchor_label(self) -> str:
        return f"anchor seed {self.anchor_seed} only"


def _rows(frame: pd.DataFrame, statistic: str, interval: str | pd.Series, **columns) -> pd.DataFrame:
    """`frame` renamed to HEADLINE_COLUMNS: columns maps headline column -> source column (NaN where `frame` lacks
    it: a section's older table), or a number or Series; interval labels the rows."""
    out = pd.DataFrame(index=frame.index)
    for column, source in columns.items():
        if isinstance(source, str):
            out[column] = frame[source] if source in frame.columns else np.nan
        else:
            out[column] = source
    out = out.assign(**{c: frame[c] for c in ("ci_calibration", "p_calibration") if c in frame.columns})
    return out.assign(statistic=statistic, interval=interval)


def _anchor_layers(inputs: HeadlineInputs) -> pd.DataFrame | None:
    """The paper's anchor's same-layer layer stability (layer_stability.csv rows), or None without one."""
    per_anchor = inputs.tables.get("per_anchor")
    if per_anchor is None or inputs.anchor_seed is None:
        return None
    rows = per_anchor[
        (per_anchor["promptset"] == inputs.promptset)
        & (per_anchor["scope"] == "same_layer")
        & (per_anchor["anchor_seed"].astype(str) == str(inputs.anchor_seed))
    ]
    return rows if len(rows) else None


def _required_anchor_layers(inputs: HeadlineInputs) -> pd.DataFrame:
    anchor = _anchor_layers(inputs)
    if anchor is None:
        raise ValueError(
            f"analysis.anchors first: {inputs.arch} has no same-layer rows of anchor seed {inputs.anchor_seed} and "
            f"prompt set {inputs.promptset!r} in layer_stability.csv (per_anchor); give the table and the anchor seed"
        )
    return anchor


def _layer_stability(inputs: HeadlineInputs) -> list[pd.DataFrame]:
    if inputs.first:  # the anchor's own interval, null and baseline (pair refits and prompts resampled)
        anchor = _required_anchor_layers(inputs)
        return [
            _rows(
                anchor,
                "layer stability",
                f"{inputs.interval}, {inputs.anchor_label}",
                layer="layer",
                estimate="mean",
                ci_low="ci_low",
                ci_high="ci_high",
                null="null",
                init="init",
                anchor_estimate="mean",
            )
        ]
    pooled = inputs.tables["pooled"]
    rows = pooled[(pooled["promptset"] == inputs.promptset) & (pooled["scope"] == "same_layer")]
    out = _rows(
        rows,
        "layer stability",
        inputs.interval,
        layer="layer",
        estimate="stability",
        ci_low="ci_low",
        ci_high="ci_high",
        null="null",
        init="init",
    )
    anchor = _anchor_layers(inputs)
    if anchor is not None:
        out["anchor_estimate"] = out["layer"].map(anchor.set_index("layer")["mean"])
    return [out]


def _gap(inputs: HeadlineInputs) -> list[pd.DataFrame]:
    gap = inputs.tables["gap"]
    rows = gap[(gap["promptset"] == inputs.promptset) & gap["statistic"].isin(GAP_STATISTICS)]
    anchor = _required_anchor_layers(inputs) if inputs.first else _anchor_layers(inputs)
    own = None if anchor is None else stability_gap_table(anchor, int(anchor["layer"].nunique()), None, None)
    parts = []
    for statistic, name in GAP_STATISTICS.items():
        if inputs.first:  # one anchor's extreme layers: no interval
            value = float(own[statistic].iloc[0])
            parts.append(
                _rows(
                    pd.DataFrame(index=[0]), name, inputs.anchor_label, layer=-1, estimate=value, anchor_estimate=value
                )
            )
            continue
        one = rows[rows["statistic"] == statistic]
        part = _rows(one, name, inputs.interval, layer=-1, estimate="estimate", ci_low="ci_low", ci_high="ci_high")
        if own is not None:
            part["anchor_estimate"] = float(own[statistic].iloc[0])
        parts.append(part)
    return parts


def _descriptive(rows: pd.DataFrame, column: str) -> pd.Series:
    """Per row "; descriptive" where the section's `column` labels the interval so, else "" (column or not)."""
    if column not in rows.columns:
        return pd.Series("", index=rows.index)
    return rows[column].map({"descriptive": "; descriptive"}).fillna("")


def _cka(inputs: HeadlineInputs) -> list[pd.DataFrame]:
    cka = inputs.tables["cka"]
    rows = cka[cka["promptset"] == inputs.promptset] if "promptset" in cka.columns else cka
    rows = rows[rows["positions"] == "all"] if "positions" in rows.columns else rows  # the BOS rows kept
    init = "init_cka_mean" if "init_cka_mean" in rows.columns else np.nan  # step 0: CKA's chance level
    return [
        _rows(
            rows,
            "residual-stream CKA",
            inputs.interval + _descriptive(rows, "calibration"),
            layer="layer",
            estimate="cka_mean",
            ci_low="ci_low",
            ci_high="ci_high",
            init=init,
        )
    ]


def _interval_of_the_test(rows: pd.DataFrame) -> pd.DataFrame:
    """A jackknife-t row's interval and label are its test's (optimizer_tests.csv's ci_* are the multi-bootstrap's)."""
    jackknife = rows["test"] == "jackknife_t"
    pairs = {"ci_low": "jackknife_ci_low", "ci_high": "jackknife_ci_high", "ci_calibration": "jackknife_calibration"}
    return rows.assign(**{c: rows[c].where(~jackknife, rows[s]) for c, s in pairs.items() if s in rows.columns})


def _optimizer_tests(inputs: HeadlineInputs) -> list[pd.DataFrame]:
    tests = inputs.tables["tests"]
    anchor = inputs.tables.get("tests_anchor")
    parts = []
    for statistic, name in (
        ("layer_stability", "AdamW - Adam layer stability"),
        ("perplexity", "AdamW - Adam validation perplexity"),
    ):
        rows = _interval_of_the_test(tests[tests["statistic"] == statistic])
        percent, tost = (100 * rows["confidence"]).round().astype(int).astype(str), rows["test"].str.endswith("tost")
        meaning = np.where(tost, "%; p small: within the margin", "%; p small: differ")
        label = rows["test"].astype(str) + " " + percent + meaning
        part = _rows(
            rows,
            name,
            label,
            layer="layer",
            estimate="difference",
            ci_low="ci_low",
            ci_high="ci_high",
            p_value="p_value",
        )
        if anchor is not None and statistic == "layer_stability":
            part["anchor_estimate"] = part["layer"].map(anchor.set_index("layer")["difference"])
        parts.append(part)
    return parts


def _weight_norms(inputs: HeadlineInputs) -> list[pd.DataFrame]:
    table = inputs.tables["weight_norms"]
    rows = table[table["architecture"] == inputs.arch]
    parts = []
    for matrix, group in rows.groupby("matrix", sort=True):
        label = inputs.anchor_label if inputs.first else "mean over anchors"
        label += "" if inputs.first else _descriptive(group, "ci_calibration").iat[0]
        if "by_construction" in group.columns and bool(group["by_construction"].iloc[0]):
            label += "; 2 layers: every r is ±1 by construction"
        # anchor_estimate, Table B.5's way: the first anchor alone, with the whole layer's norm.
        columns = (
            {"estimate": "first_anchor_r"}
            if inputs.first
            else {"estimate": "mean_pearson_r", "ci_low": "mean_pearson_r_ci_low", "ci_high": "mean_pearson_r_ci_high"}
        )
        parts.append(
            _rows(
                group,
                f"weight-norm r with layer stability ({matrix})",
                label,
                layer=-1,
                anchor_estimate="first_anchor_whole_layer_r",
                **columns,
            )
        )
    return parts


def _final_loss(inputs: HeadlineInputs) -> list[pd.DataFrame]:
    finals = inputs.tables["finals"]
    if not len(finals):
        return []
    loss = finals["final_loss"]
    mean = pd.DataFrame({"estimate": [loss.mean()], "ci_low": [loss.min()], "ci_high": [loss.max()]})
    return [
        _rows(
            mean,
            "final training loss",
            f"range (min, max) over {len(finals)} refits, not an interval",
            layer=-1,
            estimate="estimate",
            ci_low="ci_low",
            ci_high="ci_high",
        )
    ]


# Argument name of the table a builder reads -> the builder, in the order the rows appear. per_anchor
# (layer_stability.csv) and tests_anchor (`anchor_layer_difference`) only add anchor_estimate to these rows.
HEADLINE_SECTIONS: dict[str, Callable[[HeadlineInputs], list[pd.DataFrame]]] = {
    "pooled": _layer_stability,
    "gap": _gap,
    "cka": _cka,
    "tests": _optimizer_tests,
    "weight_norms": _weight_norms,
    "finals": _final_loss,
}
ANCHOR_TABLES = ("per_anchor", "tests_anchor")


def headline_table(
    arch: str,
    promptset: str,
    confidence: float,
    paper: pd.DataFrame | None = None,
    anchor_seed: int | str | None = None,
    anchors: str = "all",
    **tables: pd.DataFrame | None,
) -> pd.DataFrame:
    """HEADLINE_COLUMNS of one architecture, `promptset` rows only, layers 0-based (-1: not per layer).

    tables, each optional (a section the run left out): pooled (layer_stability_pooled.csv), per_anchor
    (layer_stability.csv), gap (stability_gap_intervals.csv), cka (residual_cka_layers.csv), tests
    (optimizer_tests.csv of the pair this architecture belongs to), tests_anchor (`anchor_layer_difference` of
    the pair), weight_norms (summary weight_norm_correlation.csv, all architectures), finals
    (training_final_loss.csv). paper: `paper_values_frame`. anchor_seed: the paper's anchor (the first seed),
    whose rows of per_anchor give anchor_estimate. anchors (config key analysis.anchors): "all" pools every
    refit as anchor in `estimate`; "first" gives the paper's anchor's own estimate instead (layer stability with
    its per-anchor interval, ΔS and depths and Table B.5's r without one); the optimizer tests and CKA are over
    refits either way. `confidence` labels the intervals. Raises ValueError naming a table of no known section,
    an unknown `anchors`, or "first" without the anchor's rows.
    """
    if anchors not in ("all", "first"):
        raise ValueError(f"anchors must be all or first (config key analysis.anchors); got {anchors!r}")
    unknown = sorted(set(tables) - set(HEADLINE_SECTIONS) - set(ANCHOR_TABLES))
    if unknown:
        raise ValueError(
            f"headline_table got tables {unknown} of no section; known: {sorted([*HEADLINE_SECTIONS, *ANCHOR_TABLES])}"
        )
    present = {name: table for name, table in tables.items() if table is not None}
    inputs = HeadlineInputs(arch, promptset, f"{confidence:.0%} bootstrap", anchor_seed, present, anchors)
    parts = [part for name, build in HEADLINE_SECTIONS.items() if name in present for part in build(inputs)]
    parts += detectable_rows(present)
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=HEADLINE_COLUMNS)
    table["architecture"] = arch
    base = table["statistic"].str.replace(r" \(.*\)$", "", regex=True)
    table["paper_source"] = base.map(PAPER_SOURCES).fillna("")
    for origin in PAPER_ORIGINS:
        table[origin] = np.nan
        if paper is not None and len(paper):
            chosen = paper[(paper["architecture"] == arch) & (paper["origin"] == origin)]
            keyed = chosen.set_index(["statistic", "layer"])["value"]
            table[origin] = [keyed.get((s, int(layer)), np.nan) for s, layer in zip(table["statistic"], table["layer"])]
    for column in HEADLINE_COLUMNS:
        if column not in table.columns:
            table[column] = np.nan
    numeric = ["estimate", "ci_low", "ci_high", "null", "init", "p_value", "anchor_estimate", *PAPER_ORIGINS]
    return table[HEADLINE_COLUMNS].astype({"layer": int, **dict.fromkeys(numeric, float)})


def anchor_layer_difference(
    adam: pd.DataFrame, adamw: pd.DataFrame, anchor_seed: int | str, promptset: str
) -> pd.DataFrame:
    """AdamW - Adam same-layer stability of the paper's anchor (Fig. 6: seed 1 of each member), per layer.

    adam, adamw: the two members' layer_stability.csv. Returns columns layer, difference (layers both have).
    """

    def anchor_means(table: pd.DataFrame) -> pd.Series:
        rows = table[
            (table["promptset"] == promptset)
            & (table["scope"] == "same_layer")
            & (table["anchor_seed"].astype(str) == str(anchor_seed))
        ]
        return rows.set_index("layer")["mean"]

    difference = (anchor_means(adamw) - anchor_means(adam)).dropna()
    return difference.rename("difference").rename_axis("layer").reset_index()


def paper_values_frame(document: Mapping[str, Sequence[Mapping] | None]) -> pd.DataFrame:
    """The paper's numbers, resources/paper_values.yaml: `paper_text` (the paper's own statements) and
    `authors_notebooks` (what the authors' notebooks printed), each a list of entries (architecture, statistic,
    layer or null, value, source). Returns columns architecture, statistic, layer (-1 where not per layer),
    value, source, origin (the key). Raises ValueError naming an unknown key, or an entry without a source or
    of an unknown statistic."""
    unknown = sorted(set(document) - set(PAPER_ORIGINS))
    if unknown:
        raise ValueError(f"paper values have keys {unknown}; expected {list(PAPER_ORIGINS)}")
    rows = []
    for origin in PAPER_ORIGINS:
        for entry in document.get(origin) or []:
            base = str(entry.get("statistic", "")).split(" (")[0]
            if base not in PAPER_SOURCES or not entry.get("source"):
                raise ValueError(
                    f"paper value {dict(entry)} ({origin}) needs a statistic of {sorted(PAPER_SOURCES)} and its "
                    "source (table, figure or notebook)"
                )
            layer = -1 if entry.get("layer") is None else int(entry["layer"])
            rows.append(
                (entry["architecture"], entry["statistic"], layer, float(entry["value"]), entry["source"], origin)
            )
    frame = pd.DataFrame(rows, columns=["architecture", "statistic", "layer", "value", "source", "origin"])
    twice = frame[frame.duplicated(["origin", "architecture", "statistic", "layer"], keep=False)]
    if len(twice):
        first = twice.iloc[0]
        raise ValueError(
            f"paper values give {first['architecture']} {first['statistic']!r} layer {first['layer']} twice in "
            f"{first['origin']}; keep one entry per number"
        )
    return frame
