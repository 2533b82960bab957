# Per-architecture targets (partial reruns; docs/operations.md). Included after every stage's rule file, so
# their target lists are complete; report.smk, which renders their tables, comes after. For each selected
# architecture <arch>:
#
#   snakemake arch_<arch>        every output of <arch>: weights (trained or fetched), caches, similarity, tables, figures
#   snakemake analyses_<arch>    only its post-training outputs (similarity, tables, figures, analyses)
#   snakemake analyses_<arch> --forcerun <headstab.plan.layout.ANALYSIS_ROOT_RULES>
#                                rerun those analyses without retraining or re-caching (headstab.plan.layout.ANALYSIS_ROOT_RULES)
#
# Cross-architecture outputs (compare/, summary/) belong to no single architecture: `snakemake`
# (rule all) refreshes them afterwards.
#
#   snakemake network_inputs --cores 4   everything that needs the internet (hub tokenizers, hub
#                                        corpora's shards, wikitext-2, neurons.heldout's text), on a node
#                                        that has it


# Every output of one architecture: weights, caches, similarity, then each section's (add_outputs, common.smk).
ARCHITECTURE_TARGETS = {
    arch: UPSTREAM_OUTPUTS[arch] + ARCH[arch]["caches"] + ARCH[arch]["similarities"] + ARCHITECTURE_OUTPUTS[arch]
    for arch in ARCHITECTURES
}
# Outputs an analysis rerun must never rebuild: the weights and caches.
UPSTREAM_TARGETS = {arch: set(UPSTREAM_OUTPUTS[arch] + ARCH[arch]["caches"]) for arch in ARCHITECTURES}
# Every architecture's outputs, the Adam/AdamW comparisons, the cross-architecture summaries, the report's configuration.
ALL_TARGETS = (
    [target for arch in ARCHITECTURES for target in ARCHITECTURE_TARGETS[arch]]
    + SHARED_OUTPUTS
    + SEED_GRID_OUTPUTS
    + [LAYOUT.report_configuration_path()]
)


rule network_inputs:
    """Every output whose job downloads from the Hugging Face hub (headstab.plan.jobs.network_targets): run
    on a node with internet before the rest of the run goes to compute nodes without it."""
    input:
        jobs.network_targets(config, SPECS, LAYOUT),
    localrule: True


for _arch in ARCHITECTURES:

    rule:
        name:
            f"arch_{_arch}"
        input:
            ARCHITECTURE_TARGETS[_arch],
        localrule: True

    rule:
        name:
            f"analyses_{_arch}"
        input:
            [target for target in ARCHITECTURE_TARGETS[_arch] if target not in UPSTREAM_TARGETS[_arch]],
        localrule: True
