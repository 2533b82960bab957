# Paper §4.6, Fig. 7-8: stability gap and depth of the extreme layers, across architectures.
#
#   stability_gap  {RESULTS}/summary/tables/stability_gap.csv (per anchor, with ΔS under the nulls),
#                  summary/tables/stability_gap_depth.csv ("ΔS widens with depth" tested on ΔS and on its
#                  excess over the layer-label null), summary/figures/stability_gap.png,
#                  summary/figures/extreme_layer_depth.png
#
# Library: headstab.sections.stability_gap, headstab.plots.stability_gap.

LAYER_STABILITY_TABLES = [LAYOUT.table_path(arch, "layer_stability") for arch in ARCHITECTURES]
HEAD_STABILITY_TABLES = [LAYOUT.table_path(arch, "head_stability") for arch in ARCHITECTURES]
# Outputs, none for an empty run.
STABILITY_GAP_TARGETS = (
    [LAYOUT.summary_table_path(name) for name in ("stability_gap", "stability_gap_depth")]
    + [LAYOUT.summary_figure_path(name) for name in ("stability_gap", "extreme_layer_depth")]
    if ARCHITECTURES
    else []
)

add_outputs(shared=STABILITY_GAP_TARGETS)


rule stability_gap:
    """Stability gap ΔS = S_lmax - S_lmin and relative depth r = l/L of the most and least stable layer,
    for every architecture and anchor (paper §4.6, Fig. 7-8), with ΔS when no layer differs (each anchor's
    head stabilities permuted over its layers) and under the prompt-permutation null; ΔS and its excess
    over the layer-label null against depth."""
    input:
        layer_stability=LAYER_STABILITY_TABLES,
        head_stability=HEAD_STABILITY_TABLES,
    output:
        table=LAYOUT.summary_table_path("stability_gap"),
        depth=LAYOUT.summary_table_path("stability_gap_depth"),
        stability_gap=report(
            LAYOUT.summary_figure_path("stability_gap"),
            caption="../report/stability_gap.rst",
            category="Across architectures",
            subcategory="Stability gap (§4.6)",
        ),
        extreme_layer_depth=report(
            LAYOUT.summary_figure_path("extreme_layer_depth"),
            caption="../report/extreme_layer_depth.rst",
            category="Across architectures",
            subcategory="Stability gap (§4.6)",
        ),
    log:
        LAYOUT.log("stability_gap", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        configuration=RUN_SUMMARY,
        architectures=ARCHITECTURE_FACTS,
        promptset=PRIMARY,
        statistics=STATISTICS,
    script:
        "../scripts/stability_gap.py"
