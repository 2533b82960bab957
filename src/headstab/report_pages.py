"""The tables behind the figures, as pages of the HTML report (Snakemake's report shows HTML inline, a CSV
only as a download).

Each CSV becomes one self-contained HTML page: its first `max_rows` rows, sortable by clicking a column
header, with the full row count and the CSV's path. `report_place` files a table under the report
category and subcategory of the figure it belongs to, so tables sit beside their figures; the rules
write the page to `<category>/<subcategory>/<name>.html` and Snakemake's report(patterns=...) reads
both back from the path.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from headstab.plan.layout import Layout

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DESCRIPTIONS", "MAX_ROWS", "count_rows", "report_place", "table_kind", "table_page", "write_table_pages"]

MAX_ROWS = 500  # rows shown per table: the paper plan's per-pair tables hold millions

# Per-architecture tables: the subcategory of their figures under the architecture's category.
ARCH_SUBCATEGORIES = {
    "Stability (§4.1)": ("head_stability", "layer_stability", "pair_stability", "layer_stability_pooled"),
    "Cross-layer (§4.2)": ("alignment_map", "alignment_dispersion"),
    "Within-layer (§4.3)": ("commonness", "stability_commonness"),
    "Weight norms (§4.4.1)": ("weight_norms", "head_weight_norms", "weight_norm_correlation", "weight_norm_partial"),
    "Prompt length (§4.4.2)": ("prompt_length",),
    "Adam vs AdamW (§4.5)": ("validation_perplexity", "activation_norms"),
    "Stability gap (§4.6)": ("stability_gap_intervals", "layer_pseudo_values"),
    "Residual stream (§4.7)": ("residual_cka", "residual_cka_layers"),
    "Ablation (§4.8)": ("ablation_perplexity", "ablation", "ablation_correlation"),
    "Stability along training": ("stability_along_training",),
    "Training": ("training_curves", "training_final_loss"),
    "Beyond the paper: effective rank": ("effective_rank", "effective_rank_matched", "effective_rank_correlation"),
    "Beyond the paper: head types": (
        "head_type_scores",
        "head_type_scores_step0",
        "head_type_scores_held_out",
        "head_types",
        "head_type_thresholds",
        "head_type_universality",
        "noise_ceiling_scores",
        "noise_ceiling",
    ),
    "Beyond the paper: layer drop and swap": (
        "layer_drop_swap",
        "layer_robustness",
        "layer_robustness_correlation",
        "layer_robustness_depth",
    ),
}
# Cross-architecture tables (summary/tables): (category, subcategory) of their figures.
SUMMARY_PLACES = {
    "stability_commonness": ("Across architectures", "Within-layer (§4.3)"),
    "stability_gap": ("Across architectures", "Stability gap (§4.6)"),
    "stability_gap_depth": ("Across architectures", "Stability gap (§4.6)"),
    "layer_tests": ("Across architectures", "Stability gap (§4.6)"),
    "meta_sne": ("Across architectures", "meta-SNE (§4.9)"),
    "meta_sne_scale_normalised": ("Across architectures", "meta-SNE (§4.9)"),
    "meta_sne_mantel": ("Across architectures", "meta-SNE (§4.9)"),
    "weight_norm_correlation": ("Across architectures", "Weight norms (§4.4.1)"),
    "effective_rank": ("Across architectures", "Beyond the paper: effective rank"),
    "head_type_universality": ("Across architectures", "Beyond the paper: head types"),
    "layer_robustness": ("Across architectures", "Beyond the paper: layer drop and swap"),
    "layer_robustness_depth": ("Across architectures", "Beyond the paper: layer drop and swap"),
    "stability_against_chance": ("Stability against chance", "All architectures"),
    "stability_gap_intervals": ("Stability against chance", "All architectures"),
}
DESCRIPTIONS = {
    "head_stability": "head stability (Eq. 3-4) and one-to-one stability per prompt set, scope, anchor, layer and head, with interval, null and step-0 baseline; *_calibration: which intervals are calibrated at these refits, and which descriptive",
    "layer_stability": "layer stability (Eq. 5: mean and s.d. over heads) per prompt set, scope, anchor and layer, with interval, null and step-0 baseline; *_calibration: which intervals are calibrated at these refits, and which descriptive",
    "pair_stability": "best match (Eq. 2-3) and one-to-one partner of every anchor head in every other refit",
    "layer_stability_pooled": "layer stability pooled over all refits as anchors, with multi-bootstrap and jackknife-t intervals and null; *_calibration: calibrated or descriptive at these refits",
    "alignment_map": "share of each layer's best matches falling in each layer (§4.2)",
    "alignment_dispersion": "how concentrated each layer's alignment is: diagonal share, entropy, distance, kurtosis",
    "commonness": "commonness of each head among its peers in its refit (Eq. 10) and without its match with itself, with prompt-group intervals, the prompt-permutation null and the difference from it",
    "stability_commonness": "least stable yet most distinct (§4.3, §5): r and partial r (given entropy) over layers of stability and commonness without self, each above its null, per refit; the one-sided sign-flip test over refits, on these prompts (calibrated at every n; 4 refits cannot reach 5%; across architectures: one test each, with Benjamini-Hochberg q-values)",
    "weight_norms": "Frobenius norm of every weight matrix per refit and layer, and the whole layer's (§4.4.1)",
    "weight_norm_correlation": "Pearson and Spearman correlation of weight norms with layer stability, per anchor and pooled (Table B.5), and given layer entropy",
    "head_weight_norms": "Frobenius norm of every head's W_Q, W_K, W_V, W_O per refit",
    "weight_norm_partial": "per layer, over heads: W_Q norm vs head stability, and given head entropy",
    "prompt_length": "layer stability by prompt length (§4.4.2, Fig. 5 / B.4)",
    "validation_perplexity": "validation perplexity of every refit on held-out text (§B.7 figures)",
    "activation_norms": "mean per-token norms of attention output and resid_mid (Fig. 35)",
    "stability_gap_intervals": "stability gap and extreme-layer depths with multi-bootstrap intervals (§4.6); ci_calibration, p_calibration: calibrated or descriptive",
    "residual_cka": "residual-stream CKA of every pair of refits per layer (§4.7)",
    "residual_cka_layers": "mean residual-stream CKA per layer with interval (Fig. 9 / B.8)",
    "ablation_perplexity": "perplexity with each head ablated (§4.8)",
    "ablation": "ablation importance and stability of every head (Fig. 10)",
    "ablation_correlation": "Pearson and Spearman correlation of ablation importance with head stability per layer, the anchor's and pooled over anchors (Fig. B.9)",
    "seeds_needed": "refits needed for an interval of the given width (a width, not power; ci_calibration: the interval's label)",
    "seeds_needed_curve": "interval width against the number of refits (ci_calibration: the interval's label at each size)",
    "stability_along_training": "pooled layer stability at each training snapshot (ci_calibration: its intervals' label)",
    "training_curves": "training loss of every refit at every logged step",
    "training_final_loss": "final loss of every refit and whether it levelled off",
    "optimizer_final_loss": "final training loss of the Adam and AdamW refits",
    "optimizer_tests": "AdamW - Adam differences with intervals, tests (q_value: Benjamini-Hochberg over the pair's layer tests) and equivalence (§4.5); *_calibration: calibrated or descriptive at these seeds",
    "perplexity": "Adam vs AdamW validation perplexity: refits, means and tests (§B.7 figures)",
    "stability_gap": "stability gap ΔS and depth of the extreme layers per architecture and anchor (Fig. 7-8), with ΔS of the nulls",
    "stability_gap_depth": "ΔS, ΔS above the null and the mid-depth dip against depth, architectures as units; only the dip is tested (Spearman's rho, one-sided permutation p)",
    "layer_tests": "do the layers differ beyond chance, and is the dip at mid-depth: sign-flip tests with refits as units, per architecture",
    "layer_pseudo_values": "each refit's jackknife pseudo-value of pooled layer stability, raw and above the null: the units of the layer tests",
    "meta_sne": "t-SNE coordinates of every head of every refit (Fig. 11)",
    "meta_sne_scale_normalised": "the same t-SNE of the head descriptions divided by their norms",
    "meta_sne_mantel": "Mantel test of head-description distance against the distance in relative depth, an architecture's layers "
    "permuted as blocks in one order shared by its refits",
    "stability_against_chance": "pooled layer stability of every architecture against its null",
    "head_type_scores": "previous-token, duplicate-token, induction (prefix matching), BOS and copying scores and row entropy of every head on the probe set",
    "head_type_scores_step0": "the same scores of the same refits at step 0, the paired comparison of the trained-in test",
    "head_type_scores_held_out": "the same scores of further initialisations (held-out seeds), which calibrate the thresholds and are compared with nothing",
    "head_types": "scores, entropy and type of every head of every refit, and the threshold rule that typed it",
    "head_type_thresholds": "per layer and score: the threshold, its rule (held-out step-0 maximum quantile raised to the floor, or fixed), and the score of even attention",
    "head_type_universality": "per layer and head type: weak universality (exact interval), head share, strong universality (best match, one-to-one) with its chance level and chance-corrected, stability and above-null, with intervals and their calibration",
    "noise_ceiling_scores": "head-type scores of every head of every refit on each of two disjoint halves of the probe set",
    "noise_ceiling": "per layer and head type: within-refit reliability of type labels and scores (two probe halves), cross-seed agreement with the best match and the attenuation-corrected ratio, with descriptive intervals",
}


def report_place(kind: str, name: str, arch: str = "") -> tuple[str, str]:
    """(category, subcategory) of table `name` in the report. kind: "arch" (tables/ of `arch`), "compare"
    (compare/`arch`/tables, an Adam/AdamW pair) or "summary" (summary/tables). A table of no known
    section goes to "Tables" under its category, so a new section's tables still reach the report."""
    if kind == "compare":
        return "Adam vs AdamW (§4.5)", arch
    if kind == "summary":
        return SUMMARY_PLACES.get(name, ("Across architectures", "Tables"))
    if name in ("seeds_needed", "seeds_needed_curve"):
        return "Stability against chance", arch
    for subcategory, names in ARCH_SUBCATEGORIES.items():
        if name in names:
            return arch, subcategory
    return arch, "Tables"


def count_rows(path: str | Path) -> int:
    """Data rows of a CSV file (lines after the header), without parsing it."""
    with open(path, "rb") as handle:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    return max(lines - 1, 0)


_SORT_SCRIPT = """
document.querySelectorAll("th").forEach((th, column) => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0], up = th.dataset.order !== "up";
  const key = (row) => { const t = row.cells[column].textContent, n = parseFloat(t); return isNaN(n) ? t : n; };
  const rows = Array.from(body.rows).sort((a, b) => {
    const x = key(a), y = key(b);
    const order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : typeof x === "number" ? -1 : 1;
    return up ? order : -order;
  });
  th.dataset.order = up ? "up" : "down";
  rows.forEach((row) => body.appendChild(row));
}));
"""
_STYLE = (
    "body{font-family:sans-serif;font-size:13px}table{border-collapse:collapse}"
    "th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#eee;cursor:pointer;position:sticky;top:0}"
    "td:first-child,th:first-child{text-align:left;white-space:nowrap}"
)


def table_page(
    table: pd.DataFrame, title: str, source: str, n_rows: int, description: str = "", digits: int = 6
) -> str:
    """A self-contained HTML page of `table` (the first rows of the CSV `source`, which has `n_rows` rows):
    title, description, how many rows are shown, and a table sortable by clicking its headers; numbers to
    `digits` significant digits."""
    shown = f"all {n_rows} rows" if len(table) >= n_rows else f"the first {len(table)} of {n_rows} rows"
    body = table.to_html(index=False, na_rep="", float_format=lambda value: f"{value:.{digits}g}", border=0)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h3>{html.escape(title)}</h3>"
        f"<p>{html.escape(description)}</p><p>{shown} of <code>{html.escape(source)}</code>; "
        f"click a column header to sort.</p>{body}<script>{_SORT_SCRIPT}</script></body></html>"
    )


def table_kind(path: str | Path) -> tuple[str, str, str]:
    """(scope, arch, name) of a table path of headstab.plan.layout.Layout: {arch}/tables/{name}.csv (arch),
    compare/{arch}/tables/{name}.csv (compare) or summary/tables/{name}.csv (summary)."""
    parsed = Layout.parse(path)
    if parsed is None or parsed.kind != "table":
        raise ValueError(f"{path} is not a table of a headstab run (<results_dir>/.../tables/<name>.csv)")
    return parsed.scope, parsed.arch, parsed.name


def write_table_pages(paths: list[str], out_dir: str | Path, max_rows: int = MAX_ROWS) -> list[Path]:
    """One page per CSV of `paths` at out_dir/<category>/<subcategory>/<name>.html (report_place); returns
    the pages written. Raises ValueError when two tables land on one page."""
    import pandas as pd  # here, not at the top: the rule files import this module when snakemake plans

    pages: dict[Path, str] = {}
    for source in paths:
        kind, arch, name = table_kind(source)
        category, subcategory = report_place(kind, name, arch)
        page = Path(out_dir) / category / subcategory / f"{name}.html"
        if page in pages:
            raise ValueError(f"tables {pages[page]} and {source} would share the report page {page}")
        pages[page] = source
        title = f"{arch}: {name}.csv" if arch else f"{name}.csv"
        text = table_page(
            pd.read_csv(source, nrows=max_rows), title, source, count_rows(source), DESCRIPTIONS.get(name, "")
        )
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(text)
    return list(pages)
