"""Rule layer_pseudo_values: the primary prompt-group similarity of one architecture -> tables/layer_pseudo_values.csv
(each refit's jackknife pseudo-value of pooled layer stability per layer; headstab.sections.stability_gap)."""

import logging

from headstab.joblog import run_job
from headstab.sections.stability_gap import layer_pseudo_values
from headstab.similarity.prompt_groups import read_grouped_similarity
from headstab.table_files import write_table


def main():
    table = layer_pseudo_values(read_grouped_similarity(snakemake.input.grouped))
    write_table(table, snakemake.output.table, snakemake)
    logging.info(
        "pseudo-values per refit, mean over refits:\n%s", table.pivot_table("pseudo_value", "layer", "statistic")
    )


run_job(main, "layer_pseudo_values", snakemake.log[0])
