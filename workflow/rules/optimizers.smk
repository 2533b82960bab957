# Paper §4.5, Fig. 6 / B.6, Fig. 35, §B.7 figures: Adam vs AdamW.
#
#   validation_perplexity  {RESULTS}/{arch}/tables/validation_perplexity.csv  every refit on held-out text (GPU)
#   activation_norms       {RESULTS}/{arch}/tables/activation_norms.csv       from the caches and W_O
#   optimizer_comparison   {RESULTS}/compare/{arch}/...  ({arch} = the Adam member, {arch}_wd the AdamW one)
#
# Library: headstab.sections.optimizers, headstab.evaluation, headstab.plots.optimizers.

OPTIMIZERS_TARGETS = {
    arch: [LAYOUT.table_path(arch, "validation_perplexity"), LAYOUT.table_path(arch, "activation_norms")]
    for arch in ARCHITECTURES
}
OPTIMIZERS_COMPARISON_TARGETS = [
    path
    for arch in OPTIMIZER_PAIRS
    for path in [LAYOUT.compare_table_path(arch, "perplexity")]
    + [LAYOUT.compare_figure_path(arch, name) for name in ("optimizer_stability", "activation_norms", "perplexity")]
]
# A comparison asked of an architecture without its AdamW member stops at that member's missing tables.
PAIR_INPUTS = {
    arch: {
        f"{role}_{name}": LAYOUT.table_path(member, name)
        for role, member in (("adam", arch), ("adamw", adamw))
        for name in ("layer_stability", "activation_norms", "validation_perplexity")
    }
    for arch, adamw in ADAMW_MEMBERS.items()
}

add_outputs(OPTIMIZERS_TARGETS, shared=OPTIMIZERS_COMPARISON_TARGETS)


rule validation_perplexity:
    """Validation perplexity of every refit (paper §4.5, §B.7 figures) on the first analysis.heldout_tokens
    tokens of held-out text in seq_len windows, weights processed as the caches were
    (analysis.weight_processing). Runs the models: a GPU where the run has one."""
    input:
        weights=by_arch("weights"),
        audit=family_audit,
        heldout=lookup(dpath="{arch}", within=HELDOUT_SHARDS),
    output:
        table=LAYOUT.table_path("{arch}", "validation_perplexity"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "validation_perplexity")),
    log:
        LAYOUT.log("validation_perplexity", "{arch}"),
    benchmark:
        LAYOUT.benchmark("validation_perplexity", "{arch}")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=MODEL_GPUS,
        mem_mb=4000,
        runtime=60,
    params:
        spec=by_arch("refit_spec"),
        heldout_tokens=config["analysis"]["heldout_tokens"],
        batch_size=config["analysis"]["ablation_batch_size"],
        weight_processing=config["analysis"]["weight_processing"],
        device=COMPUTE["device"],
    script:
        "../scripts/validation_perplexity.py"


rule activation_norms:
    """Mean per-token norms of the attention output (cached hook_z x W_O + b_O, weights processed as the
    caches were) and of resid_mid, per layer of every refit, padding excluded (paper §4.5, Fig. 35).
    CPU only."""
    input:
        weights=by_arch("weights"),
        audit=family_audit,
        caches=by_arch("caches"),
    output:
        table=LAYOUT.table_path("{arch}", "activation_norms"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "activation_norms")),
    log:
        LAYOUT.log("activation_norms", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        spec=by_arch("refit_spec"),
        promptset=PRIMARY,
        weight_processing=config["analysis"]["weight_processing"],
    script:
        "../scripts/activation_norms.py"


rule optimizer_comparison:
    """Adam vs AdamW (paper §4.5): layer-wise stability side by side (Fig. 6 / B.6), attention-output
    and resid_mid norms (Fig. 35), and the refits' validation perplexities with mean, spread and two
    two-sided difference tests, Welch's and Brunner-Munzel's (§B.7 figures; parity is optimizer_tests' TOST)."""
    input:
        unpack(lookup(dpath="{arch}", within=PAIR_INPUTS)),
    output:
        perplexity=LAYOUT.compare_table_path("{arch}", "perplexity"),
        perplexity_record=LAYOUT.table_record(LAYOUT.compare_table_path("{arch}", "perplexity")),
        optimizer_stability=report(
            LAYOUT.compare_figure_path("{arch}", "optimizer_stability"),
            caption="../report/optimizer_stability.rst",
            category="Adam vs AdamW (§4.5)",
            subcategory="{arch}",
        ),
        optimizer_stability_record=LAYOUT.figure_record(LAYOUT.compare_figure_path("{arch}", "optimizer_stability")),
        activation_norms=report(
            LAYOUT.compare_figure_path("{arch}", "activation_norms"),
            caption="../report/activation_norms.rst",
            category="Adam vs AdamW (§4.5)",
            subcategory="{arch}",
        ),
        activation_norms_record=LAYOUT.figure_record(LAYOUT.compare_figure_path("{arch}", "activation_norms")),
        perplexity_figure=report(
            LAYOUT.compare_figure_path("{arch}", "perplexity"),
            caption="../report/perplexity.rst",
            category="Adam vs AdamW (§4.5)",
            subcategory="{arch}",
        ),
        perplexity_figure_record=LAYOUT.figure_record(LAYOUT.compare_figure_path("{arch}", "perplexity")),
    log:
        LAYOUT.log("optimizer_comparison", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        configuration=lookup(dpath="{arch}", within=PAIR_CONFIGURATIONS),
        adamw=lookup(dpath="{arch}", within=ADAMW_MEMBERS),
        promptset=PRIMARY,
        heldout_label=HELDOUT_LABEL,
        statistics=STATISTICS,  # the rank test's permutations and seed
    script:
        "../scripts/optimizer_comparison.py"
