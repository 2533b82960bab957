"""Rule optimizer_comparison: an architecture and its AdamW twin -> compare/{arch}/figures/
optimizer_stability.png (Fig. 6 / B.6), activation_norms.png (Fig. 35), perplexity.png and
tables/perplexity.csv (Table B.7) (paper §4.5).

perplexity.csv is long and tidy: one value per row, columns scope, architecture, optimizer, seed,
statistic, value, where scope is
- `refit`: statistic perplexity of one refit (seed set);
- `optimizer`: statistic mean, std (ddof 1) or n over one member's refits (seed empty);
- `comparison`: architecture "{adam} vs {adamw}", optimizer "AdamW - Adam", statistic difference (of
  means), welch_t, welch_p (two-sided Welch t-test), mannwhitney_u, mannwhitney_p (two-sided).
"""

import logging

import pandas as pd

from headstab.analyses import perplexity_comparison
from headstab.joblog import run_job
from headstab.plots import analyses as plots


def perplexity_rows(ppl, comparison, arch_of):
    rows = [("refit", arch_of[r.optimizer], r.optimizer, r.seed, "perplexity", r.perplexity)
            for r in ppl.itertuples(index=False)]
    for optimizer, suffix in (("Adam", "adam"), ("AdamW", "adamw")):
        rows += [("optimizer", arch_of[optimizer], optimizer, None, stat, comparison[f"{stat}_{suffix}"])
                 for stat in ("mean", "std", "n")]
    pair = f"{arch_of['Adam']} vs {arch_of['AdamW']}"
    rows += [("comparison", pair, "AdamW - Adam", None, stat, comparison[stat])
             for stat in ("difference", "welch_t", "welch_p", "mannwhitney_u", "mannwhitney_p")]
    table = pd.DataFrame(rows, columns=["scope", "architecture", "optimizer", "seed", "statistic", "value"])
    return table.astype({"seed": "Int64"})


def main():
    inp, out, params = snakemake.input, snakemake.output, snakemake.params
    arch_of = {"Adam": snakemake.wildcards.arch, "AdamW": params.adamw}

    plots.plot_optimizer_stability(pd.read_csv(inp.adam_layer_stability), pd.read_csv(inp.adamw_layer_stability),
                                   out.optimizer_stability, arch_of["Adam"], arch_of["AdamW"], promptset=params.promptset)

    norms = pd.concat([pd.read_csv(inp.adam_activation_norms).assign(optimizer="Adam"),
                       pd.read_csv(inp.adamw_activation_norms).assign(optimizer="AdamW")], ignore_index=True)
    plots.plot_activation_norms(norms, out.activation_norms, arch_of["Adam"], arch_of["AdamW"])

    ppl = pd.concat([pd.read_csv(inp.adam_validation_perplexity).assign(optimizer="Adam"),
                     pd.read_csv(inp.adamw_validation_perplexity).assign(optimizer="AdamW")], ignore_index=True)
    comparison = perplexity_comparison(ppl.loc[ppl["optimizer"] == "Adam", "perplexity"].to_numpy(),
                                       ppl.loc[ppl["optimizer"] == "AdamW", "perplexity"].to_numpy())
    logging.info("perplexity Adam %.3f +- %.3f, AdamW %.3f +- %.3f, Welch p = %.3g", comparison["mean_adam"],
                 comparison["std_adam"], comparison["mean_adamw"], comparison["std_adamw"], comparison["welch_p"])
    perplexity_rows(ppl, comparison, arch_of).to_csv(out.perplexity, index=False)
    plots.plot_perplexity(ppl, comparison, out.perplexity_figure, arch_of["Adam"], arch_of["AdamW"],
                          corpus=params.heldout_label)


run_job(main, "optimizer_comparison", snakemake.log[0])
