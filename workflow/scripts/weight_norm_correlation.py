"""Rule weight_norm_correlation: tables/weight_norms.csv, head_weight_norms.csv, layer_stability.csv and
head_stability.csv -> tables/weight_norm_correlation.csv (with the partial r given layer entropy),
tables/weight_norm_partial.csv (per layer, over heads, given head entropy) and
figures/weight_norm_correlation.png (paper §4.4.1, Table B.5)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.weight_norms import plot_weight_norm_correlation
from headstab.sections.weight_norms import head_norm_partial_table, norm_stability_correlation
from headstab.table_files import write_figure_records, write_table


def main():
    inp, params = snakemake.input, snakemake.params
    norms, layer_stability = pd.read_csv(inp.weight_norms), pd.read_csv(inp.layer_stability)
    correlation = norm_stability_correlation(norms, layer_stability, promptset=params.promptset)
    write_table(correlation, snakemake.output.correlation, snakemake)
    q = correlation[correlation["matrix"] == "W_Q"]["pearson_r"]
    logging.info("W_Q norm vs layer stability: r = %.3f +- %.3f over %d anchors", q.mean(), q.std(), len(q))
    options = params.statistics
    partial = head_norm_partial_table(
        pd.read_csv(inp.head_weight_norms),
        pd.read_csv(inp.head_stability),
        promptset=params.promptset,
        **{key: options[key] for key in ("n_boot", "seed", "confidence")},
    )
    write_table(partial, snakemake.output.partial, snakemake)
    logging.info("per layer, over heads, W_Q norm vs head stability given entropy:\n%s", partial.to_string(index=False))
    plot_weight_norm_correlation(
        norms,
        layer_stability,
        correlation,
        snakemake.output.figure,
        snakemake.wildcards.arch,
        promptset=params.promptset,
        attention_norm=params.attention_norm,
    )
    write_figure_records(snakemake)


run_job(main, "weight_norm_correlation", snakemake.log[0])
