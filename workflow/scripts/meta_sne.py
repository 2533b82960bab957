"""Rule meta_sne: caches of every refit of every architecture -> summary/tables/meta_sne.csv (one row per
(architecture, seed, layer, head) with its description norm and t-SNE coordinates) and summary/figures/meta_sne.png
(paper §4.9, Fig. 11); the same from the descriptions divided by their norms (meta_sne_scale_normalised.csv,
.png); and meta_sne_mantel.csv, the Mantel test of description distance against |Δ relative depth|, an architecture's
layers permuted in one order shared by its refits. Optimizer and attention-only come from the specs (params.architectures)."""

import logging

from headstab.joblog import run_job
from headstab.plots.meta_sne import plot_meta_sne
from headstab.sections.meta_sne import depth_mantel_table, describe_refits, meta_sne_table
from headstab.table_files import write_figure_records, write_table


def main():
    params, out = snakemake.params, snakemake.output
    paths = {(arch, int(seed)): path for (arch, seed), path in zip(params.refits, snakemake.input.caches, strict=True)}
    descriptions = describe_refits(paths, params.promptset)
    mantel = depth_mantel_table(
        descriptions, params.architectures, params.permutations, params.seed, max_heads=params.mantel_max_heads
    )
    write_table(mantel, out.mantel, snakemake)
    logging.info("Mantel tests:\n%s", mantel.to_string())
    for description, table_path, figure_path in (
        ("raw", out.table, out.figure),
        ("scale_normalised", out.normalised_table, out.normalised_figure),
    ):
        table = meta_sne_table(
            descriptions,
            params.architectures,
            perplexity=params.perplexity,
            n_threads=snakemake.threads,
            embedding=params.embedding,
            description=description,
        )
        logging.info("t-SNE of %d heads from %d refits (%s descriptions)", len(table), len(descriptions), description)
        write_table(table, table_path, snakemake)
        plot_meta_sne(table, figure_path, mantel=mantel)
    write_figure_records(snakemake)


run_job(main, "meta_sne", snakemake.log[0])
