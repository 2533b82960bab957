"""Rule ablation: ablation_perplexity.csv + head_stability.csv -> tables/ablation.csv (seed, layer, head,
ppl_ablated, delta_ppl, stability), tables/ablation_correlation.csv and figures/ablation_correlation.png
(paper §4.8, Fig. 10 / B.9)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.ablation import plot_ablation_correlation
from headstab.sections.ablation import (
    ablated_grids,
    ablation_correlation,
    ablation_correlation_intervals,
    ablation_table,
    correlation_table,
)
from headstab.table_files import write_figure_records, write_table


def main():
    inp, out = snakemake.input, snakemake.output
    head_stability = pd.read_csv(inp.head_stability)
    grids = ablated_grids(pd.read_csv(inp.ablation_perplexity))  # the paper's anchor first
    table = pd.concat(
        [
            ablation_table(ppl_ablated, baseline, head_stability, seed, promptset=snakemake.params.promptset)
            for seed, ppl_ablated, baseline in grids
        ],
        ignore_index=True,
    )
    write_table(table, out.table, snakemake)
    seed = grids[0][0]
    options = snakemake.params.statistics
    per_layer, trend = ablation_correlation(
        table, anchor_seed=seed, permutations=options["permutations"], seed=options["seed"]
    )
    intervals = ablation_correlation_intervals(
        table, options["n_boot"], options["seed"], options["confidence"], anchor_seed=seed
    )
    correlations = correlation_table(per_layer, trend, seed, intervals)
    write_table(correlations, out.correlation, snakemake)
    logging.info(
        "per-layer r %s, rho %s (anchor %s); pooled over %d anchors: r %s; trend slope %.3f",
        per_layer["pearson_r"].round(3).tolist(), per_layer["spearman_r"].round(3).tolist(), seed, len(grids),
        per_layer["pooled_pearson_r"].round(3).tolist(), trend["slope"],
    )  # fmt: skip
    plot_ablation_correlation(table, per_layer, trend, out.figure, snakemake.wildcards.arch)
    write_figure_records(snakemake)


run_job(main, "ablation", snakemake.log[0])
