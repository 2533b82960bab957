"""Rule stability_figures: tables/*.csv of one architecture -> figures/*.png (Fig. 2-4, 12/A.5, 20)."""

import pandas as pd

from headstab.joblog import run_job
from headstab.plots import stability as plots
from headstab.plots.commonness import plot_commonness
from headstab.table_files import write_figure_records


def main():
    tables = {name: pd.read_csv(path) for name, path in snakemake.input.items()}
    arch, promptset, out = snakemake.wildcards.arch, snakemake.params.promptset, snakemake.output
    plots.plot_head_stability(tables["head_stability"], out.head_stability, arch, promptset)
    confidence = snakemake.config.get("statistics", {}).get("confidence", 0.95)
    plots.plot_layer_stability(tables["layer_stability"], out.layer_stability, arch, promptset, confidence=confidence)
    plots.plot_pair_stability(tables["pair_stability"], out.pair_stability, arch, promptset)
    plots.plot_cross_layer_stability(
        tables["head_stability"], tables["layer_stability"], out.cross_layer_stability, arch, promptset
    )
    plots.plot_alignment_map(
        tables["alignment_map"], out.alignment_map, arch, promptset, dispersion_table=tables["alignment_dispersion"]
    )
    plot_commonness(tables["commonness"], out.commonness, arch, promptset)
    write_figure_records(snakemake)


run_job(main, "stability_figures", snakemake.log[0])
