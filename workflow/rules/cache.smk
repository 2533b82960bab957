# Activation caches (paper §3.2, A.4-A.5): one job per (architecture, seed) runs every prompt set
# through the trained refit and writes {RESULTS}/{arch}/caches/seed{seed}.h5 (contract: docs/caches.md).
# Library: src/headstab/caches.py (writer and the validated reader every analysis uses).

import math


# ---------------------------------------------------------------- resources (candidates for common.smk)
# Positions assumed per prompt when sizing memory: the shipped sets stay under 100 tokens with BOS.
CACHE_ASSUMED_POSITIONS = 128


def cache_gpus(wildcards):
    """One GPU per refit, unless the run is pinned to the CPU (compute.device: cpu)."""
    return 0 if config["compute"]["device"] == "cpu" else 1


def cache_mem_mb(wildcards):
    """Host memory: ~3 GB for Python and torch, the weights, and two batches of float32 activations
    in flight (one being compressed while the next runs), at CACHE_ASSUMED_POSITIONS positions."""
    spec = SPECS[wildcards.arch]
    n_pos = min(spec.n_ctx, CACHE_ASSUMED_POSITIONS)
    per_prompt = spec.n_layers * (spec.n_heads * n_pos * n_pos + n_pos * spec.d_model + n_pos * spec.n_heads * spec.d_head)
    activations = 2 * 2 * 4 * config["cache"]["batch_size"] * per_prompt  # x2: padded copy before compression
    weights = 4 * (spec.n_params + 2 * spec.d_vocab * spec.d_model)
    return 500 * math.ceil((3000 + (activations + 2 * weights) / 1e6) / 500)


def cache_runtime(wildcards):
    """Minutes: a forward pass over a few hundred prompts is seconds on a GPU; compression and
    start-up dominate. Generous for gpt2-sized models on a CPU."""
    return 30 if SPECS[wildcards.arch].n_layers * SPECS[wildcards.arch].d_model <= 4096 else 60


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
    threads: 2
    resources:
        gpu=cache_gpus,
        mem_mb=cache_mem_mb,
        runtime=cache_runtime,
    script:
        "../scripts/cache_activations.py"
