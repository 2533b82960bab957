# Beyond the paper (docs/beyond_the_paper.md, "Noise ceiling"): how well head typing agrees within one refit, and
# cross-seed type agreement divided by it. Each refit is typed on two disjoint halves of the head-type probe set
# (head_types.seed; noise_ceiling.n_sequences sequences, by default head_types.n_sequences). Head stability needs
# no such pass: a refit against itself is 1 on every prompt.
#
#   noise_ceiling_scores  {RESULTS}/{arch}/tables/noise_ceiling_scores.csv  (every refit on both halves; a GPU rule)
#   noise_ceiling_tables  {RESULTS}/{arch}/tables/noise_ceiling.csv, figures/noise_ceiling.png
#
# Library: headstab.sections.noise_ceiling, headstab.plots.noise_ceiling (the scores: headstab.head_types).

CEILING_PROBE = {key: config["head_types"][key] for key in ("n_sequences", "length", "seed", "batch_size")}
CEILING_PROBE["n_sequences"] = config["noise_ceiling"]["n_sequences"] or CEILING_PROBE["n_sequences"]
if CEILING_PROBE["n_sequences"] < 2:
    raise WorkflowError(
        f"config key 'head_types.n_sequences' is {CEILING_PROBE['n_sequences']}: the noise ceiling splits the probe "
        "set into two halves; set noise_ceiling.n_sequences to at least 2"
    )
CEILING_SCORE_CODE = jobs.library_digest("head_types.py", "sharpness.py", "activations/capture.py")
CEILING_TABLE_CODE = jobs.library_digest(
    "head_type_thresholds.py", "sections/noise_ceiling.py", "statistics/bootstrap.py", "plots/noise_ceiling.py"
)
NOISE_CEILING_TARGETS = {
    arch: [LAYOUT.table_path(arch, name) for name in ("noise_ceiling_scores", "noise_ceiling")]
    + [LAYOUT.figure_path(arch, "noise_ceiling")]
    for arch in ARCHITECTURES
}
NOISE_CEILING_JOBS = {
    arch: {
        "mem_mb": resources.head_type_mem_mb(SPECS[arch], CEILING_PROBE["batch_size"], CEILING_PROBE["length"]),
        "runtime": resources.head_type_runtime(SPECS[arch], len(SEEDS[arch])),
        "tables": {
            "scores": LAYOUT.table_path(arch, "noise_ceiling_scores"),
            "thresholds": LAYOUT.table_path(arch, "head_type_thresholds"),
            "pair_stability": LAYOUT.table_path(arch, "pair_stability"),
            "pooled": LAYOUT.table_path(arch, "layer_stability_pooled"),
        },
    }
    for arch in ARCHITECTURES
}
by_noise_ceiling = partial(jobs.WildcardLookup, NOISE_CEILING_JOBS, "arch")

add_outputs(NOISE_CEILING_TARGETS)


rule noise_ceiling_scores:
    """The head-type scores of every head of every refit of {arch} on each of two disjoint halves of the probe set:
    hook_pattern only, stopped after the last block; the copying score reads the weights, the same on both halves."""
    input:
        weights=by_arch("weights"),
        audit=family_audit,
        tokenizer=by_arch("train_inputs", "tokenizer"),
    output:
        LAYOUT.table_path("{arch}", "noise_ceiling_scores"),
        LAYOUT.table_record(LAYOUT.table_path("{arch}", "noise_ceiling_scores")),
    log:
        LAYOUT.log("noise_ceiling_scores", "{arch}"),
    benchmark:
        LAYOUT.benchmark("noise_ceiling_scores", "{arch}")
    conda:
        CONDA_ENV
    threads: COMPUTE["cache_threads"]
    resources:
        gpu=MODEL_GPUS,
        mem_mb=by_noise_ceiling("mem_mb"),
        runtime=by_noise_ceiling("runtime"),
    params:
        library=CEILING_SCORE_CODE,
        seeds=by_arch("seeds"),
        spec=by_arch("job_spec"),
        tokenizer_dir=by_arch("tokenizer_dir"),
        prepend_bos=config["cache"]["prepend_bos"],
        probe=CEILING_PROBE,
        weight_processing=config["analysis"]["weight_processing"],
        device=COMPUTE["device"],
    script:
        "../scripts/noise_ceiling_scores.py"


rule noise_ceiling_tables:
    """Per layer and head type of {arch}: the within-refit reliability of type labels and scores (two probe halves),
    the cross-seed agreement of each head with its best match typed on the other half, and their ratio
    (attenuation-corrected), with refit-resampled intervals; the figure sets them beside head stability."""
    input:
        unpack(by_noise_ceiling("tables")),
    output:
        table=LAYOUT.table_path("{arch}", "noise_ceiling"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "noise_ceiling")),
        figure=report(
            LAYOUT.figure_path("{arch}", "noise_ceiling"),
            caption="../report/noise_ceiling.rst",
            category="{arch}",
            subcategory="Beyond the paper: head types",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "noise_ceiling")),
    log:
        LAYOUT.log("noise_ceiling_tables", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("statistics_mem_mb"),
        runtime=20,
    params:
        library=CEILING_TABLE_CODE,
        seeds=by_arch("seeds"),
        promptset=PRIMARY,
        statistics=STATISTICS,
        n_sequences=CEILING_PROBE["n_sequences"],
    script:
        "../scripts/noise_ceiling_tables.py"
