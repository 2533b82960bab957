# Activation caches (paper §3.2, A.4-A.5): one job per block of compute.cache_refits_per_job refits of an
# architecture runs every prompt set through each trained refit (contract: docs/caches.md).
#
#   cache_activations -> {RESULTS}/{arch}/caches/blocks/{block}.json, the record of one block (e.g. seeds1_2_3_4),
#                        after writing each refit's cache in {RESULTS}/{arch}/caches/blocks/{block}/seed{seed}.h5
#   publish_cache     -> {RESULTS}/{arch}/caches/seed{seed}.h5 (a hard link), what every analysis reads
#
# A block pays a job's start-up (imports, the tokenizer, the prompt sets) once; each refit's cache is the one it
# would be alone. To rebuild one refit's cache, force its block: snakemake <its caches/seed{seed}.h5> --forcerun
# cache_activations (docs/operations.md).
# Library: src/headstab/activations/ (capture, packing, the writer, and the validated reader every analysis uses).

# Params and resources: ARCH in common.smk (headstab.plan.jobs, headstab.plan.resources).

# Each block's record is a target: a block killed after Snakemake deleted its record (a forced rerun) leaves
# the published caches as they were; the next `snakemake` sees the record missing and runs the block again.
add_outputs(
    upstream={arch: [LAYOUT.cache_block_record(arch, block) for block in CACHE_BLOCKS[arch]] for arch in ARCHITECTURES}
)


rule cache_activations:
    """hook_pattern of each refit of one block on every prompt set (HDF5), one refit after the other; hook_z and
    hook_resid_mid (hook_resid_post without an MLP), plus the residual hook analysis.cka_hook names when it is
    another (cache.extra_resid_hooks), on the sets of cache.activation_sets (default: analysis.promptset, the
    set the analyses read them from)."""
    input:
        weights=cache_block_weights,
        audit=family_audit,
        tokenizer=by_arch("train_inputs", "tokenizer"),
        prompts=PROMPT_FILES,
    output:
        record=LAYOUT.cache_block_record("{arch}", "{block}"),
    log:
        LAYOUT.log("cache_activations", "{arch}", "{block}"),
    benchmark:
        LAYOUT.benchmark("cache_activations", "{arch}", "{block}")
    conda:
        CONDA_ENV
    threads: COMPUTE["cache_threads"]  # torch's forward pass (the HDF5 writes are single-threaded)
    resources:
        gpu=MODEL_GPUS,
        mem_mb=by_arch("cache_mem_mb"),  # one refit's model and batch at a time
        runtime=cache_block_runtime,
    params:
        refits=cache_block_refits,
        caches=cache_block_files,
        prompt_sets=config["prompt_sets"],
        cache=jobs.cache_options(config),  # config["cache"] (+ extra_resid_hooks, activation_sets resolved)
        # A new cache layout changes this param, so Snakemake rebuilds caches written by older code.
        format_version=CACHE_FORMAT_VERSION,
        weight_processing=config["analysis"]["weight_processing"],  # TL2 steps applied on load (docs/fidelity.md)
        spec=by_arch("cache_spec"),  # the refit's model, run with analysis.act_fn where set
        tokenizer=by_arch("tokenizer"),
        tokenizer_dir=by_arch("tokenizer_dir"),
        device=COMPUTE["device"],
    script:
        "../scripts/cache_activations.py"


rule publish_cache:
    """Refit {seed}'s cache where every analysis reads it: the file its block's cache job wrote, hard-linked
    (copied where the file system refuses). Seconds of work: local."""
    input:
        record=refit_cache_record,
    output:
        LAYOUT.cache_path("{arch}", "{seed}"),
    log:
        LAYOUT.log("publish_cache", "{arch}", "seed{seed}"),
    localrule: True
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    params:
        cache=refit_cache_file,
    shell:
        "(ln -f {params.cache} {output} || cp {params.cache} {output}) 2> {log}"
