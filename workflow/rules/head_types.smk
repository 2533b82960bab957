# Beyond the paper (docs/beyond_the_paper.md): what each head does, and whether the kinds of heads are universal
# across refits. One forward pass per refit on a seeded probe set (repeated spans of vocabulary tokens, not the
# prompt sets); only the scores are kept, no activation cache.
#
#   head_type_scores           {RESULTS}/{arch}/tables/head_type_scores.csv           (every refit; a GPU rule)
#   head_type_scores_step0     {RESULTS}/{arch}/tables/head_type_scores_step0.csv     (the same refits at step 0:
#                                                                                      trained architectures only)
#   head_type_scores_held_out  {RESULTS}/{arch}/tables/head_type_scores_held_out.csv  (head_types.held_out_draws more
#                                                                                      initialisations, built in memory:
#                                                                                      trained architectures only)
#   head_type_thresholds       {RESULTS}/{arch}/tables/head_type_thresholds.csv       (per layer and score: calibrated
#                                                                                      on the held-out draws, or fixed)
#   head_type_tables           {RESULTS}/{arch}/tables/head_types.csv, head_type_universality.csv, figures/head_types.png
#   head_type_summary          {RESULTS}/summary/tables/head_type_universality.csv, summary/figures/head_types_by_depth.png
#
# Library: headstab.head_types, headstab.head_type_thresholds, headstab.sections.head_types, headstab.plots.head_types.

from headstab.plan.seed_design import held_out_seeds

HEAD_TYPE_OPTIONS = config["head_types"]
_too_short = {arch: SPECS[arch].n_ctx for arch in ARCHITECTURES if SPECS[arch].n_ctx < HEAD_TYPE_OPTIONS["length"]}
if _too_short:
    raise WorkflowError(
        f"config key 'head_types.length' is {HEAD_TYPE_OPTIONS['length']} tokens, longer than the context of "
        f"{_too_short} (n_ctx); set it to at most {min(_too_short.values())}"
    )
HEAD_TYPE_CODE = jobs.library_digest("head_types.py", "sharpness.py", "activations/capture.py")
HEAD_TYPE_THRESHOLD_CODE = jobs.library_digest("head_types.py", "head_type_thresholds.py")
HEAD_TYPE_TABLE_CODE = jobs.library_digest(
    "head_type_thresholds.py", "sections/head_types.py", "statistics/bootstrap.py", "statistics/binomial.py"
)
# Our seed rebuilds only our own refits' initialisation: the others are typed by the fixed thresholds.
HEAD_TYPE_STEP0 = {arch: SOURCES[arch].trained for arch in ARCHITECTURES}
try:
    # Never a refit's seed: the draws calibrate the thresholds that the refits' step 0 is compared with.
    HELD_OUT_SEEDS = held_out_seeds(
        HEAD_TYPE_OPTIONS["held_out_first_seed"],
        HEAD_TYPE_OPTIONS["held_out_draws"],
        {arch: [refit_seeds(refit)[0] for refit in SEEDS[arch]] for arch in SELECTED_ARCHITECTURES},
    )
except ValueError as error:
    raise WorkflowError(f"Invalid configuration: {error}") from None
if HEAD_TYPE_OPTIONS["quantile"] not in HEAD_TYPE_OPTIONS["sensitivity_quantiles"]:
    raise WorkflowError(
        f"Invalid configuration: config key 'head_types.sensitivity_quantiles' {HEAD_TYPE_OPTIONS['sensitivity_quantiles']} "
        f"must include head_types.quantile ({HEAD_TYPE_OPTIONS['quantile']}), the setting the others are compared with"
    )
HEAD_TYPE_TABLES = ("head_types", "head_type_thresholds", "head_type_universality")
HEAD_TYPES_TARGETS = {
    arch: [LAYOUT.table_path(arch, "head_type_scores")]
    + (
        [LAYOUT.table_path(arch, name) for name in ("head_type_scores_step0", "head_type_scores_held_out")]
        if HEAD_TYPE_STEP0[arch]
        else []
    )
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
        "held_out_runtime": resources.head_type_runtime(SPECS[arch], len(HELD_OUT_SEEDS)),
        "held_out": [LAYOUT.table_path(arch, "head_type_scores_held_out")] if HEAD_TYPE_STEP0[arch] else [],
        "tables": {
            "scores": LAYOUT.table_path(arch, "head_type_scores"),
            "thresholds": LAYOUT.table_path(arch, "head_type_thresholds"),
            "pair_stability": LAYOUT.table_path(arch, "pair_stability"),
            "head_stability": LAYOUT.table_path(arch, "head_stability"),
            "pooled": LAYOUT.table_path(arch, "layer_stability_pooled"),
        },
    }
    for arch in ARCHITECTURES
}
by_head_types = partial(jobs.WildcardLookup, HEAD_TYPE_JOBS, "arch")
PROBE_OPTIONS = {key: HEAD_TYPE_OPTIONS[key] for key in ("n_sequences", "length", "seed", "batch_size")}

add_outputs(HEAD_TYPES_TARGETS, shared=HEAD_TYPES_SUMMARY_TARGETS)


rule head_type_scores:
    """Previous-token, duplicate-token, induction and BOS scores, the row entropy and the OV circuit's copying score
    of every head of every refit of {arch} on the probe set: one forward pass per refit, hook_pattern only, stopped
    after the last block."""
    input:
        weights=by_arch("weights"),
        audit=family_audit,
        tokenizer=by_arch("train_inputs", "tokenizer"),
    output:
        LAYOUT.table_path("{arch}", "head_type_scores"),
        LAYOUT.table_record(LAYOUT.table_path("{arch}", "head_type_scores")),
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
        probe=PROBE_OPTIONS,
        weight_processing=config["analysis"]["weight_processing"],
        device=COMPUTE["device"],
        held_out_seeds=[],
    script:
        "../scripts/head_type_scores.py"


use rule head_type_scores as head_type_scores_step0 with:
    input:
        weights=by_head_types("step0_weights"),
        tokenizer=by_arch("train_inputs", "tokenizer"),
    output:
        LAYOUT.table_path("{arch}", "head_type_scores_step0"),
        LAYOUT.table_record(LAYOUT.table_path("{arch}", "head_type_scores_step0")),
    log:
        LAYOUT.log("head_type_scores_step0", "{arch}"),
    benchmark:
        LAYOUT.benchmark("head_type_scores_step0", "{arch}")
    params:
        spec=by_model_spec(),


use rule head_type_scores as head_type_scores_held_out with:
    input:
        tokenizer=by_arch("train_inputs", "tokenizer"),
    output:
        LAYOUT.table_path("{arch}", "head_type_scores_held_out"),
        LAYOUT.table_record(LAYOUT.table_path("{arch}", "head_type_scores_held_out")),
    log:
        LAYOUT.log("head_type_scores_held_out", "{arch}"),
    benchmark:
        LAYOUT.benchmark("head_type_scores_held_out", "{arch}")
    resources:
        gpu=MODEL_GPUS,
        mem_mb=by_head_types("mem_mb"),
        runtime=by_head_types("held_out_runtime"),
    params:
        spec=by_model_spec(),
        held_out_seeds=HELD_OUT_SEEDS,


rule head_type_thresholds:
    """Per layer and score, the threshold a head of {arch} must exceed to have a type: the quantile of the layer's
    maximum over the held-out initialisations, raised to the floor (trained here), or the fixed thresholds
    (published, hub); beside each, the score of even attention on the probe set."""
    input:
        tokenizer=by_arch("train_inputs", "tokenizer"),
        held_out=by_head_types("held_out"),
    output:
        LAYOUT.table_path("{arch}", "head_type_thresholds"),
        LAYOUT.table_record(LAYOUT.table_path("{arch}", "head_type_thresholds")),
    log:
        LAYOUT.log("head_type_thresholds", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        library=HEAD_TYPE_THRESHOLD_CODE,
        n_layers=by_arch("n_layers"),
        d_vocab=by_arch("d_vocab"),
        tokenizer_dir=by_arch("tokenizer_dir"),
        prepend_bos=config["cache"]["prepend_bos"],
        probe=PROBE_OPTIONS,
        quantile=HEAD_TYPE_OPTIONS["quantile"],
        floors=HEAD_TYPE_OPTIONS["floors"],
        fixed_thresholds=HEAD_TYPE_OPTIONS["fixed_thresholds"],
    script:
        "../scripts/head_type_thresholds.py"


rule head_type_tables:
    """The type of every head of every refit by its layer's thresholds, and per layer and type the weak and strong
    universality (best match and one-to-one, raw and chance-corrected), stability and above-null, with intervals."""
    input:
        unpack(by_head_types("tables")),
    output:
        types=LAYOUT.table_path("{arch}", "head_types"),
        types_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "head_types")),
        universality=LAYOUT.table_path("{arch}", "head_type_universality"),
        universality_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "head_type_universality")),
        figure=report(
            LAYOUT.figure_path("{arch}", "head_types"),
            caption="../report/head_types.rst",
            category="{arch}",
            subcategory="Beyond the paper: head types",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "head_types")),
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
        table_record=LAYOUT.table_record(LAYOUT.summary_table_path("head_type_universality")),
        figure=report(
            LAYOUT.summary_figure_path("head_types_by_depth"),
            caption="../report/head_types_by_depth.rst",
            category="Across architectures",
            subcategory="Beyond the paper: head types",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.summary_figure_path("head_types_by_depth")),
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
