"""Rule optimizer_training_curves: the training curves of an optimizer pair's two members ->
compare/{arch}/tables/optimizer_final_loss.csv, figures/optimizer_training_curves.png."""

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.training_curves import plot_optimizer_training_curves
from headstab.table_files import write_figure_records, write_table


def main():
    inp = snakemake.input
    curves = {"Adam": pd.read_csv(inp.adam_training_curves), "AdamW": pd.read_csv(inp.adamw_training_curves)}
    adam, adamw = snakemake.wildcards.arch, snakemake.params.adamw
    finals = pd.concat(
        [
            pd.read_csv(inp.adam_training_final_loss).assign(architecture=adam, optimizer="Adam"),
            pd.read_csv(inp.adamw_training_final_loss).assign(architecture=adamw, optimizer="AdamW"),
        ],
        ignore_index=True,
    )
    write_table(finals, snakemake.output.finals, snakemake)
    plot_optimizer_training_curves(curves, finals, snakemake.output.figure, adam, adamw)
    write_figure_records(snakemake)


run_job(main, "optimizer_training_curves", snakemake.log[0])
