"""Rule headline_summary: the sections' tables -> summary/tables/headline.csv, one HTML page per architecture
(summary/headline/<arch>.html) and summary/figures/layer_stability_by_depth.png, the report's summary."""

from pathlib import Path

import pandas as pd

from headstab.joblog import run_job
from headstab.plan.yaml_files import load_yaml_file
from headstab.plots.headline import plot_stability_by_depth
from headstab.report_pages import table_kind, table_page
from headstab.sections.headline import anchor_layer_difference, headline_table, paper_values_frame
from headstab.table_files import write_figure_records, write_table

# The table each headline_table argument reads, by the name of its CSV.
ARGUMENTS = {
    "layer_stability_pooled": "pooled",
    "layer_stability": "per_anchor",
    "stability_gap_intervals": "gap",
    "residual_cka_layers": "cka",
    "optimizer_tests": "tests",
    "weight_norm_correlation": "weight_norms",
    "training_final_loss": "finals",
}


def main():
    params, out = snakemake.params, snakemake.output
    by_arch, shared = {}, {}
    for path in snakemake.input.tables:
        kind, arch, name = table_kind(path)
        if kind == "arch":
            by_arch.setdefault(arch, {})[ARGUMENTS[name]] = pd.read_csv(path)
        elif kind == "compare":  # both members of the pair read its tests
            for member in (arch, params.pairs[arch]):
                by_arch.setdefault(member, {})["tests"] = pd.read_csv(path)
        else:
            shared[ARGUMENTS[name]] = pd.read_csv(path)
    for adam, adamw in params.pairs.items():  # Fig. 6: the first seed of each member
        members = by_arch.get(adam, {}), by_arch.get(adamw, {})
        same_anchor = params.anchor_seeds[adam] == params.anchor_seeds[adamw]
        if same_anchor and all("per_anchor" in member for member in members):
            difference = anchor_layer_difference(
                members[0]["per_anchor"], members[1]["per_anchor"], params.anchor_seeds[adam], params.promptset
            )
            for member in members:
                member["tests_anchor"] = difference
    paper = paper_values_frame(load_yaml_file(snakemake.input.paper))
    tables = [
        headline_table(
            arch, params.promptset, params.confidence, paper=paper, anchor_seed=params.anchor_seeds[arch],
            anchors=params.anchors, **by_arch.get(arch, {}), **shared,
        )
        for arch in params.architectures
    ]  # fmt: skip
    headline = pd.concat(tables, ignore_index=True)
    write_table(headline, out.table, snakemake)
    pages = Path(out.pages)
    pages.mkdir(parents=True, exist_ok=True)
    for arch, table in zip(params.architectures, tables):
        title = f"{arch}: headline numbers ({params.configurations[arch]})"
        source = f"{out.table} (its rows of {arch})"
        text = table_page(table.drop(columns="architecture"), title, source, len(table), params.legend, digits=4)
        (pages / f"{arch}.html").write_text(text)
    plot_stability_by_depth(headline, params.facts, out.figure)
    write_figure_records(snakemake)


run_job(main, "headline_summary", snakemake.log[0])
