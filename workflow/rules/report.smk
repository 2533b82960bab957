# The HTML report (`snakemake --report {RESULTS}/report.html`): every figure is marked with report(...)
# in its own rule, with a caption under workflow/report/; the front page is workflow/report/workflow.rst
# (the `report:` directive in the Snakefile). This file adds the run's resolved configuration, so a
# reader of the report sees every setting (schema defaults filled in) that produced its figures, and the
# tables behind the figures as pages. Included after targets.smk, whose table lists it renders.

from headstab import report_pages
from headstab.sections import training_label


rule report_configuration:
    """The resolved configuration of this run (schema defaults filled in), shown in the report."""
    output:
        report(
            LAYOUT.report_configuration_path(),
            caption="../report/configuration.rst",
            category="Configuration",
        ),
    log:
        LAYOUT.log("report_configuration", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    params:
        config=config,
    script:
        "../scripts/report_configuration.py"


# The tables behind the figures, one HTML page each (headstab.report_pages), filed under the category and
# subcategory of their figures: <category>/<subcategory>/<name>.html, read back by report(patterns=...).
# The CSV tables the report shows as pages: each architecture's, and the rest (compare/, summary/).
TABLE_SOURCES = {arch: [path for path in ARCHITECTURE_OUTPUTS[arch] if path.endswith(".csv")] for arch in ARCHITECTURES}
SUMMARY_TABLE_SOURCES = [path for path in SHARED_OUTPUTS if path.endswith(".csv")]
REPORT_TABLE_PATTERN = "{category}/{subcategory}/{name}.html"
REPORT_TABLES = {arch: LAYOUT.report_tables_dir(arch) for arch in ARCHITECTURES}
REPORT_TARGETS = list(REPORT_TABLES.values()) + ([LAYOUT.report_tables_dir("summary")] if ARCHITECTURES else [])


rule report_tables:
    """The CSV tables of one architecture as sortable HTML pages for the report (the first rows of each)."""
    input:
        tables=lookup(dpath="{arch}", within=TABLE_SOURCES),
    output:
        report(
            directory(LAYOUT.report_tables_dir("{arch}")),
            patterns=[REPORT_TABLE_PATTERN],
            caption="../report/report_tables.rst",
            category="{category}",
            subcategory="{subcategory}",
        ),
    log:
        LAYOUT.log("report_tables", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        descriptions=report_pages.DESCRIPTIONS,
        max_rows=report_pages.MAX_ROWS,
    script:
        "../scripts/report_tables.py"


rule report_summary_tables:
    """The cross-architecture and Adam/AdamW tables as sortable HTML pages for the report."""
    input:
        tables=SUMMARY_TABLE_SOURCES,
    output:
        report(
            directory(LAYOUT.report_tables_dir("summary")),
            patterns=[REPORT_TABLE_PATTERN],
            caption="../report/report_summary_tables.rst",
            category="{category}",
            subcategory="{subcategory}",
        ),
    log:
        LAYOUT.log("report_summary_tables", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        descriptions=report_pages.DESCRIPTIONS,
        max_rows=report_pages.MAX_ROWS,
    script:
        "../scripts/report_summary_tables.py"


# The report's summary, its first category (the report lists categories alphabetically: a digit sorts first).
SUMMARY_CATEGORY = "1. Summary"
HEADLINE_TABLES = (
    "layer_stability_pooled",
    "layer_stability",
    "stability_gap_intervals",
    "residual_cka_layers",
    "training_final_loss",
)
HEADLINE_SOURCES = [
    path for arch in ARCHITECTURES for path in TABLE_SOURCES[arch] if Path(path).stem in HEADLINE_TABLES
] + [path for path in SUMMARY_TABLE_SOURCES if Path(path).stem in ("optimizer_tests", "weight_norm_correlation")]
HEADLINE_TARGETS = (
    [
        LAYOUT.summary_table_path("headline"),
        LAYOUT.summary_figure_path("layer_stability_by_depth"),
        LAYOUT.headline_dir(),
    ]
    if ARCHITECTURES
    else []
)
REPORT_TARGETS += HEADLINE_TARGETS
# Architectures trained here: their step-0 refits say which head types training put there.
TRAINED_IN_ARCHITECTURES = TRAINED_ARCHITECTURES  # their step-0 refits calibrate the head types
TRAINED_IN_TARGETS = (
    [
        LAYOUT.summary_table_path("trained_in_types"),
        LAYOUT.summary_table_path("head_type_sensitivity"),
        LAYOUT.summary_page("trained_in_types"),
    ]
    if TRAINED_IN_ARCHITECTURES
    else []
)
REPORT_TARGETS += TRAINED_IN_TARGETS
TRAINED_IN_INPUTS = {
    key: [LAYOUT.table_path(arch, name) for arch in TRAINED_IN_ARCHITECTURES]
    for key, name in (
        ("trained", "head_types"),
        ("thresholds", "head_type_thresholds"),
        ("step0", "head_type_scores_step0"),
        ("universality", "head_type_universality"),
        ("scores", "head_type_scores"),
        ("held_out", "head_type_scores_held_out"),
    )
}


rule trained_in_types:
    """Per architecture trained here, layer and head type: the share of trained refits with a head of the type
    against the same refits at step 0 with exact intervals, the exact paired test, and the type's stability above
    the null; the same verdicts under other threshold settings; the report's summary sentence per architecture."""
    input:
        **TRAINED_IN_INPUTS,
    output:
        table=LAYOUT.summary_table_path("trained_in_types"),
        table_record=LAYOUT.table_record(LAYOUT.summary_table_path("trained_in_types")),
        sensitivity=LAYOUT.summary_table_path("head_type_sensitivity"),
        sensitivity_record=LAYOUT.table_record(LAYOUT.summary_table_path("head_type_sensitivity")),
        page=report(
            LAYOUT.summary_page("trained_in_types"),
            caption="../report/trained_in_types.rst",
            category=SUMMARY_CATEGORY,
            subcategory="Head types: trained against step 0",
        ),
    log:
        LAYOUT.log("trained_in_types", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        architectures=TRAINED_IN_ARCHITECTURES,
        training={arch: training_label(SPECS[arch]) for arch in TRAINED_IN_ARCHITECTURES},
        min_share=config["head_types"]["trained_in_share"],
        quantile=config["head_types"]["quantile"],
        sensitivity_quantiles=config["head_types"]["sensitivity_quantiles"],
        floors=config["head_types"]["floors"],
        statistics=STATISTICS,
    script:
        "../scripts/trained_in_types.py"


rule headline_summary:
    """Per architecture the headline numbers (layer stability with interval, null and step-0 baseline; ΔS
    and the depth of its extreme layers; residual CKA; AdamW - Adam; Table B.5's r; final loss) beside
    where the paper reports them, and layer stability against relative depth for all architectures."""
    input:
        tables=HEADLINE_SOURCES,
        paper="resources/paper_values.yaml",
    output:
        table=LAYOUT.summary_table_path("headline"),
        table_record=LAYOUT.table_record(LAYOUT.summary_table_path("headline")),
        figure=report(
            LAYOUT.summary_figure_path("layer_stability_by_depth"),
            caption="../report/layer_stability_by_depth.rst",
            category=SUMMARY_CATEGORY,
            subcategory="All architectures",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.summary_figure_path("layer_stability_by_depth")),
        pages=report(
            directory(LAYOUT.headline_dir()),
            patterns=["{architecture}.html"],
            caption="../report/headline.rst",
            category=SUMMARY_CATEGORY,
            subcategory="Headline numbers per architecture",
        ),
    log:
        LAYOUT.log("headline_summary", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        architectures=ARCHITECTURES,
        facts=ARCHITECTURE_FACTS,
        configurations={arch: ARCH[arch]["configuration"] for arch in ARCHITECTURES},
        pairs=OPTIMIZER_PAIRS,
        anchor_seeds=ANCHOR_SEEDS,
        anchors=config["analysis"]["anchors"],
        promptset=PRIMARY,
        confidence=STATISTICS["confidence"],
        legend=(
            "Rows: statistic and layer (0-based; -1: one number per architecture). estimate with ci_low/ci_high "
            "(interval says which): every refit as anchor, pooled; null: chance level (prompts permuted); init: "
            "the same refits at step 0; p_value: the AdamW - Adam paired jackknife-t test over seeds, with its interval "
            "(small p: the members differ) or, for perplexity, the paired TOST (small p: within the margin), as "
            "interval says; ci_calibration, "
            "p_calibration: the interval and p-value calibrated at the row's refits or descriptive (a description "
            "of spread, no test; docs/statistics.md, Calibration); the closing rows: the effect each claim's test "
            "detects with 80% power at the run's refits; anchor_estimate: the same statistic the "
            "paper's way, the first seed's refit as the only anchor (Table B.5's r with the whole layer's norm); "
            "paper_text: the paper's own number, authors_notebooks: what the authors' notebooks printed "
            "(resources/paper_values.yaml), both for the paper's models at paper scale: a toy-scale run such as "
            "the demo shares their names, not their sizes; paper_source: where the paper reports the statistic."
        ),
    script:
        "../scripts/headline_summary.py"
