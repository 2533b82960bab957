"""Rule training_curves: every refit's train_log.csv -> tables/training_curves.csv, training_final_loss.csv,
figures/training_curves.png."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.training_curves import plot_training_curves
from headstab.sections.training_curves import final_losses, training_curves
from headstab.table_files import write_figure_records, write_table


def main():
    logs = {seed: pd.read_csv(path) for seed, path in zip(snakemake.params.seeds, snakemake.input.logs)}
    curves = training_curves(logs)
    finals = final_losses(curves, snakemake.params.plateau)
    write_table(curves, snakemake.output.curves, snakemake)
    write_table(finals, snakemake.output.finals, snakemake)
    logging.info("%d refits, %d levelled off", len(finals), int(finals["converged"].sum()))
    plot_training_curves(curves, finals, snakemake.output.figure, snakemake.wildcards.arch)
    write_figure_records(snakemake)


run_job(main, "training_curves", snakemake.log[0])
