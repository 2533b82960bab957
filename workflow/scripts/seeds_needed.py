"""Rule seeds_needed: similarity/{primary}.groups.h5 -> tables/seeds_needed{,_curve}.csv, figures/seeds_needed.png."""

import logging

from headstab.joblog import run_job
from headstab.plots.chance import plot_seeds_needed
from headstab.similarity.prompt_groups import read_grouped_similarity
from headstab.statistics.seeds_needed import seeds_needed, seeds_needed_curve
from headstab.table_files import write_figure_records, write_table


def main():
    options = snakemake.params.statistics
    grouped = read_grouped_similarity(snakemake.input.grouped)
    curve = seeds_needed_curve(
        grouped.observed,
        grouped.group_sizes,
        n_boot=options["seeds_needed_boot"],
        n_subsets=options["seeds_needed_subsamples"],
        seed=options["seed"],
        confidence=options["confidence"],
    )
    needed = seeds_needed(curve, options["seeds_needed_tolerance"])
    write_table(curve, snakemake.output.curve, snakemake)
    write_table(needed, snakemake.output.needed, snakemake)
    logging.info("refits needed:\n%s", needed.to_string(index=False))
    plot_seeds_needed(curve, needed, snakemake.output.figure, snakemake.wildcards.arch, options["confidence"])
    write_figure_records(snakemake)


run_job(main, "seeds_needed", snakemake.log[0])
