# Beyond the paper (docs/beyond_the_paper.md): layer drop and swap across refits, against layer stability.
#
#   layer_drop_swap           {RESULTS}/{arch}/tables/layer_drop_swap.csv  every refit, every drop and swap (GPU)
#   layer_robustness          {RESULTS}/{arch}/tables/layer_robustness.csv, layer_robustness_correlation.csv,
#                             layer_robustness_depth.csv, figures/layer_robustness_stability.png
#   layer_robustness_summary  {RESULTS}/summary/tables/layer_robustness.csv, layer_robustness_depth.csv,
#                             summary/figures/layer_robustness_stages.png
#
# Library: headstab.layer_surgery, headstab.sections.layer_robustness, headstab.plots.layer_robustness
# (docs/beyond_the_paper.md). Held-out text: the validation perplexity's (optimizers.smk).

LAYER_ROBUSTNESS_TABLES = (
    "layer_drop_swap",
    "layer_robustness",
    "layer_robustness_correlation",
    "layer_robustness_depth",
)
LAYER_ROBUSTNESS_TARGETS = {
    arch: [LAYOUT.table_path(arch, name) for name in LAYER_ROBUSTNESS_TABLES]
    + [LAYOUT.figure_path(arch, "layer_robustness_stability")]
    for arch in ARCHITECTURES
}
# Outputs, none for an empty run.
LAYER_ROBUSTNESS_SUMMARY_TARGETS = (
    [LAYOUT.summary_table_path(name) for name in ("layer_robustness", "layer_robustness_depth")]
    + [LAYOUT.summary_figure_path("layer_robustness_stages")]
    if ARCHITECTURES
    else []
)

add_outputs(LAYER_ROBUSTNESS_TARGETS, shared=LAYER_ROBUSTNESS_SUMMARY_TARGETS)


rule layer_drop_swap:
    """Every refit with each layer dropped (its residual update skipped) and each pair of adjacent layers
    swapped, on the first analysis.heldout_tokens held-out tokens: the KL divergence KL(intact || condition) per
    prediction (Lad et al. 2024's measure), top-1 agreement with the intact model and ΔPPL, from the same logits. One intact pass per batch; each condition reruns only the blocks from its first changed layer on.
    Runs the models: a GPU where the run has one."""
    input:
        weights=by_arch("weights"),
        audit=family_audit,
        heldout=lookup(dpath="{arch}", within=HELDOUT_SHARDS),
    output:
        table=LAYOUT.table_path("{arch}", "layer_drop_swap"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "layer_drop_swap")),
    log:
        LAYOUT.log("layer_drop_swap", "{arch}"),
    benchmark:
        LAYOUT.benchmark("layer_drop_swap", "{arch}")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=MODEL_GPUS,
        mem_mb=4000,
        runtime=120,
    params:
        spec=by_arch("refit_spec"),
        heldout_tokens=config["analysis"]["heldout_tokens"],
        batch_size=config["analysis"]["ablation_batch_size"],
        weight_processing=config["analysis"]["weight_processing"],
        device=COMPUTE["device"],
    script:
        "../scripts/layer_drop_swap.py"


rule layer_robustness:
    """Robustness by layer (mean over refits, refits resampled), its correlation with layer stability within
    and across refits, and the relative depth of the most and least robust and stable layers."""
    input:
        drop_swap=LAYOUT.table_path("{arch}", "layer_drop_swap"),
        layer_stability=LAYOUT.table_path("{arch}", "layer_stability"),
        layer_stability_pooled=LAYOUT.table_path("{arch}", "layer_stability_pooled"),
    output:
        table=LAYOUT.table_path("{arch}", "layer_robustness"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "layer_robustness")),
        correlation=LAYOUT.table_path("{arch}", "layer_robustness_correlation"),
        correlation_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "layer_robustness_correlation")),
        depth=LAYOUT.table_path("{arch}", "layer_robustness_depth"),
        depth_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "layer_robustness_depth")),
        figure=report(
            LAYOUT.figure_path("{arch}", "layer_robustness_stability"),
            caption="../report/layer_robustness_stability.rst",
            category="{arch}",
            subcategory="Beyond the paper: layer drop and swap",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "layer_robustness_stability")),
    log:
        LAYOUT.log("layer_robustness", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        configuration=by_arch("configuration"),
        heldout=HELDOUT_LABEL,
        n_layers=lookup(dpath="{arch}/n_layers", within=ARCHITECTURE_FACTS),
        promptset=PRIMARY,
        statistics=STATISTICS,
    script:
        "../scripts/layer_robustness.py"


rule layer_robustness_summary:
    """The "stages" view: drop and swap robustness by relative depth for every architecture, and the depths of
    the most and least robust layers beside the most and least stable ones (§4.6's r = l / L)."""
    input:
        tables=[LAYOUT.table_path(arch, "layer_robustness") for arch in ARCHITECTURES],
        depths=[LAYOUT.table_path(arch, "layer_robustness_depth") for arch in ARCHITECTURES],
    output:
        table=LAYOUT.summary_table_path("layer_robustness"),
        table_record=LAYOUT.table_record(LAYOUT.summary_table_path("layer_robustness")),
        depth=LAYOUT.summary_table_path("layer_robustness_depth"),
        depth_record=LAYOUT.table_record(LAYOUT.summary_table_path("layer_robustness_depth")),
        figure=report(
            LAYOUT.summary_figure_path("layer_robustness_stages"),
            caption="../report/layer_robustness_stages.rst",
            category="Across architectures",
            subcategory="Beyond the paper: layer drop and swap",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.summary_figure_path("layer_robustness_stages")),
    log:
        LAYOUT.log("layer_robustness_summary", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        configuration=RUN_SUMMARY,
        architectures=list(ARCHITECTURES),
    script:
        "../scripts/layer_robustness_summary.py"
