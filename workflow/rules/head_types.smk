# Beyond the paper (docs/beyond_the_paper.md): what each head does, and whether the kinds of heads are universal
# across refits. One forward pass per refit on a seeded probe set (repeated spans of vocabulary tokens, not the
# prompt sets); only the scores are kept, no activation cache.
#
#   head_type_scores        {RESULTS}/{arch}/tables/head_type_scores.csv        (every refit; a GPU rule)
#   head_type_scores_step0  {RESULTS}/{arch}/tables/head_type_scores_step0.csv  (the same refits at step 0: trained
#                                                                                architectures only, the thresholds)
#   head_type_tables        {RESULTS}/{arch}/tables/head_types.csv, head_type_thresholds.csv,
#                           head_type_universality.csv, figures/head_types.png
#   head_type_summary       {RESULTS}/summary/tables/head_type_universality.csv, summary/figures/head_types_by_depth.png
#
# Library: headstab.head_types, headstab.sections.head_types, headstab.plots.head_types.

HEAD_TYPE_OPTIONS = config["head_types"]
_too_short = {arch: SPECS[arch].n_ctx for arch in ARCHITECTURES if SPECS[arch].n_ctx < HEAD_TYPE_OPTIONS["length"]}
if _too_short:
    raise WorkflowError(
        f"config key 'head_types.length' is {HEAD_TYPE_OPTIONS['length']} tokens, longer than the context of "
        f"{_too_short} (n_ctx); set it to at most {min(_too_short.values())}"
    )
HEAD_TYPE_CODE = jobs.library_digest("head_types.py", "sharpness.py", "activations/capture.py")
HEAD_TYPE_TABLE_CODE = jobs.library_digest("head_types.py", "sections/head_types.py", "statistics/bootstrap.py")
# Our seed rebuilds only our own refits' initialisation: the others are typed by the fixed thresholds.
HEAD_TYPE_STEP0 = {arch: SOURCES[arch].trained for arch in ARCHITECTURES}
HEAD_TYPE_TABLES = ("head_types", "head_type_thresholds", "head_type_universality")
HEAD_TYPES_TARGETS = {
    arch: [LAYOUT.table_path(arch, "head_type_scores")]
    + ([LAYOUT.table_path(arch, "head_type_scores_step0")] if HEAD_TYPE_STEP0[arch] else [])
    + [LAYOUT.table_path(arch, name) for name in HEAD_TYPE_TABLES]
    + [LAYOUT.figure_path(arch, "head_types")]
    for arch in ARCHITECTURES
}
HEAD_TYPES_SUMMARY_TARGETS = (
    [LAYOUT.summary_table_path("head_type_universality"), LAYOUT.summary_figure_path("head_types_by_depth")]
    if ARCHITECTURES
    else []
)
HEAD_TYPE_JOBS = {
    arch: {
        "step0_weights": [LAYOUT.snapshot_weights(arch, 0, seed) for seed in SEEDS[arch]],
        "mem_mb": resources.head_type_mem_mb(SPECS[arch], HEAD_TYPE_OPTIONS["batch_size"], HEAD_TYPE_OPTIONS["length"]),
        "runtime": resources.head_type_runtime(SPECS[arch], len(SEEDS[arch])),
        "tables": {
            "scores": LAYOUT.table_path(arch, "head_type_scores"),
            "step0": [LAYOUT.table_path(arch, "head_type_scores_step0")] if HEAD_TYPE_STEP0[arch] else [],
            "pair_stability": LAYOUT.table_path(arch, "pair_stability"),
            "head_stability": LAYOUT.table_path(arch, "head_stability"),
            "pooled": LAYOUT.table_path(arch, "layer_stability_pooled"),
        },
    }
    for arch in ARCHITECTURES
}
by_head_types = partial(jobs.WildcardLookup, HEAD_TYPE_JOBS, "arch")

add_outputs(HEAD_TYPES_TARGETS, shared=HEAD_TYPES_SUMMARY_TARGETS)


rule head_type_scores:
    """Previous-token, duplicate-token, induction and BOS scores and the row entropy of every head of every refit
    of {arch} on the probe set: one forward pass per refit, hook_pattern only, stopped after the last block."""
    input:
        weights=by_arch("weights"),
        audit=family_audit,
        tokenizer=by_arch("train_inputs", "tokenizer"),
    output:
        LAYOUT.table_path("{arch}", "head_type_scores"),
    log:
        LAYOUT.log("head_type_scores", "{arch}"),
    benchmark:
        LAYOUT.benchmark("head_type_scores", "{arch}")
    conda:
        CONDA_ENV
    threads: COMPUTE["cache_threads"]
    resources:
        gpu=MODEL_GPUS,
        mem_mb=by_head_types("mem_mb"),
        runtime=by_head_types("runtime"),
    params:
        library=HEAD_TYPE_CODE,
        seeds=by_arch("seeds"),
        spec=by_arch("job_spec"),
        tokenizer_dir=by_arch("tokenizer_dir"),
        prepend_bos=config["cache"]["prepend_bos"],
        probe={key: HEAD_TYPE_OPTIONS[key] for key in ("n_sequences", "length", "seed", "batch_size")},
        weight_processing=config["analysis"]["weight_processing"],
        device=COMPUTE["device"],
    script:
        "../scripts/head_type_scores.py"


use rule head_type_scores as head_type_scores_step0 with:
    input:
        weights=by_head_types("step0_weights"),
        tokenizer=by_arch("train_inputs", "tokenizer"),
    output:
        LAYOUT.table_path("{arch}", "head_type_scores_step0"),
    log:
        LAYOUT.log("head_type_scores_step0", "{arch}"),
    benchmark:
        LAYOUT.benchmark("head_type_scores_step0", "{arch}")
    params:
        spec=by_model_spec(),


rule head_type_tables:
    """The type of every head of every refit, the thresholds behind them, and per layer and type the weak and
    strong universality (best match and one-to-one), stability and above-null, with refit-resampled intervals."""
    input:
        unpack(by_head_types("tables")),
    output:
        types=LAYOUT.table_path("{arch}", "head_types"),
        thresholds=LAYOUT.table_path("{arch}", "head_type_thresholds"),
        universality=LAYOUT.table_path("{arch}", "head_type_universality"),
        figure=report(
            LAYOUT.figure_path("{arch}", "head_types"),
            caption="../report/head_types.rst",
            category="{arch}",
            subcategory="Beyond the paper: head types",
        ),
    log:
        LAYOUT.log("head_type_tables", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("statistics_mem_mb"),
        runtime=20,
    params:
        library=HEAD_TYPE_TABLE_CODE,
        seeds=by_arch("seeds"),
        promptset=PRIMARY,
        quantile=HEAD_TYPE_OPTIONS["quantile"],
        fixed_thresholds=HEAD_TYPE_OPTIONS["fixed_thresholds"],
        statistics=STATISTICS,
        configuration=by_arch("configuration"),
    script:
        "../scripts/head_type_tables.py"


rule head_type_summary:
    """Weak and strong universality of head types for every architecture in one table, and the share of each
    type among a layer's heads against relative depth."""
    input:
        universality=[LAYOUT.table_path(arch, "head_type_universality") for arch in ARCHITECTURES],
    output:
        table=LAYOUT.summary_table_path("head_type_universality"),
        figure=report(
            LAYOUT.summary_figure_path("head_types_by_depth"),
            caption="../report/head_types_by_depth.rst",
            category="Across architectures",
            subcategory="Beyond the paper: head types",
        ),
    log:
        LAYOUT.log("head_type_summary", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        architectures=ARCHITECTURE_FACTS,
        configuration=RUN_SUMMARY,
    script:
        "../scripts/head_type_summary.py"
