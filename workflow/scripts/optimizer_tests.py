"""Rule optimizer_tests: both members' prompt-group similarity and validation perplexities ->
compare/{arch}/tables/optimizer_tests.csv (columns: headstab.sections.optimizer_tests)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.sections.optimizer_tests import optimizer_tests
from headstab.similarity.prompt_groups import read_grouped_similarity
from headstab.table_files import write_table


def perplexities(path):
    """A member's validation perplexities by seed."""
    table = pd.read_csv(path)
    return table.set_index("seed")["perplexity"]


def main():
    inp, options = snakemake.input, snakemake.params.statistics
    table = optimizer_tests(
        read_grouped_similarity(inp.adam),
        read_grouped_similarity(inp.adamw),
        perplexities(inp.adam_perplexity),
        perplexities(inp.adamw_perplexity),
        n_boot=options["n_boot"],
        permutations=options["permutations"],
        seed=options["seed"],
        confidence=options["confidence"],
        perplexity_margin=options["perplexity_margin"],
        paired=snakemake.params.paired,
    )
    write_table(table, snakemake.output.table, snakemake)
    logging.info("Adam vs AdamW (%s design):\n%s", table["design"].iloc[0], table.to_string(index=False))


run_job(main, "optimizer_tests", snakemake.log[0])
