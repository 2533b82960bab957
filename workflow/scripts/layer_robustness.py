"""Rule layer_robustness: layer_drop_swap.csv + layer_stability.csv + layer_stability_pooled.csv ->
tables/layer_robustness.csv (per condition and layer, mean over refits with intervals), layer_robustness_correlation.csv
(r with layer stability within and across refits), layer_robustness_depth.csv (r = l/L of the most and least robust
and stable layers) and figures/layer_robustness_stability.png (docs/beyond_the_paper.md)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.layer_robustness import plot_robustness_vs_stability
from headstab.sections.layer_robustness import (
    extreme_depths,
    robustness_by_layer,
    robustness_correlation,
    robustness_with_stability,
)
from headstab.table_files import write_figure_records, write_table
from headstab.table_rows import select_rows


def main():
    inp, out, params = snakemake.input, snakemake.output, snakemake.params
    chosen = {"promptset": params.promptset, "scope": "same_layer"}
    stability = select_rows(pd.read_csv(inp.layer_stability), "layer stability", **chosen)
    pooled = select_rows(pd.read_csv(inp.layer_stability_pooled), "pooled layer stability", **chosen)
    table = robustness_with_stability(pd.read_csv(inp.drop_swap), stability)
    options = params.statistics
    by_layer = robustness_by_layer(table, params.n_layers, options["n_boot"], options["seed"], options["confidence"])
    write_table(by_layer, out.table, snakemake)
    correlation = robustness_correlation(table, options["n_boot"], options["seed"], options["confidence"])
    write_table(correlation, out.correlation, snakemake)
    depths = pd.DataFrame(
        [{"architecture": snakemake.wildcards.arch, **extreme_depths(by_layer, pooled, params.n_layers)}]
    )
    write_table(depths, out.depth, snakemake)
    logging.info("robustness by layer:\n%s\nextreme depths:\n%s", by_layer.round(4).to_string(), depths.to_string())
    plot_robustness_vs_stability(table, out.figure, snakemake.wildcards.arch)
    write_figure_records(snakemake)


run_job(main, "layer_robustness", snakemake.log[0])
