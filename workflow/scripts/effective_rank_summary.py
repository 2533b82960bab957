"""Rule effective_rank_summary: effective_rank_correlation.csv of every architecture ->
summary/tables/effective_rank.csv and summary/figures/effective_rank_by_layer.png (docs/beyond_the_paper.md)."""

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.effective_rank import plot_rank_by_layer
from headstab.table_files import write_figure_records, write_table


def main():
    facts = snakemake.params.architectures
    tables = [
        pd.read_csv(path).assign(architecture=arch)
        for arch, path in zip(facts, snakemake.input.correlation, strict=True)
    ]
    summary = pd.concat(tables, ignore_index=True)
    write_table(summary, snakemake.output.table, snakemake)
    plot_rank_by_layer(summary, facts, snakemake.output.figure)
    write_figure_records(snakemake)


run_job(main, "effective_rank_summary", snakemake.log[0])
