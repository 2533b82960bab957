"""Rule residual_cka: caches of one architecture (and their step-0 caches, when there are any) ->
tables/residual_cka.csv (promptset, positions, seed_a, seed_b, layer, cka, init_cka), tables/residual_cka_layers.csv
(per-layer mean with its interval, beside the step-0 mean and interval) and figures/residual_stream.png (paper §4.7,
Fig. 9 / B.8), on the residual hook params.hook (config key analysis.cka_hook)."""

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.residual_cka import plot_residual_stream
from headstab.sections.residual_cka import kernel_label, layer_cka_table, residual_cka_table
from headstab.table_files import write_figure_records, write_table


def main():
    params = snakemake.params
    caches = dict(zip(params.seeds, snakemake.input.caches, strict=True))
    # step 0 of the same refits: the chance level (statistics.init_baseline, refits trained here)
    init = dict(zip(params.seeds, snakemake.input.init_caches, strict=True)) if snakemake.input.init_caches else None
    table = residual_cka_table(
        caches,
        params.promptsets,
        init_paths=init,
        hook=params.hook,
        kernel=params.kernel,
        threshold=params.threshold,
        debiased=params.debiased,
        max_tokens=params.max_tokens,
    )
    write_table(table, snakemake.output.table, snakemake)
    options = snakemake.params.statistics
    layers = layer_cka_table(table, params.pairs, options["n_boot"], options["seed"], options["confidence"])
    write_table(layers, snakemake.output.layers, snakemake)
    plot_residual_stream(
        table,
        pd.read_csv(snakemake.input.layer_stability),
        snakemake.output.figure,
        snakemake.wildcards.arch,
        promptset=params.figure_promptset,
        kernel=kernel_label(params.kernel, params.debiased),
        hook=params.hook,
        pairs=params.pairs,
        layer_intervals=layers,
    )
    write_figure_records(snakemake)


run_job(main, "residual_cka", snakemake.log[0])
