# Activation caches (paper §3.2, A.4-A.5): one job per (architecture, seed) runs every prompt set
# through the trained refit and writes {RESULTS}/{arch}/caches/seed{seed}.h5 (contract: docs/caches.md).
# Library: src/headstab/activations/ (capture, packing, the writer, and the validated reader every analysis uses).

# Resources (model_gpus, cache_mem_mb, cache_runtime): common.smk, section "resources".


rule cache_activations:
    """hook_pattern, hook_z and hook_resid_mid (hook_resid_post without an MLP) of one refit on every prompt
    set (HDF5), plus the residual hook analysis.cka_hook names when it is another (cache.extra_resid_hooks)."""
    input:
        unpack(cache_inputs),
    output:
        f"{RESULTS}/{{arch}}/caches/seed{{seed}}.h5",
    params:
        prompt_sets=config["prompt_sets"],
        cache=cache_options(),  # config["cache"] (+ extra_resid_hooks from analysis.cka_hook)
        # A new cache layout changes this param, so Snakemake rebuilds caches written by older code.
        format_version=CACHE_FORMAT_VERSION,
        weight_processing=config["analysis"]["weight_processing"],  # TL2 steps applied on load (docs/fidelity.md)
        spec=cache_spec,
        tokenizer=lambda wildcards: SPECS[wildcards.arch].tokenizer,
        tokenizer_dir=lambda wildcards: tokenizer_dir(SPECS[wildcards.arch].tokenizer),
        device=config["compute"]["device"],
    log:
        f"{RESULTS}/logs/cache/{{arch}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/cache/{{arch}}/seed{{seed}}.tsv"
    threads: cache_threads
    resources:
        gpu=model_gpus,
        mem_mb=cache_mem_mb,
        runtime=cache_runtime,
    conda:
        CONDA_ENV
    script:
        "../scripts/cache_activations.py"
