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


def architecture_upstream_targets(arch):
    """Outputs of `arch` that an analysis rerun must never rebuild: its weights and caches."""
    return train_outputs(arch) + [cache_path(arch, seed) for seed in seeds(arch)]


def architecture_post_training_targets(arch):
    """Every output of `arch` downstream of its caches, in architecture_targets order."""
    upstream = set(architecture_upstream_targets(arch))
    return [target for target in architecture_targets(arch) if target not in upstream]


# Rules whose jobs start an architecture's analyses (everything else in analyses_<arch> is
# downstream of one of them); tests/test_operations.py checks this list against the DAG.
ANALYSIS_ROOT_RULES = ("pair_similarity", "refit_measurements")


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
