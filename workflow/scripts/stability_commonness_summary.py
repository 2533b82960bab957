"""Rule stability_commonness_summary: every architecture's stability_commonness.csv ->
summary/tables/stability_commonness.csv, one test per architecture with Benjamini-Hochberg q-values."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.sections.stability_commonness import stability_commonness_summary
from headstab.table_files import write_table


def main():
    architectures = snakemake.params.architectures
    tables = {arch: pd.read_csv(path) for arch, path in zip(architectures, snakemake.input.tables, strict=True)}
    summary = stability_commonness_summary(tables)
    write_table(summary, snakemake.output.table, snakemake)
    logging.info("stability and commonness across layers, per architecture:\n%s", summary.to_string(index=False))


run_job(main, "stability_commonness_summary", snakemake.log[0])
