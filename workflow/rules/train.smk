# Training stage (paper §3.1, Listings 1-7): one job per (architecture, seed).
#
#   train -> {RESULTS}/{arch}/checkpoints/seed{seed}/final.pt, train_log.csv, meta.json
#
# The same directory holds full-state checkpoints state_{step:08d}.pt (+ .sha256) every
# `checkpoint_every` steps. They are not declared outputs: a rerun of a killed or requeued job
# resumes from the newest one that verifies, and ends bit-identical to an uninterrupted run (CPU).
# Library: src/headstab/training.py, src/headstab/models.py.

import json
import math


# ---------------------------------------------------------------- resources (candidates for common.smk)
def train_gpus(wildcards):
    """One GPU per refit, unless the run is pinned to the CPU (compute.device: cpu)."""
    return 0 if config["compute"]["device"] == "cpu" else 1


# Token budget assumed when neither the architecture nor the corpus says (a corpus with n_tokens null,
# e.g. OpenWebText, before its meta.json exists): OpenWebText is about 9B gpt2 tokens.
UNKNOWN_CORPUS_TOKENS = 9_000_000_000


def train_tokens(arch):
    """Tokens one refit of `arch` trains on: n_tokens, else epochs x the corpus size (meta.json, config, or a guess)."""
    spec = SPECS[arch]
    if spec.n_tokens is not None:
        return spec.n_tokens
    meta = Path(corpus_meta(spec.corpus))
    if meta.is_file():
        corpus_tokens = json.loads(meta.read_text())["n_tokens"]
    else:
        corpus_tokens = config["corpora"][spec.corpus].get("n_tokens") or UNKNOWN_CORPUS_TOKENS
    return spec.epochs * corpus_tokens


def train_runtime(wildcards):
    """Minutes: tokens / calibrated throughput (compute.train_tokens_per_second) x runtime_margin, plus 10 for start-up."""
    rates = config["compute"]["train_tokens_per_second"]
    rate = rates.get(wildcards.arch, rates["default"])
    return math.ceil(config["compute"]["runtime_margin"] * train_tokens(wildcards.arch) / rate / 60) + 10


def train_mem_mb(wildcards):
    """Host memory: ~3 GB for Python, torch and CUDA, two copies of the full state (weights + Adam
    moments, while a checkpoint is serialised), and the activations when training on the CPU."""
    spec = SPECS[wildcards.arch]
    n_params = spec.n_params + 2 * spec.d_vocab * spec.d_model + spec.n_ctx * spec.d_model
    state_bytes = 2 * 3 * 4 * n_params
    activation_bytes = 0
    if config["compute"]["device"] == "cpu":
        per_layer = 12 * spec.d_model + 2 * spec.d_mlp + 3 * spec.n_heads * spec.seq_len
        activation_bytes = 4 * spec.tokens_per_step * (spec.n_layers * per_layer + 3 * spec.d_vocab)
    return 500 * math.ceil((3000 + (state_bytes + activation_bytes) / 1e6) / 500)


def train_spec(wildcards):
    """The architecture spec as plain data, without its seed list (adding seeds must not retrain old ones)."""
    spec = SPECS[wildcards.arch].to_dict()
    del spec["seeds"]
    return spec


# ---------------------------------------------------------------- rule
rule train:
    """Train one refit of one architecture (paper §3.1, Listings 1-7): seeded init, seeded data order,
    constant-lr Adam/AdamW, one epoch or n_tokens; resumes from its newest full-state checkpoint."""
    input:
        unpack(train_inputs),
    output:
        weights=f"{RESULTS}/{{arch}}/checkpoints/seed{{seed}}/final.pt",
        train_log=f"{RESULTS}/{{arch}}/checkpoints/seed{{seed}}/train_log.csv",
        meta=f"{RESULTS}/{{arch}}/checkpoints/seed{{seed}}/meta.json",
    params:
        spec=train_spec,
        tokenizer_dir=lambda wildcards: tokenizer_dir(SPECS[wildcards.arch].tokenizer),
        device=config["compute"]["device"],
    log:
        f"{RESULTS}/logs/train/{{arch}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train/{{arch}}/seed{{seed}}.tsv"
    threads: train_threads
    resources:
        gpu=train_gpus,
        runtime=train_runtime,
        mem_mb=train_mem_mb,
    script:
        "../scripts/train.py"
