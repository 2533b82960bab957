# Activation caches (paper §3.2, A.4-A.5): one job per (architecture, seed) runs every prompt set
# through the trained refit and writes {RESULTS}/{arch}/caches/seed{seed}.h5 (contract: docs/caches.md).
# Library: src/headstab/activations/ (capture, packing, the writer, and the validated reader every analysis uses).

# Params and resources: ARCH in common.smk (headstab.plan.jobs, headstab.plan.resources).


rule cache_activations:
    """hook_pattern of one refit on every prompt set (HDF5); hook_z and hook_resid_mid (hook_resid_post without
    an MLP), plus the residual hook analysis.cka_hook names when it is another (cache.extra_resid_hooks), on
    the sets of cache.activation_sets (default: analysis.promptset, the set the analyses read them from)."""
    input:
        weights=LAYOUT.final_weights("{arch}", "{seed}"),
        tokenizer=by_arch("train_inputs", "tokenizer"),
        prompts=PROMPT_FILES,
    output:
        LAYOUT.cache_path("{arch}", "{seed}"),
    log:
        LAYOUT.log("cache_activations", "{arch}", "seed{seed}"),
    benchmark:
        LAYOUT.benchmark("cache_activations", "{arch}", "seed{seed}")
    conda:
        CONDA_ENV
    threads: COMPUTE["cache_threads"]  # torch's forward pass (the HDF5 writes are single-threaded)
    resources:
        gpu=MODEL_GPUS,
        mem_mb=by_arch("cache_mem_mb"),
        runtime=by_arch("cache_runtime"),
    params:
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
