"""Rule seed_grid: the caches of a seed grid's refits ({init}-{data}) -> tables/seed_grid_pairs.csv (pair stability
per ordered pair and layer, with its kind), tables/seed_grid.csv (per layer: the shares-init, shares-data and
shares-neither means and the init / data / interaction fractions; with one-ulp twins also the shares-both mean and
the floor fractions; refit-resampled intervals) and
figures/seed_grid.png (docs/beyond_the_paper.md)."""

import logging

from headstab.joblog import run_job
from headstab.plots.seed_grid import plot_seed_grid
from headstab.sections.seed_grid import grid_pair_table, seed_grid_table
from headstab.similarity.pairs import pair_similarity_from_caches
from headstab.stability import pair_stability_table
from headstab.table_files import write_figure_records, write_table


def main():
    params, out = snakemake.params, snakemake.output
    similarity = pair_similarity_from_caches(
        list(snakemake.input.caches), params.promptset, params.prompt_chunk, scope="same_layer"
    )
    pairs = grid_pair_table(pair_stability_table(similarity, params.seeds, params.promptset, scopes=["same_layer"]))
    write_table(pairs, out.pairs, snakemake)
    options = params.statistics
    table = seed_grid_table(pairs, options["n_boot"], options["seed"], options["confidence"])
    write_table(table.assign(promptset=params.promptset), out.table, snakemake)
    logging.info("seed grid decomposition:\n%s", table.round(4).to_string())
    plot_seed_grid(table, out.figure, snakemake.wildcards.arch)
    write_figure_records(snakemake)


run_job(main, "seed_grid", snakemake.log[0])
