"""Rule weight_norm_correlation: tables/weight_norms.csv + layer_stability.csv ->
tables/weight_norm_correlation.csv and figures/weight_norm_correlation.png (paper §4.4.1, Table B.5)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.weight_norms import plot_weight_norm_correlation
from headstab.sections.weight_norms import norm_stability_correlation


def main():
    inp, params = snakemake.input, snakemake.params
    norms, layer_stability = pd.read_csv(inp.weight_norms), pd.read_csv(inp.layer_stability)
    correlation = norm_stability_correlation(norms, layer_stability, promptset=params.promptset)
    correlation.to_csv(snakemake.output.correlation, index=False)
    q = correlation[correlation["matrix"] == "W_Q"]["pearson_r"]
    logging.info("W_Q norm vs layer stability: r = %.3f +- %.3f over %d anchors", q.mean(), q.std(), len(q))
    plot_weight_norm_correlation(
        norms,
        layer_stability,
        correlation,
        snakemake.output.figure,
        snakemake.wildcards.arch,
        promptset=params.promptset,
        attention_norm=params.attention_norm,
    )


run_job(main, "weight_norm_correlation", snakemake.log[0])
