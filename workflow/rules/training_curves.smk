# Training curves (beyond the paper's figures): every trained refit's train_log.csv (step, tokens, loss, lr,
# seconds) per architecture, and the Adam and AdamW refits of each pair on one figure.
#
#   training_curves            {RESULTS}/{arch}/tables/training_curves.csv, training_final_loss.csv,
#                              figures/training_curves.png
#   optimizer_training_curves  {RESULTS}/compare/{arch}/tables/optimizer_final_loss.csv,
#                              figures/optimizer_training_curves.png   ({arch} = the Adam member)
#
# Only refits trained here write a train_log.csv (published and hub refits do not). Library:
# headstab.sections.training_curves, headstab.plots.training_curves.

# A refit has levelled off when its loss fell by less than this fraction over its last quarter of tokens.
TRAINING_PLATEAU = 0.02
TRAIN_LOGS = {
    arch: [f"{LAYOUT.checkpoint_dir(arch, seed)}/train_log.csv" for seed in SEEDS[arch]]
    for arch in TRAINED_ARCHITECTURES
}
TRAINING_CURVES_TARGETS = {
    arch: (
        [LAYOUT.table_path(arch, name) for name in ("training_curves", "training_final_loss")]
        + [LAYOUT.figure_path(arch, "training_curves")]
        if arch in TRAIN_LOGS
        else []
    )
    for arch in ARCHITECTURES
}
TRAINED_PAIRS = {arch: adamw for arch, adamw in OPTIMIZER_PAIRS.items() if arch in TRAIN_LOGS and adamw in TRAIN_LOGS}
OPTIMIZER_TRAINING_CURVES_TARGETS = [
    path
    for arch in TRAINED_PAIRS
    for path in (
        LAYOUT.compare_table_path(arch, "optimizer_final_loss"),
        LAYOUT.compare_figure_path(arch, "optimizer_training_curves"),
    )
]
TRAINING_CURVES_INPUTS = {
    arch: {
        f"{role}_{name}": LAYOUT.table_path(member, name)
        for role, member in (("adam", arch), ("adamw", adamw))
        for name in ("training_curves", "training_final_loss")
    }
    for arch, adamw in TRAINED_PAIRS.items()
}

add_outputs(TRAINING_CURVES_TARGETS, shared=OPTIMIZER_TRAINING_CURVES_TARGETS)


rule training_curves:
    """Every refit's training loss against tokens and their mean, with each refit's final loss and whether
    it levelled off over its last quarter of tokens."""
    input:
        logs=lookup(dpath="{arch}", within=TRAIN_LOGS),
    output:
        curves=LAYOUT.table_path("{arch}", "training_curves"),
        curves_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "training_curves")),
        finals=LAYOUT.table_path("{arch}", "training_final_loss"),
        finals_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "training_final_loss")),
        figure=report(
            LAYOUT.figure_path("{arch}", "training_curves"),
            caption="../report/training_curves.rst",
            category="{arch}",
            subcategory="Training",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "training_curves")),
    log:
        LAYOUT.log("training_curves", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        seeds=by_arch("seeds"),
        plateau=TRAINING_PLATEAU,
        configuration=by_arch("configuration"),
    script:
        "../scripts/training_curves.py"


rule optimizer_training_curves:
    """The Adam and AdamW refits of a pair: loss against tokens on one axis and the spread of final losses."""
    input:
        unpack(lookup(dpath="{arch}", within=TRAINING_CURVES_INPUTS)),
    output:
        finals=LAYOUT.compare_table_path("{arch}", "optimizer_final_loss"),
        finals_record=LAYOUT.table_record(LAYOUT.compare_table_path("{arch}", "optimizer_final_loss")),
        figure=report(
            LAYOUT.compare_figure_path("{arch}", "optimizer_training_curves"),
            caption="../report/optimizer_training_curves.rst",
            category="Adam vs AdamW (§4.5)",
            subcategory="{arch}",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.compare_figure_path("{arch}", "optimizer_training_curves")),
    log:
        LAYOUT.log("optimizer_training_curves", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        adamw=lookup(dpath="{arch}", within=TRAINED_PAIRS),
        plateau=TRAINING_PLATEAU,
        configuration=lookup(dpath="{arch}", within=PAIR_CONFIGURATIONS),
    script:
        "../scripts/optimizer_training_curves.py"
