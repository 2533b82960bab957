# Per-architecture targets (partial reruns; docs/operations.md). Included last, so every stage's
# target lists are complete. For each selected architecture <arch>:
#
#   snakemake arch_<arch>        every output of <arch>: weights, caches, similarity, tables, figures
#   snakemake analyses_<arch>    only its post-training outputs (similarity, tables, figures, analyses)
#   snakemake analyses_<arch> --forcerun pair_similarity refit_measurements
#                                rerun those analyses without retraining or re-caching
#
# Cross-architecture outputs (compare/, summary/) belong to no single architecture: `snakemake`
# (rule all) refreshes them afterwards.


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
