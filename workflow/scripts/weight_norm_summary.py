"""Rule weight_norm_summary: weight_norm_correlation.csv of every architecture ->
summary/tables/weight_norm_correlation.csv (paper §4.4.1, Table B.5 across architectures)."""

import pandas as pd

from headstab.joblog import run_job
from headstab.sections.weight_norms import weight_norm_summary
from headstab.table_files import write_table


def main():
    facts = snakemake.params.architectures
    correlations = {arch: pd.read_csv(path) for arch, path in zip(facts, snakemake.input.correlations, strict=True)}
    options = snakemake.params.statistics
    summary = weight_norm_summary(
        correlations,
        facts,
        snakemake.params.anchor_seeds,
        intervals={key: options[key] for key in ("n_boot", "seed", "confidence")},
    )
    write_table(summary, snakemake.output.table, snakemake)


run_job(main, "weight_norm_summary", snakemake.log[0])
