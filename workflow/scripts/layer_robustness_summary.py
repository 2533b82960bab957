"""Rule layer_robustness_summary: every architecture's layer_robustness.csv and layer_robustness_depth.csv ->
summary/tables/layer_robustness.csv, summary/tables/layer_robustness_depth.csv and
summary/figures/layer_robustness_stages.png (docs/beyond_the_paper.md)."""

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.layer_robustness import plot_robustness_stages
from headstab.table_files import write_figure_records, write_table


def main():
    archs, inp, out = snakemake.params.architectures, snakemake.input, snakemake.output
    summary = pd.concat(
        [pd.read_csv(path).assign(architecture=arch) for arch, path in zip(archs, inp.tables, strict=True)],
        ignore_index=True,
    )
    write_table(summary, out.table, snakemake)
    write_table(pd.concat([pd.read_csv(path) for path in inp.depths], ignore_index=True), out.depth, snakemake)
    plot_robustness_stages(summary, out.figure)
    write_figure_records(snakemake)


run_job(main, "layer_robustness_summary", snakemake.log[0])
