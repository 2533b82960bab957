"""Rule head_neuron_layers: summary/tables/stability_against_chance.csv and every MLP architecture's
tables/neuron_universality.csv -> summary/tables/head_neuron_layers.csv (one row per architecture and layer),
summary/tables/head_neuron_correlation.csv (Spearman's rho over the layers with a layer-label permutation
p-value) and summary/figures/head_neuron_layers.png (docs/beyond_the_paper.md)."""

import pandas as pd

from headstab.joblog import run_job
from headstab.neurons.head_layers import head_neuron_layer_table, rank_correlation_table
from headstab.plots.neurons import plot_head_neuron_depth
from headstab.table_files import write_figure_records, write_table


def main():
    params, inp, out = snakemake.params, snakemake.input, snakemake.output
    shares = {}
    for arch, path in zip(params.architectures, inp.shares, strict=True):
        share = pd.read_csv(path)
        shares[arch] = share[share["scope"] == params.scope].reset_index(drop=True)
    layers = head_neuron_layer_table(pd.read_csv(inp.chance), shares, params.promptset)
    write_table(layers.assign(neuron_scope=params.scope), out.layers, snakemake)
    statistics = params.statistics
    correlation = rank_correlation_table(layers, statistics["permutations"], statistics["seed"])
    write_table(correlation.assign(neuron_scope=params.scope), out.correlation, snakemake)
    plot_head_neuron_depth(layers, out.figure)
    write_figure_records(snakemake)


run_job(main, "head_neuron_layers", snakemake.log[0])
