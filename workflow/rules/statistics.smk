# Stability against chance, with uncertainty (docs/statistics.md). The intervals, the null and the
# step-0 baseline of every stability table come from rule stability_tables; here:
#
#   seeds_needed          {RESULTS}/{arch}/tables/seeds_needed.csv, seeds_needed_curve.csv, figures/seeds_needed.png
#   optimizer_tests       {RESULTS}/compare/{arch}/tables/optimizer_tests.csv   (§4.5 as tests; {arch} the Adam member)
#   stability_against_chance  {RESULTS}/summary/tables/stability_against_chance.csv, stability_gap_intervals.csv,
#                             summary/figures/stability_against_chance.png   (every architecture)
#   stability_commonness  {RESULTS}/{arch}/tables/stability_commonness.csv   ("least stable yet most distinct",
#                         §4.3 and §5, tested over refits); stability_commonness_summary: summary/tables/
#                         stability_commonness.csv (every architecture, with q-values)
#
# Library: headstab.statistics, headstab.plots.chance.

# The seeds-needed curve starts at 3 refits (a bootstrap of 2 cannot vary them): architectures with fewer have none.
STATISTICS_TARGETS = {
    arch: (
        [LAYOUT.table_path(arch, name) for name in ("seeds_needed", "seeds_needed_curve")]
        + [LAYOUT.figure_path(arch, "seeds_needed")]
        if len(SEEDS[arch]) >= 3
        else []
    )
    for arch in ARCHITECTURES
}
OPTIMIZER_TESTS_TARGETS = [LAYOUT.compare_table_path(arch, "optimizer_tests") for arch in OPTIMIZER_PAIRS]
# Both members' primary prompt groups and validation perplexities, by the Adam member's name.
OPTIMIZER_TEST_INPUTS = {
    arch: {
        key: path
        for role, member in (("adam", arch), ("adamw", adamw))
        for key, path in (
            (role, LAYOUT.grouped_similarity_path(member, PRIMARY)),
            (f"{role}_perplexity", LAYOUT.table_path(member, "validation_perplexity")),
        )
    }
    for arch, adamw in ADAMW_MEMBERS.items()
}
# Refit s of both members trained here starts from the same weights and data order: tested paired
# (docs/statistics.md).
PAIRED_BY_SEED = {
    arch: SOURCES[arch].trained and SOURCES[adamw].trained and paired_by_seed(SPECS[arch], SPECS[adamw])
    for arch, adamw in OPTIMIZER_PAIRS.items()
}
CHANCE_SUMMARY_TARGETS = [
    LAYOUT.summary_table_path("stability_against_chance"),
    LAYOUT.summary_table_path("stability_gap_intervals"),
    LAYOUT.summary_figure_path("stability_against_chance"),
]

STABILITY_COMMONNESS_TARGETS = {arch: [LAYOUT.table_path(arch, "stability_commonness")] for arch in ARCHITECTURES}
STABILITY_COMMONNESS_SUMMARY = [LAYOUT.summary_table_path("stability_commonness")] if ARCHITECTURES else []

add_outputs(STATISTICS_TARGETS, shared=OPTIMIZER_TESTS_TARGETS + CHANCE_SUMMARY_TARGETS)
add_outputs(STABILITY_COMMONNESS_TARGETS, shared=STABILITY_COMMONNESS_SUMMARY)


rule seeds_needed:
    """Interval width of layer stability and of ΔS against the number of refits used (subsets of 2 .. N),
    and the smallest number of refits that reaches statistics.seeds_needed_tolerance."""
    input:
        grouped=LAYOUT.grouped_similarity_path("{arch}", PRIMARY),
    output:
        needed=LAYOUT.table_path("{arch}", "seeds_needed"),
        needed_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "seeds_needed")),
        curve=LAYOUT.table_path("{arch}", "seeds_needed_curve"),
        curve_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "seeds_needed_curve")),
        figure=report(
            LAYOUT.figure_path("{arch}", "seeds_needed"),
            caption="../report/seeds_needed.rst",
            category="Stability against chance",
            subcategory="{arch}",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "seeds_needed")),
    log:
        LAYOUT.log("seeds_needed", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("statistics_mem_mb"),
        runtime=60,
    params:
        library=STATISTICS_CODE,
        statistics=STATISTICS,
    script:
        "../scripts/seeds_needed.py"


rule optimizer_tests:
    """Adam vs AdamW (§4.5) as tests, paired by seed for pairs trained here: per-layer differences of stability,
    of stability above the null and of the content variant, with a paired multi-bootstrap interval and a
    sign-flip test over seeds (unpaired interval and permutation test beside them); perplexity parity as
    a paired equivalence test (TOST); the partial correlation of head stability with the optimizer given
    head entropy."""
    input:
        unpack(jobs.WildcardLookup(OPTIMIZER_TEST_INPUTS, "arch")),
    output:
        table=LAYOUT.compare_table_path("{arch}", "optimizer_tests"),
        table_record=LAYOUT.table_record(LAYOUT.compare_table_path("{arch}", "optimizer_tests")),
    log:
        LAYOUT.log("optimizer_tests", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("statistics_mem_mb"),
        runtime=30,
    params:
        library=OPTIMIZER_TESTS_CODE,
        statistics=STATISTICS,
        paired=jobs.WildcardLookup(PAIRED_BY_SEED, "arch"),
    script:
        "../scripts/optimizer_tests.py"


rule stability_against_chance:
    """Layer stability with interval, null and step-0 baseline, and the stability gap with its interval,
    of every architecture in one table each; the figure of the report's section "Stability against chance"."""
    input:
        pooled=[LAYOUT.table_path(arch, "layer_stability_pooled") for arch in ARCHITECTURES],
        gap=[LAYOUT.table_path(arch, "stability_gap_intervals") for arch in ARCHITECTURES],
    output:
        summary=LAYOUT.summary_table_path("stability_against_chance"),
        summary_record=LAYOUT.table_record(LAYOUT.summary_table_path("stability_against_chance")),
        gap=LAYOUT.summary_table_path("stability_gap_intervals"),
        gap_record=LAYOUT.table_record(LAYOUT.summary_table_path("stability_gap_intervals")),
        figure=report(
            LAYOUT.summary_figure_path("stability_against_chance"),
            caption="../report/stability_against_chance.rst",
            category="Stability against chance",
            subcategory="All architectures",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.summary_figure_path("stability_against_chance")),
    log:
        LAYOUT.log("stability_against_chance", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        architectures=ARCHITECTURES,
        facts=ARCHITECTURE_FACTS,
        promptset=PRIMARY,
        confidence=STATISTICS["confidence"],
    script:
        "../scripts/stability_against_chance.py"


rule stability_commonness:
    """The paper's "least stable yet most distinct" (§4.3, §5) tested jointly: per refit, the partial
    correlation over its layers of stability above its null with commonness without self above its null,
    given the layer's mean head entropy; a one-sided sign-flip test of the refits' mean (primary prompts)."""
    input:
        layer_stability=LAYOUT.table_path("{arch}", "layer_stability"),
        commonness=LAYOUT.table_path("{arch}", "commonness"),
    output:
        table=LAYOUT.table_path("{arch}", "stability_commonness"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "stability_commonness")),
    log:
        LAYOUT.log("stability_commonness", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        library=STABILITY_COMMONNESS_CODE,
        promptset=PRIMARY,
        statistics=STATISTICS,
    script:
        "../scripts/stability_commonness.py"


rule stability_commonness_summary:
    """The joint test of stability and commonness of every architecture in one table, with Benjamini-Hochberg
    q-values over the architectures."""
    input:
        tables=[LAYOUT.table_path(arch, "stability_commonness") for arch in ARCHITECTURES],
    output:
        table=LAYOUT.summary_table_path("stability_commonness"),
        table_record=LAYOUT.table_record(LAYOUT.summary_table_path("stability_commonness")),
    log:
        LAYOUT.log("stability_commonness_summary", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        library=STABILITY_COMMONNESS_CODE,
        architectures=ARCHITECTURES,
    script:
        "../scripts/stability_commonness_summary.py"
