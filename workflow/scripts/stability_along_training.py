"""Rule stability_along_training: the refits' prompt-group similarity at each snapshot step and after
training -> tables/stability_along_training.csv, figures/stability_along_training.png."""

import json
import logging

from headstab.joblog import run_job
from headstab.plots.training_dynamics import plot_stability_along_training
from headstab.sections.training_dynamics import stability_along_training
from headstab.similarity.prompt_groups import read_grouped_similarity
from headstab.similarity.prompt_identity import check_same_prompts
from headstab.table_files import write_figure_records, write_table


def main():
    final_step = json.loads(open(snakemake.input.train_meta).read())["steps"]
    # The trained refits' own file stands for the last step (a snapshot of that step holds the same weights).
    paths = {step: path for step, path in zip(snakemake.params.steps, snakemake.input.snapshots) if step != final_step}
    grouped = {
        step: read_grouped_similarity(path) for step, path in {**paths, final_step: snakemake.input.final}.items()
    }
    for path in paths.values():
        check_same_prompts(snakemake.input.final, path, snakemake.params.promptset)
    options = snakemake.params.statistics
    table = stability_along_training(
        grouped, snakemake.params.promptset, options["n_boot"], options["seed"], options["confidence"]
    )
    write_table(table, snakemake.output.table, snakemake)
    logging.info("steps %s (%d after training), %d resamples", sorted(grouped), final_step, options["n_boot"])
    plot_stability_along_training(table, snakemake.output.figure, snakemake.wildcards.arch)
    write_figure_records(snakemake)


run_job(main, "stability_along_training", snakemake.log[0])
