# Stability along training: layer stability of the refits at each of an architecture's
# snapshot_steps (0: the initialisation) and after training, with intervals and the null.
#
#   stability_along_training  {RESULTS}/{arch}/tables/stability_along_training.csv,
#                             figures/stability_along_training.png      (analysis.promptset)
#
# Only for architectures with snapshot_steps. Library: headstab.sections.training_dynamics,
# headstab.plots.training_dynamics; inputs from snapshots.smk and similarity.smk.

SNAPSHOT_STEPS = {arch: list(spec.snapshot_steps) for arch, spec in SPECS.items()}
TRAINING_DYNAMICS = {
    arch: {
        "steps": steps,
        "snapshots": [LAYOUT.snapshot_grouped_similarity_path(arch, step, PRIMARY) for step in steps],
        # The first refit's training record says how many steps the run took (every refit takes the same).
        "train_meta": f"{LAYOUT.checkpoint_dir(arch, SEEDS[arch][0])}/meta.json",
    }
    for arch, steps in SNAPSHOT_STEPS.items()
    if steps
}
TRAINING_DYNAMICS_TARGETS = {
    arch: (
        [LAYOUT.table_path(arch, "stability_along_training"), LAYOUT.figure_path(arch, "stability_along_training")]
        if arch in TRAINING_DYNAMICS
        else []
    )
    for arch in ARCHITECTURES
}
by_dynamics = partial(jobs.WildcardLookup, TRAINING_DYNAMICS, "arch")

add_outputs(TRAINING_DYNAMICS_TARGETS)


rule stability_along_training:
    """Pooled layer stability at each snapshot step and after training, with the bootstrap interval over
    refits and prompt groups and the prompt-permutation null (one line per layer)."""
    input:
        snapshots=by_dynamics("snapshots"),
        final=LAYOUT.grouped_similarity_path("{arch}", PRIMARY),
        train_meta=by_dynamics("train_meta"),
    output:
        table=LAYOUT.table_path("{arch}", "stability_along_training"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "stability_along_training")),
        figure=report(
            LAYOUT.figure_path("{arch}", "stability_along_training"),
            caption="../report/stability_along_training.rst",
            category="{arch}",
            subcategory="Stability along training",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "stability_along_training")),
    log:
        LAYOUT.log("stability_along_training", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("statistics_mem_mb"),
        runtime=30,
    params:
        steps=by_dynamics("steps"),
        promptset=PRIMARY,
        statistics={key: STATISTICS[key] for key in ("n_boot", "seed", "confidence")},
        library=STATISTICS_CODE,
        configuration=by_arch("configuration"),
    script:
        "../scripts/stability_along_training.py"
