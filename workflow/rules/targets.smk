# Per-architecture targets (partial reruns; docs/operations.md). Included last, so every stage's
# target lists are complete. For each selected architecture <arch>:
#
#   snakemake arch_<arch>        every output of <arch>: weights, caches, similarity, tables, figures
#   snakemake analyses_<arch>    only its post-training outputs (similarity, tables, figures, analyses)
#   snakemake analyses_<arch> --forcerun pair_similarity weight_norms validation_perplexity activation_norms ablation_perplexity
#                                rerun those analyses without retraining or re-caching (ANALYSIS_ROOT_RULES)
#
# Cross-architecture outputs (compare/, summary/) belong to no single architecture: `snakemake`
# (rule all) refreshes them afterwards.
#
#   snakemake network_inputs --cores 4   everything that needs the internet (hub tokenizers, hub
#                                        corpora's shards, wikitext-2), on a node that has it


rule network_inputs:
    """Every output whose job downloads from the Hugging Face hub (network_targets in common.smk): run on
    a node with internet before the rest of the run goes to compute nodes without it."""
    input:
        network_targets(),
    localrule: True


for _arch in ARCHITECTURES:

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
            architecture_post_training_targets(_arch),
        localrule: True
