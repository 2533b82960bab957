"""Rule stability_commonness: layer_stability.csv and commonness.csv of one architecture ->
tables/stability_commonness.csv, "least stable yet most distinct" tested with refits as units (§4.3, §5)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.sections.stability_commonness import stability_commonness_table
from headstab.table_files import write_table


def main():
    options = snakemake.params.statistics
    table = stability_commonness_table(
        pd.read_csv(snakemake.input.layer_stability),
        pd.read_csv(snakemake.input.commonness),
        snakemake.params.promptset,
        options["permutations"],
        options["seed"],
    )
    write_table(table, snakemake.output.table, snakemake)
    logging.info("per-refit correlations over layers and the test across refits:\n%s", table.to_string(index=False))


run_job(main, "stability_commonness", snakemake.log[0])
