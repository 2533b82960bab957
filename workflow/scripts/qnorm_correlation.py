"""Rule qnorm_correlation: tables/qnorm.csv + layer_stability.csv -> tables/qnorm_correlation.csv and
figures/qnorm_vs_stability.png (paper §4.4.1, Table B.5)."""

import logging

import pandas as pd

from headstab.analyses import norm_stability_correlation
from headstab.joblog import run_job
from headstab.plots.analyses import plot_qnorm_vs_stability


def main():
    norms, layer_stability = pd.read_csv(snakemake.input.qnorm), pd.read_csv(snakemake.input.layer_stability)
    correlation = norm_stability_correlation(norms, layer_stability, promptset=snakemake.params.promptset)
    correlation.to_csv(snakemake.output.correlation, index=False)
    q = correlation[correlation["matrix"] == "W_Q"]["pearson_r"]
    logging.info("W_Q norm vs layer stability: r = %.3f +- %.3f over %d anchors", q.mean(), q.std(), len(q))
    plot_qnorm_vs_stability(norms, layer_stability, correlation, snakemake.output.figure, snakemake.wildcards.arch,
                            promptset=snakemake.params.promptset, attention_norm=snakemake.params.attention_norm)


run_job(main, "qnorm_correlation", snakemake.log[0])
