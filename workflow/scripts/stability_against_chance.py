"""Rule stability_against_chance: every architecture's layer_stability_pooled.csv and
stability_gap_intervals.csv -> summary tables and the figure of the report's "Stability against chance"."""

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.chance import plot_stability_against_chance
from headstab.table_files import write_figure_records, write_table


def main():
    params = snakemake.params
    tables = {}
    for key in ("pooled", "gap"):
        frames = []
        for arch, path in zip(params.architectures, snakemake.input[key], strict=True):
            frame = pd.read_csv(path)
            for fact, value in reversed(list(params.facts[arch].items())):
                frame.insert(0, fact, value)
            frame.insert(0, "architecture", arch)
            frames.append(frame)
        tables[key] = pd.concat(frames, ignore_index=True)
    write_table(tables["pooled"], snakemake.output.summary, snakemake)
    write_table(tables["gap"], snakemake.output.gap, snakemake)
    plot_stability_against_chance(tables["pooled"], snakemake.output.figure, params.promptset, params.confidence)
    write_figure_records(snakemake)


run_job(main, "stability_against_chance", snakemake.log[0])
