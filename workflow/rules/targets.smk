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
#                                        corpora's shards, wikitext-2), on a node that has it


# Every output of one architecture: weights, caches, similarity, then each section's.
ARCHITECTURE_TARGETS = {
    arch: CHECKPOINT_OUTPUTS[arch]
    + ARCH[arch]["caches"]
    + ARCH[arch]["similarities"]
    + STABILITY_TARGETS[arch]
    + WEIGHT_NORMS_TARGETS[arch]
    + PROMPT_LENGTH_TARGETS[arch]
    + OPTIMIZERS_TARGETS[arch]
    + RESIDUAL_CKA_TARGETS[arch]
    + ABLATION_TARGETS[arch]
    + STATISTICS_TARGETS[arch]
    + TRAINING_DYNAMICS_TARGETS[arch]
    + TRAINING_CURVES_TARGETS[arch]
    + EFFECTIVE_RANK_TARGETS[arch]
    + LAYER_ROBUSTNESS_TARGETS[arch]
    + HEAD_TYPES_TARGETS[arch]
    for arch in ARCHITECTURES
}
# Outputs an analysis rerun must never rebuild: the weights and caches.
UPSTREAM_TARGETS = {arch: set(CHECKPOINT_OUTPUTS[arch] + ARCH[arch]["caches"]) for arch in ARCHITECTURES}
# Every architecture's outputs, the Adam/AdamW comparisons, the cross-architecture summaries, the report's configuration.
ALL_TARGETS = (
    [target for arch in ARCHITECTURES for target in ARCHITECTURE_TARGETS[arch]]
    + WEIGHT_NORMS_SUMMARY_TARGETS
    + OPTIMIZERS_COMPARISON_TARGETS
    + OPTIMIZER_TRAINING_CURVES_TARGETS
    + STABILITY_GAP_TARGETS
    + META_SNE_TARGETS
    + OPTIMIZER_TESTS_TARGETS
    + CHANCE_SUMMARY_TARGETS
    + EFFECTIVE_RANK_SUMMARY_TARGETS
    + LAYER_ROBUSTNESS_SUMMARY_TARGETS
    + HEAD_TYPES_SUMMARY_TARGETS
    + [target for arch in SEED_GRID_ARCHITECTURES for target in SEED_GRID_TARGETS[arch]]
    + [LAYOUT.report_configuration_path()]
)
# The CSV tables the report shows as pages (report.smk): each architecture's, and the rest (compare/, summary/).
TABLE_SOURCES = {
    arch: [path for path in ARCHITECTURE_TARGETS[arch] if path.startswith(f"{RESULTS}/{arch}/tables/")]
    for arch in ARCHITECTURES
}
SUMMARY_TABLE_SOURCES = [
    path
    for path in ALL_TARGETS
    if path.endswith(".csv") and path.startswith((f"{RESULTS}/compare/", f"{RESULTS}/summary/tables/"))
]


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
