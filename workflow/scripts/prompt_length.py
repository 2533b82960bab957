"""Rule prompt_length: layer_stability.csv -> tables/prompt_length.csv, figures/prompt_length.png
(paper §4.4.2, Fig. 5 / B.4)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.prompt_length import plot_prompt_length
from headstab.sections.prompt_length import prompt_length_table
from headstab.table_files import write_figure_records, write_table


def main():
    anchor = snakemake.params.anchor_seed
    table = prompt_length_table(pd.read_csv(snakemake.input.layer_stability), anchor_seed=anchor)
    write_table(table, snakemake.output.table, snakemake)
    logging.info("prompt lengths %s, anchor seed %d", sorted(table["prompt_length"].unique()), anchor)
    confidence = snakemake.config.get("statistics", {}).get("confidence", 0.95)
    plot_prompt_length(table, snakemake.output.figure, snakemake.wildcards.arch, confidence=confidence)
    write_figure_records(snakemake)


run_job(main, "prompt_length", snakemake.log[0])
