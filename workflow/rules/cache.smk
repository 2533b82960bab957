# Activation caches (paper §3.2, A.4-A.5): one job per (architecture, seed) runs every prompt set
# through the trained refit and writes {RESULTS}/{arch}/caches/seed{seed}.h5 (contract: docs/caches.md).
# Library: src/headstab/caches.py (writer and the validated reader every analysis uses).

# Resources (cache_gpus, cache_mem_mb, cache_runtime): common.smk, section "resources".


def cache_inputs(wildcards):
    return {
        "weights": final_weights(wildcards.arch, wildcards.seed),
        "tokenizer": tokenizer_target(SPECS[wildcards.arch].tokenizer),
        "prompts": list(config["prompt_sets"].values()),
    }


def cache_spec(wildcards):
    """The architecture spec as plain data, without its seed list (adding seeds must not rebuild old caches)."""
    spec = SPECS[wildcards.arch].to_dict()
    del spec["seeds"]
    return spec


# ---------------------------------------------------------------- rule
rule cache_activations:
    """Attention patterns, resid_mid and per-head outputs of one refit on every prompt set (HDF5)."""
    input:
        unpack(cache_inputs),
    output:
        f"{RESULTS}/{{arch}}/caches/seed{{seed}}.h5",
    params:
        prompt_sets=config["prompt_sets"],
        cache=config["cache"],
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
        gpu=cache_gpus,
        mem_mb=cache_mem_mb,
        runtime=cache_runtime,
    script:
        "../scripts/cache_activations.py"
