"""Rule optimizer_tests: both members' prompt-group similarity and validation perplexities ->
compare/{arch}/tables/optimizer_tests.csv (columns: headstab.sections.optimizers)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.sections.optimizers import optimizer_tests
from headstab.similarity.prompt_groups import read_grouped_similarity


def main():
    inp, options = snakemake.input, snakemake.params.statistics
    table = optimizer_tests(
        read_grouped_similarity(inp.adam),
        read_grouped_similarity(inp.adamw),
        pd.read_csv(inp.adam_perplexity)["perplexity"].to_numpy(),
        pd.read_csv(inp.adamw_perplexity)["perplexity"].to_numpy(),
        n_boot=options["n_boot"],
        permutations=options["permutations"],
        seed=options["seed"],
        confidence=options["confidence"],
        perplexity_margin=options["perplexity_margin"],
    )
    table.to_csv(snakemake.output.table, index=False)
    logging.info("Adam vs AdamW:\n%s", table.to_string(index=False))


run_job(main, "optimizer_tests", snakemake.log[0])
