# Beyond the paper (docs/beyond_the_paper.md): per-head effective rank (participation ratio of hook_z) across
# refits and against head stability. No forward pass: the caches hold hook_z.
#
#   effective_rank          {RESULTS}/{arch}/tables/effective_rank.csv, effective_rank_matched.csv,
#                           effective_rank_correlation.csv, figures/effective_rank_stability.png
#   effective_rank_summary  {RESULTS}/summary/tables/effective_rank.csv, summary/figures/effective_rank_by_layer.png
#
# Library: headstab.sections.effective_rank, headstab.plots.effective_rank (docs/beyond_the_paper.md).

EFFECTIVE_RANK_TABLES = ("effective_rank", "effective_rank_matched", "effective_rank_correlation")
EFFECTIVE_RANK_TARGETS = {
    arch: [LAYOUT.table_path(arch, name) for name in EFFECTIVE_RANK_TABLES]
    + [LAYOUT.figure_path(arch, "effective_rank_stability")]
    for arch in ARCHITECTURES
}
# Outputs, none for an empty run.
EFFECTIVE_RANK_SUMMARY_TARGETS = (
    [LAYOUT.summary_table_path("effective_rank"), LAYOUT.summary_figure_path("effective_rank_by_layer")]
    if ARCHITECTURES
    else []
)

add_outputs(EFFECTIVE_RANK_TARGETS, shared=EFFECTIVE_RANK_SUMMARY_TARGETS)


rule effective_rank:
    """Participation ratio PR = exp(H(σ²/Σσ²)) of every head's centred hook_z over the primary prompts' real
    positions (and the last position alone), per refit; the anchor head's PR beside its best match's; per
    layer its correlation with head stability, refits resampled."""
    input:
        caches=by_arch("caches"),
        pair_stability=LAYOUT.table_path("{arch}", "pair_stability"),
        head_stability=LAYOUT.table_path("{arch}", "head_stability"),
    output:
        table=LAYOUT.table_path("{arch}", "effective_rank"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "effective_rank")),
        matched=LAYOUT.table_path("{arch}", "effective_rank_matched"),
        matched_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "effective_rank_matched")),
        correlation=LAYOUT.table_path("{arch}", "effective_rank_correlation"),
        correlation_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "effective_rank_correlation")),
        figure=report(
            LAYOUT.figure_path("{arch}", "effective_rank_stability"),
            caption="../report/effective_rank_stability.rst",
            category="{arch}",
            subcategory="Beyond the paper: effective rank",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "effective_rank_stability")),
    log:
        LAYOUT.log("effective_rank", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("statistics_mem_mb"),
        runtime=20,
    params:
        seeds=by_arch("seeds"),
        configuration=by_arch("configuration"),
        promptset=PRIMARY,
        include_bos=config["analysis"]["effective_rank_include_bos"],
        statistics=STATISTICS,
    script:
        "../scripts/effective_rank.py"


rule effective_rank_summary:
    """PR by layer for every architecture, one panel per family (MLP or attention-only, optimizer)."""
    input:
        correlation=[LAYOUT.table_path(arch, "effective_rank_correlation") for arch in ARCHITECTURES],
    output:
        table=LAYOUT.summary_table_path("effective_rank"),
        table_record=LAYOUT.table_record(LAYOUT.summary_table_path("effective_rank")),
        figure=report(
            LAYOUT.summary_figure_path("effective_rank_by_layer"),
            caption="../report/effective_rank_by_layer.rst",
            category="Across architectures",
            subcategory="Beyond the paper: effective rank",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.summary_figure_path("effective_rank_by_layer")),
    log:
        LAYOUT.log("effective_rank_summary", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        configuration=RUN_SUMMARY,
        architectures=ARCHITECTURE_FACTS,
    script:
        "../scripts/effective_rank_summary.py"
