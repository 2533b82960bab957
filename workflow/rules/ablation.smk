# Paper §4.8, Fig. 10 / B.9: head ablation importance vs head stability.
#
#   ablation_perplexity  {RESULTS}/{arch}/tables/ablation_perplexity.csv  the anchor(s), each head zeroed (GPU)
#   ablation             {RESULTS}/{arch}/tables/ablation.csv, ablation_correlation.csv,
#                        figures/ablation_correlation.png
#
# Library: headstab.sections.ablation, headstab.evaluation, headstab.plots.ablation.


ABLATION_TARGETS = {
    arch: [LAYOUT.table_path(arch, name) for name in ("ablation_perplexity", "ablation", "ablation_correlation")]
    + [LAYOUT.figure_path(arch, "ablation_correlation")]
    for arch in ARCHITECTURES
}
# The ablated anchors' weights and caches (the prompts' tokens come from them: nothing is re-tokenized).
ANCHOR_REFITS = {
    arch: {
        "weights": [LAYOUT.final_weights(arch, seed) for seed in ARCH[arch]["ablation_seeds"]],
        "caches": [LAYOUT.cache_path(arch, seed) for seed in ARCH[arch]["ablation_seeds"]],
    }
    for arch in ARCHITECTURES
}

add_outputs(ABLATION_TARGETS)


rule ablation_perplexity:
    """The anchor refits' perplexity on the primary prompts, unablated and with each head's hook_z zeroed
    in turn (paper §4.8; the first seed, and more with analysis.ablation_anchors), weights processed as the
    caches were (analysis.weight_processing). Runs the models: a GPU where the run has one."""
    input:
        unpack(lookup(dpath="{arch}", within=ANCHOR_REFITS)),
        audit=family_audit,
    output:
        table=LAYOUT.table_path("{arch}", "ablation_perplexity"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "ablation_perplexity")),
    log:
        LAYOUT.log("ablation_perplexity", "{arch}"),
    benchmark:
        LAYOUT.benchmark("ablation_perplexity", "{arch}")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=MODEL_GPUS,
        mem_mb=4000,
        runtime=by_arch("ablation_runtime"),
    params:
        spec=by_arch("refit_spec"),
        anchor_seeds=by_arch("ablation_seeds"),
        promptset=PRIMARY,
        batch_size=config["analysis"]["ablation_batch_size"],
        weight_processing=config["analysis"]["weight_processing"],
        device=COMPUTE["device"],
    script:
        "../scripts/ablation_perplexity.py"


rule ablation:
    """Ablation importance vs head stability (paper §4.8, Fig. 10 / B.9): ΔPPL = ablated - baseline per
    head of the anchor refit, the per-layer Pearson and Spearman correlation with head stability (also
    pooled over the ablated anchors) and the linear trend of Pearson's r across layers."""
    input:
        ablation_perplexity=LAYOUT.table_path("{arch}", "ablation_perplexity"),
        head_stability=LAYOUT.table_path("{arch}", "head_stability"),
    output:
        table=LAYOUT.table_path("{arch}", "ablation"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "ablation")),
        correlation=LAYOUT.table_path("{arch}", "ablation_correlation"),
        correlation_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "ablation_correlation")),
        figure=report(
            LAYOUT.figure_path("{arch}", "ablation_correlation"),
            caption="../report/ablation_correlation.rst",
            category="{arch}",
            subcategory="Ablation (§4.8)",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "ablation_correlation")),
    log:
        LAYOUT.log("ablation", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        configuration=by_arch("configuration"),
        promptset=PRIMARY,
        statistics=STATISTICS,  # the per-layer interval (heads resampled) and permutation p-values
    script:
        "../scripts/ablation.py"
