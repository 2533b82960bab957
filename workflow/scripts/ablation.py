"""Rule ablation: ablation_perplexity.csv + head_stability.csv -> tables/ablation.csv (seed, layer, head,
ppl_ablated, delta_ppl, stability), tables/ablation_correlation.csv and figures/ablation_correlation.png
(paper §4.8, Fig. 10 / B.9)."""

import logging

import pandas as pd

from headstab.ablation import ablation_correlation, ablation_table
from headstab.joblog import run_job
from headstab.plots.analyses import plot_ablation_correlation


def main():
    raw = pd.read_csv(snakemake.input.ablation_perplexity)
    seed = int(raw["seed"].iloc[0])
    ppl_ablated = raw.pivot(index="layer", columns="head", values="ppl_ablated").sort_index().to_numpy()
    table = ablation_table(ppl_ablated, float(raw["ppl_baseline"].iloc[0]), pd.read_csv(snakemake.input.head_stability),
                           seed, promptset=snakemake.params.promptset)
    table.to_csv(snakemake.output.table, index=False)
    per_layer, trend = ablation_correlation(table)
    # The trend over depth sits beside every layer's r, so one tidy table holds Fig. 10's data.
    per_layer.assign(seed=seed, **{f"trend_{key}": value for key, value in trend.items()}).to_csv(
        snakemake.output.correlation, index=False)
    logging.info("per-layer r %s; trend slope %.3f", per_layer["pearson_r"].round(3).tolist(), trend["slope"])
    plot_ablation_correlation(table, per_layer, trend, snakemake.output.figure, snakemake.wildcards.arch)


run_job(main, "ablation", snakemake.log[0])
