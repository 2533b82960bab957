"""Rule optimizer_comparison: an optimizer pair (Adam and AdamW member) -> compare/{arch}/figures/
optimizer_stability.png (Fig. 6 / B.6), activation_norms.png (Fig. 35), perplexity.png and the tidy
tables/perplexity.csv (§B.7 figures; columns in headstab.sections.optimizers.perplexity_table) (paper §4.5)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.plots import optimizers as plots
from headstab.sections.optimizers import pair_frame, perplexity_comparison, perplexity_table
from headstab.table_files import write_figure_records, write_table


def main():
    inp, out, params = snakemake.input, snakemake.output, snakemake.params
    adam, adamw = snakemake.wildcards.arch, params.adamw
    arch_of = {"Adam": adam, "AdamW": adamw}

    plots.plot_optimizer_stability(
        pd.read_csv(inp.adam_layer_stability),
        pd.read_csv(inp.adamw_layer_stability),
        out.optimizer_stability,
        adam,
        adamw,
        promptset=params.promptset,
    )
    norms = pair_frame(pd.read_csv(inp.adam_activation_norms), pd.read_csv(inp.adamw_activation_norms))
    plots.plot_activation_norms(norms, out.activation_norms, adam, adamw)

    ppl = pair_frame(pd.read_csv(inp.adam_validation_perplexity), pd.read_csv(inp.adamw_validation_perplexity))
    comparison = perplexity_comparison(
        ppl.loc[ppl["optimizer"] == "Adam", "perplexity"].to_numpy(),
        ppl.loc[ppl["optimizer"] == "AdamW", "perplexity"].to_numpy(),
        permutations=params.statistics["permutations"],
        seed=params.statistics["seed"],
    )
    logging.info(
        "perplexity Adam %.3f +- %.3f, AdamW %.3f +- %.3f, Welch p = %.3g, Brunner-Munzel p = %.3g",
        comparison["mean_adam"],
        comparison["std_adam"],
        comparison["mean_adamw"],
        comparison["std_adamw"],
        comparison["welch_p"],
        comparison["brunner_munzel_p"],
    )
    write_table(perplexity_table(ppl, comparison, arch_of), out.perplexity, snakemake)
    plots.plot_perplexity(ppl, comparison, out.perplexity_figure, adam, adamw, corpus=params.heldout_label)
    write_figure_records(snakemake)


run_job(main, "optimizer_comparison", snakemake.log[0])
