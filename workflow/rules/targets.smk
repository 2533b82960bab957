# Per-architecture targets (partial reruns; docs/operations.md). Included last, so every stage's
# target lists are complete. For each selected architecture <arch>:
#
#   snakemake arch_<arch>        every output of <arch>: weights, caches, similarity, tables, figures
#   snakemake analyses_<arch>    only its post-training outputs (similarity, tables, figures, analyses)
#   snakemake analyses_<arch> --forcerun pair_similarity weight_norms validation_perplexity activation_norms ablation_perplexity
#                                rerun those analyses without retraining or re-caching (headstab.layout.ANALYSIS_ROOT_RULES)
#
# Cross-architecture outputs (compare/, summary/) belong to no single architecture: `snakemake`
# (rule all) refreshes them afterwards.
#
#   snakemake network_inputs --cores 4   everything that needs the internet (hub tokenizers, hub
#                                        corpora's shards, wikitext-2), on a node that has it


def architecture_targets(arch):
    """Every output of one architecture: weights, caches, similarity, then each section's."""
    return (
        LAYOUT.train_outputs(arch, seeds(arch))
        + ARCH[arch]["caches"]
        + ARCH[arch]["similarities"]
        + STABILITY_TARGETS[arch]
        + WEIGHT_NORMS_TARGETS[arch]
        + PROMPT_LENGTH_TARGETS[arch]
        + OPTIMIZERS_TARGETS[arch]
        + RESIDUAL_CKA_TARGETS[arch]
        + ABLATION_TARGETS[arch]
    )


def all_targets():
    """Every architecture's outputs, the Adam/AdamW comparisons, the cross-architecture summaries and the
    report's configuration."""
    return (
        [target for arch in ARCHITECTURES for target in architecture_targets(arch)]
        + WEIGHT_NORMS_SUMMARY_TARGETS
        + OPTIMIZERS_COMPARISON_TARGETS
        + STABILITY_GAP_TARGETS
        + META_SNE_TARGETS
        + [LAYOUT.report_configuration_path()]
    )


rule network_inputs:
    """Every output whose job downloads from the Hugging Face hub (headstab.planning.network_targets): run
    on a node with internet before the rest of the run goes to compute nodes without it."""
    input:
        planning.network_targets(config, SPECS, LAYOUT),
    localrule: True


for _arch in ARCHITECTURES:
    # Outputs an analysis rerun must never rebuild: the weights and caches.
    _upstream = set(LAYOUT.train_outputs(_arch, seeds(_arch)) + ARCH[_arch]["caches"])

    rule:
        name:
            f"arch_{_arch}"
        input:
            architecture_targets(_arch),
        localrule: True

    rule:
        name:
            f"analyses_{_arch}"
        input:
            [target for target in architecture_targets(_arch) if target not in _upstream],
        localrule: True
