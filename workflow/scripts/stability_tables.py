"""Rule stability_tables: similarity/{promptset}.h5 of one architecture -> tables/*.csv."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.similarity import read_pair_similarity
from headstab.stability import TABLE_NAMES, stability_tables


def main():
    ddof = snakemake.params.layer_std_ddof  # analysis.layer_std_ddof
    logging.info("layer s.d. over heads with ddof=%d", ddof)
    collected = {name: [] for name in TABLE_NAMES}
    for path, promptset in zip(snakemake.input.similarity, snakemake.params.promptsets, strict=True):
        similarity, seeds = read_pair_similarity(path)
        logging.info("%s: %d refits, tensor %s", path, len(seeds), similarity.shape)
        for name, table in stability_tables(similarity, seeds, promptset, ddof=ddof).items():
            collected[name].append(table)
    for name in TABLE_NAMES:
        table = pd.concat(collected[name], ignore_index=True)
        table.to_csv(snakemake.output[name], index=False)
        logging.info("wrote %s (%d rows)", snakemake.output[name], len(table))


run_job(main, "stability_tables", snakemake.log[0])
