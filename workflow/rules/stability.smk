# Stability (paper §3.2-3.3, §4.1-4.3, §A.5-A.6): head-, layer- and cross-layer-wise stability,
# alignment maps and commonness from the pair-similarity tensors.
#
#   stability_tables   {RESULTS}/{arch}/tables/{pair,head,layer}_stability.csv, alignment_map.csv,
#                      alignment_dispersion.csv, commonness.csv   (every prompt set, every anchor), with
#                      intervals, null and step-0 baseline (headstab.statistics, docs/statistics.md);
#                      layer_stability_pooled.csv: per layer over all refits
#   stability_figures  {RESULTS}/{arch}/figures/*.png             (Fig. 2-4, 12/A.5, 20; primary prompts)
#
# Library: headstab.stability, headstab.plots.stability. Paper §4.4-4.9: one rule file per section.

STABILITY_TABLES = (
    "pair_stability",
    "head_stability",
    "layer_stability",
    "alignment_map",
    "alignment_dispersion",
    "commonness",
    "layer_stability_pooled",
    "stability_gap_intervals",
)
STABILITY_FIGURES = (
    "head_stability",
    "layer_stability",
    "pair_stability",
    "cross_layer_stability",
    "alignment_map",
    "commonness",
)
STABILITY_TARGETS = {
    arch: [LAYOUT.table_path(arch, name) for name in STABILITY_TABLES]
    + [LAYOUT.figure_path(arch, name) for name in STABILITY_FIGURES]
    for arch in ARCHITECTURES
}

add_outputs(STABILITY_TARGETS)


rule stability_tables:
    """Head-, layer-, cross-layer-wise stability, alignment maps and commonness, every refit as anchor
    (Eq. 3-5, §3.3, §4.2, Eq. 10)."""
    input:
        similarity=by_arch("similarities"),
        grouped=by_arch("grouped_similarities"),
        init=by_arch("init_grouped_similarities"),
    output:
        **{name: LAYOUT.table_path("{arch}", name) for name in STABILITY_TABLES},
        **{f"{name}_record": LAYOUT.table_record(LAYOUT.table_path("{arch}", name)) for name in STABILITY_TABLES},
    log:
        LAYOUT.log("stability_tables", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("statistics_mem_mb"),
        runtime=30,
    params:
        library=STATISTICS_CODE,
        promptsets=PROMPT_SETS,
        layer_std_ddof=config["analysis"]["layer_std_ddof"],
        alignment_self_match=config["analysis"]["alignment_self_match"],
        statistics=STATISTICS,
    script:
        "../scripts/stability_tables.py"


rule stability_figures:
    """Figures 2-4, 12/A.5 and 20 of the paper for one architecture (primary prompt set)."""
    input:
        **{name: LAYOUT.table_path("{arch}", name) for name in STABILITY_TABLES},
    output:
        head_stability=report(
            LAYOUT.figure_path("{arch}", "head_stability"),
            caption="../report/head_stability.rst",
            category="{arch}",
            subcategory="Stability (§4.1)",
        ),
        head_stability_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "head_stability")),
        layer_stability=report(
            LAYOUT.figure_path("{arch}", "layer_stability"),
            caption="../report/layer_stability.rst",
            category="{arch}",
            subcategory="Stability (§4.1)",
        ),
        layer_stability_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "layer_stability")),
        pair_stability=report(
            LAYOUT.figure_path("{arch}", "pair_stability"),
            caption="../report/pair_stability.rst",
            category="{arch}",
            subcategory="Stability (§4.1)",
        ),
        pair_stability_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "pair_stability")),
        cross_layer_stability=report(
            LAYOUT.figure_path("{arch}", "cross_layer_stability"),
            caption="../report/cross_layer_stability.rst",
            category="{arch}",
            subcategory="Cross-layer (§4.2)",
        ),
        cross_layer_stability_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "cross_layer_stability")),
        alignment_map=report(
            LAYOUT.figure_path("{arch}", "alignment_map"),
            caption="../report/alignment_map.rst",
            category="{arch}",
            subcategory="Cross-layer (§4.2)",
        ),
        alignment_map_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "alignment_map")),
        commonness=report(
            LAYOUT.figure_path("{arch}", "commonness"),
            caption="../report/commonness.rst",
            category="{arch}",
            subcategory="Within-layer (§4.3)",
        ),
        commonness_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "commonness")),
    log:
        LAYOUT.log("stability_figures", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=20,
    params:
        promptset=PRIMARY,
    script:
        "../scripts/stability_figures.py"
