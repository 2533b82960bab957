"""Rule neuron_universality: neurons/maxima.npz -> tables/neuron_universality.csv (universal share per layer and
scope, with its interval and null share), tables/neuron_scores.csv (one row per neuron of every anchor refit and
scope), tables/neuron_depth_tests.csv (per scope, the mid-depth dip of the excess correlation, refits as units)
and figures/neuron_universality.png (the configured scope; docs/beyond_the_paper.md)."""

import logging

import numpy as np
import pandas as pd

from headstab.joblog import run_job
from headstab.neurons.depth import neuron_depth_table
from headstab.neurons.shares import neuron_rows, universal_share_table
from headstab.plots.neurons import plot_universal_share
from headstab.table_files import write_figure_records, write_table


def main():
    params, out = snakemake.params, snakemake.output
    neurons, statistics = params.neurons, params.statistics
    with np.load(snakemake.input.maxima, allow_pickle=False) as data:
        refits, n_tokens = [str(label) for label in data["refits"]], int(data["n_tokens"])
        maxima = {name: data[name] for name in data.files if name.startswith(("max_", "null_"))}
    scopes = [scope for scope in ("same_layer", "cross_layer") if f"max_{scope}" in maxima]
    logging.info("neurons: %d refits, %d tokens, scopes %s", len(refits), n_tokens, scopes)
    shares, scores, depth = [], [], []
    for scope in scopes:
        pair_max, pair_null = maxima[f"max_{scope}"], maxima[f"null_{scope}"]
        table = universal_share_table(
            pair_max,
            pair_null,
            threshold=neurons["threshold"],
            n_boot=statistics["n_boot"],
            seed=statistics["seed"],
            confidence=statistics["confidence"],
        )
        shares.append(
            table.assign(scope=scope, null=neurons["null"], null_draws=neurons["null_draws"], n_tokens=n_tokens)
        )
        scores.append(neuron_rows(pair_max, pair_null, refits, neurons["threshold"]).assign(scope=scope))
        dip = neuron_depth_table(pair_max, pair_null, permutations=statistics["permutations"], seed=statistics["seed"])
        depth.append(dip.assign(scope=scope))
        logging.info(
            "%s: excess correlation dip %.4g, p %.4g (%s)",
            scope,
            *dip.iloc[0][["estimate", "p_value"]],
            dip.iloc[0]["calibration"],
        )
    share_table = pd.concat(shares, ignore_index=True)
    write_table(share_table, out.table, snakemake)
    write_table(pd.concat(scores, ignore_index=True), out.scores, snakemake)
    write_table(pd.concat(depth, ignore_index=True), out.depth, snakemake)
    chosen = share_table[share_table["scope"] == neurons["scope"]]
    plot_universal_share(chosen, out.figure, snakemake.wildcards.arch, neurons["threshold"])
    write_figure_records(snakemake)


run_job(main, "neuron_universality", snakemake.log[0])
