# Paper §4.1, §4.6, Fig. 7-8: stability gap, depth of the extreme layers, and the layer tests, across architectures.
#
#   layer_pseudo_values  {RESULTS}/{arch}/tables/layer_pseudo_values.csv (each refit's jackknife pseudo-value of
#                        pooled layer stability, raw and above its prompt-permutation null: the refits as units)
#   stability_gap        {RESULTS}/summary/tables/stability_gap.csv (per anchor, with ΔS of the nulls),
#                        summary/tables/layer_tests.csv (do the layers differ, is the dip at mid-depth: refits as
#                        units), summary/tables/stability_gap_depth.csv (against depth: architectures as units),
#                        summary/figures/stability_gap.png, summary/figures/extreme_layer_depth.png
#
# Library: headstab.sections.stability_gap, headstab.statistics.layer_tests, headstab.plots.stability_gap.

LAYER_STABILITY_TABLES = [LAYOUT.table_path(arch, "layer_stability") for arch in ARCHITECTURES]
LAYER_PSEUDO_VALUE_TABLES = [LAYOUT.table_path(arch, "layer_pseudo_values") for arch in ARCHITECTURES]
# In the params of the rules whose numbers this code computes: editing it reruns them.
LAYER_TESTS_CODE = jobs.library_digest("statistics", "sections/stability_gap.py", "sections/optimizer_tests.py")
# Outputs, none for an empty run.
STABILITY_GAP_TARGETS = (
    [LAYOUT.summary_table_path(name) for name in ("stability_gap", "layer_tests", "stability_gap_depth")]
    + [LAYOUT.summary_figure_path(name) for name in ("stability_gap", "extreme_layer_depth")]
    if ARCHITECTURES
    else []
)

add_outputs(
    {arch: [LAYOUT.table_path(arch, "layer_pseudo_values")] for arch in ARCHITECTURES},
    shared=STABILITY_GAP_TARGETS,
)


rule layer_pseudo_values:
    """Per refit and layer, the jackknife pseudo-value of pooled layer stability (raw, above the prompt-permutation
    null, and of the content variant) from the primary prompt groups: what the layer tests take as units."""
    input:
        grouped=LAYOUT.grouped_similarity_path("{arch}", PRIMARY),
    output:
        table=LAYOUT.table_path("{arch}", "layer_pseudo_values"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "layer_pseudo_values")),
    log:
        LAYOUT.log("layer_pseudo_values", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("statistics_mem_mb"),
        runtime=10,
    params:
        library=LAYER_TESTS_CODE,
    script:
        "../scripts/layer_pseudo_values.py"


rule stability_gap:
    """Stability gap ΔS = S_lmax - S_lmin and relative depth r = l/L of the most and least stable layer,
    for every architecture and anchor (paper §4.6, Fig. 7-8), with ΔS of the prompt-permutation null and of
    stability above it; the layer tests with refits as units (do the layers differ beyond chance, are the
    interior layers below the end layers: §4.1, §4.6), and the mid-depth dip against depth, architectures
    as units."""
    input:
        layer_stability=LAYER_STABILITY_TABLES,
        pseudo_values=LAYER_PSEUDO_VALUE_TABLES,
    output:
        table=LAYOUT.summary_table_path("stability_gap"),
        table_record=LAYOUT.table_record(LAYOUT.summary_table_path("stability_gap")),
        layer_tests=LAYOUT.summary_table_path("layer_tests"),
        layer_tests_record=LAYOUT.table_record(LAYOUT.summary_table_path("layer_tests")),
        depth=LAYOUT.summary_table_path("stability_gap_depth"),
        depth_record=LAYOUT.table_record(LAYOUT.summary_table_path("stability_gap_depth")),
        stability_gap=report(
            LAYOUT.summary_figure_path("stability_gap"),
            caption="../report/stability_gap.rst",
            category="Across architectures",
            subcategory="Stability gap (§4.6)",
        ),
        stability_gap_record=LAYOUT.figure_record(LAYOUT.summary_figure_path("stability_gap")),
        extreme_layer_depth=report(
            LAYOUT.summary_figure_path("extreme_layer_depth"),
            caption="../report/extreme_layer_depth.rst",
            category="Across architectures",
            subcategory="Stability gap (§4.6)",
        ),
        extreme_layer_depth_record=LAYOUT.figure_record(LAYOUT.summary_figure_path("extreme_layer_depth")),
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
        library=LAYER_TESTS_CODE,
    script:
        "../scripts/stability_gap.py"
