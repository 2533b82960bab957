"""The report's summary: per architecture, the headline numbers of the run beside the paper's.

One long table (HEADLINE_COLUMNS) per architecture, from tables the other sections write: pooled layer
stability by layer with its interval, null (chance) and step-0 baseline (layer_stability_pooled.csv),
the stability gap ΔS and the relative depth of its extreme layers (stability_gap_intervals.csv),
residual-stream CKA by layer (residual_cka_layers.csv), the AdamW - Adam differences of its pair
(compare/{pair}/tables/optimizer_tests.csv), the weight-norm correlation of Table B.5
(summary/tables/weight_norm_correlation.csv) and the final training loss (training_final_loss.csv).
`paper_source` names where the paper reports each statistic; `paper_value` holds the paper's number
where one is given in resources/paper_values.yaml.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

__all__ = ["HEADLINE_COLUMNS", "PAPER_SOURCES", "headline_table", "paper_values_frame"]

HEADLINE_COLUMNS = [
    "architecture", "statistic", "layer", "estimate", "ci_low", "ci_high", "interval", "null", "init", "p_value",
    "paper_value", "paper_source",
]  # fmt: skip
# Where the paper reports each statistic (its figure or table), for the reader to compare.
PAPER_SOURCES = {
    "layer stability": "§4.1, Fig. 3",
    "stability gap ΔS": "§4.6, Fig. 7",
    "relative depth of the most stable layer": "§4.6, Fig. 8",
    "relative depth of the least stable layer": "§4.6, Fig. 8",
    "residual-stream CKA": "§4.7, Fig. 9 / B.8",
    "AdamW - Adam layer stability": "§4.5, Fig. 6 / B.6",
    "AdamW - Adam validation perplexity": "§4.5, Table B.7",
    "weight-norm r with layer stability": "§4.4.1, Table B.5",
    "final training loss": "",
}
GAP_STATISTICS = {
    "delta_s": "stability gap ΔS",
    "r_max": "relative depth of the most stable layer",
    "r_min": "relative depth of the least stable layer",
}


def _rows(frame: pd.DataFrame, statistic: str, **columns) -> pd.DataFrame:
    """`frame` renamed to HEADLINE_COLUMNS: columns maps headline column -> source column or constant."""
    out = pd.DataFrame(index=frame.index)
    for column, source in columns.items():
        out[column] = frame[source] if isinstance(source, str) and source in frame.columns else source
    return out.assign(statistic=statistic)


def headline_table(
    arch: str,
    promptset: str,
    confidence: float,
    pooled: pd.DataFrame | None = None,
    gap: pd.DataFrame | None = None,
    cka: pd.DataFrame | None = None,
    tests: pd.DataFrame | None = None,
    weight_norms: pd.DataFrame | None = None,
    finals: pd.DataFrame | None = None,
    paper: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """HEADLINE_COLUMNS of one architecture, `promptset` rows only, layers 0-based (-1: not per layer).

    Each table is optional (a section the run left out): pooled (layer_stability_pooled.csv), gap
    (stability_gap_intervals.csv), cka (residual_cka_layers.csv), tests (optimizer_tests.csv of the pair
    this architecture belongs to), weight_norms (summary weight_norm_correlation.csv, all architectures),
    finals (training_final_loss.csv), paper (paper_values_frame). `confidence` labels the intervals.
    """
    interval = f"{confidence:.0%} bootstrap"
    parts = []
    if pooled is not None:
        rows = pooled[(pooled["promptset"] == promptset) & (pooled["scope"] == "same_layer")]
        parts.append(_rows(rows, "layer stability", layer="layer", estimate="stability", ci_low="ci_low",
                           ci_high="ci_high", interval=interval, null="null", init="init"))  # fmt: skip
    if gap is not None:
        rows = gap[(gap["promptset"] == promptset) & gap["statistic"].isin(GAP_STATISTICS)]
        for statistic, name in GAP_STATISTICS.items():
            one = rows[rows["statistic"] == statistic]
            parts.append(_rows(one, name, layer=-1, estimate="estimate", ci_low="ci_low", ci_high="ci_high",
                               interval=interval))  # fmt: skip
    if cka is not None:
        rows = cka[cka["promptset"] == promptset] if "promptset" in cka.columns else cka
        rows = rows[rows["positions"] == "all"] if "positions" in rows.columns else rows  # the BOS rows kept
        init = "init_cka_mean" if "init_cka_mean" in rows.columns else np.nan  # step 0: CKA's chance level
        parts.append(_rows(rows, "residual-stream CKA", layer="layer", estimate="cka_mean", ci_low="ci_low",
                           ci_high="ci_high", interval=interval, init=init))  # fmt: skip
    if tests is not None:
        for statistic, name in (("layer_stability", "AdamW - Adam layer stability"),
                                ("perplexity", "AdamW - Adam validation perplexity")):  # fmt: skip
            rows = tests[tests["statistic"] == statistic]
            label = rows["test"].astype(str) + " " + (100 * rows["confidence"]).round().astype(int).astype(str) + "%"
            parts.append(_rows(rows, name, layer="layer", estimate="difference", ci_low="ci_low", ci_high="ci_high",
                               interval=label, p_value="p_value"))  # fmt: skip
    if weight_norms is not None:
        rows = weight_norms[weight_norms["architecture"] == arch]
        for matrix, group in rows.groupby("matrix", sort=True):
            parts.append(_rows(group, f"weight-norm r with layer stability ({matrix})", layer=-1,
                               estimate="mean_pearson_r", ci_low="mean_pearson_r_ci_low",
                               ci_high="mean_pearson_r_ci_high", interval="mean over anchors"))  # fmt: skip
    if finals is not None and len(finals):
        mean = pd.DataFrame({"estimate": [finals["final_loss"].mean()], "ci_low": [finals["final_loss"].min()],
                             "ci_high": [finals["final_loss"].max()]})  # fmt: skip
        parts.append(_rows(mean, "final training loss", layer=-1, estimate="estimate", ci_low="ci_low",
                           ci_high="ci_high", interval=f"range over {len(finals)} refits"))  # fmt: skip
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=HEADLINE_COLUMNS)
    table["architecture"] = arch
    base = table["statistic"].str.replace(r" \(.*\)$", "", regex=True)
    table["paper_source"] = base.map(PAPER_SOURCES).fillna("")
    table["paper_value"] = np.nan
    if paper is not None and len(paper):
        keyed = paper[paper["architecture"] == arch].set_index(["statistic", "layer"])["value"]
        table["paper_value"] = [
            keyed.get((s, int(layer)), np.nan) for s, layer in zip(table["statistic"], table["layer"])
        ]
    for column in HEADLINE_COLUMNS:
        if column not in table.columns:
            table[column] = np.nan
    return table[HEADLINE_COLUMNS].astype({"layer": int})


def paper_values_frame(entries: Sequence[Mapping]) -> pd.DataFrame:
    """The paper's numbers (resources/paper_values.yaml `values`: architecture, statistic, layer or null,
    value, source) as a frame with layer -1 where not per layer. Raises ValueError naming an entry without
    a source or of an unknown statistic."""
    rows = []
    for entry in entries:
        base = str(entry.get("statistic", "")).split(" (")[0]
        if base not in PAPER_SOURCES or not entry.get("source"):
            raise ValueError(
                f"paper value {dict(entry)} needs a statistic of {sorted(PAPER_SOURCES)} and its source (table or figure)"
            )
        layer = entry.get("layer")
        rows.append((entry["architecture"], entry["statistic"], -1 if layer is None else int(layer),
                     float(entry["value"]), entry["source"]))  # fmt: skip
    return pd.DataFrame(rows, columns=["architecture", "statistic", "layer", "value", "source"])
