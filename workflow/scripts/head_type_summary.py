"""Rule head_type_summary: head_type_universality.csv of every architecture -> summary/tables/head_type_universality.csv
and summary/figures/head_types_by_depth.png (docs/beyond_the_paper.md)."""

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.head_types import plot_type_share_by_depth
from headstab.table_files import write_figure_records, write_table


def main():
    facts = snakemake.params.architectures
    tables = [
        pd.read_csv(path).assign(
            architecture=arch,
            n_layers=facts[arch]["n_layers"],
            optimizer=facts[arch]["optimizer"],
            attention_only=facts[arch]["attention_only"],
        )
        for arch, path in zip(facts, snakemake.input.universality, strict=True)
    ]
    summary = pd.concat(tables, ignore_index=True)
    write_table(summary, snakemake.output.table, snakemake)
    plot_type_share_by_depth(summary, snakemake.output.figure)
    write_figure_records(snakemake)


run_job(main, "head_type_summary", snakemake.log[0])
