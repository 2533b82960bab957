# Training stage (paper §3.1, Listings 1-7): one job per (architecture, seed).
#
#   check_prompts -> {RESULTS}/tokenizers/{tokenizer}/prompt_check/n_ctx{n_ctx}.json (before any training)
#   train         -> {RESULTS}/{arch}/checkpoints/seed{seed}/final.pt, train_log.csv, meta.json
#
# The same directory holds full-state checkpoints state_{step:08d}.pt (+ .sha256) every
# `checkpoint_every` steps. They are not declared outputs: a rerun of a killed or requeued job
# resumes from the newest one written under the same configuration, and ends bit-identical to an
# uninterrupted run (CPU); one written under another configuration is deleted and training restarts.
# Library: src/headstab/training/ (loop, checkpoint, data), src/headstab/refits/models.py.

# Params and resources: ARCH in common.smk (headstab.plan.jobs.job_spec, headstab.plan.resources).

PROMPT_CHECKS = jobs.prompt_checks(SPECS)


rule check_prompts:
    """Every prompt set, tokenized as cache_activations will (BOS prepended when cache.prepend_bos), fits
    the context n_ctx of the architectures with this tokenizer: checked before their first train job,
    not after all training. Seconds of work, so it runs where snakemake runs (also with a profile)."""
    input:
        tokenizer=lookup(dpath="{tokenizer}/target", within=TOKENIZER_JOBS),
        prompts=PROMPT_FILES,
    output:
        record=LAYOUT.prompt_check_record("{tokenizer}", "{n_ctx}"),
    log:
        LAYOUT.log("check_prompts", "{tokenizer}", "n_ctx{n_ctx}"),
    wildcard_constraints:
        n_ctx=r"\d+",
    localrule: True
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        prompt_sets=config["prompt_sets"],
        prepend_bos=config["cache"]["prepend_bos"],
        tokenizer_dir=lookup(dpath="{tokenizer}/dir", within=TOKENIZER_JOBS),
        architectures=lookup(dpath="{tokenizer}/{n_ctx}", within=PROMPT_CHECKS),
    script:
        "../scripts/check_prompts.py"


rule train:
    """Train one refit of one architecture (paper §3.1, Listings 1-7): seeded init, seeded data order,
    constant-lr Adam/AdamW, one epoch or n_tokens; resumes from its newest full-state checkpoint.
    Starts only after check_prompts passed for its tokenizer and n_ctx."""
    input:
        unpack(by_arch("train_inputs")),
    output:
        weights=LAYOUT.final_weights("{arch}", "{seed}"),
        train_log=LAYOUT.checkpoint_file("{arch}", "{seed}", "train_log.csv"),
        meta=LAYOUT.checkpoint_file("{arch}", "{seed}", "meta.json"),
    log:
        LAYOUT.log("train", "{arch}", "seed{seed}"),
    benchmark:
        LAYOUT.benchmark("train", "{arch}", "seed{seed}")
    wildcard_constraints:
        arch=jobs.names_regex(TRAINED_ARCHITECTURES),  # published refits: rule fetch_published (published.smk)
    conda:
        CONDA_ENV
    threads: COMPUTE["train_threads"]
    resources:
        gpu=MODEL_GPUS,
        runtime=by_arch("train_runtime"),
        mem_mb=by_arch("train_mem_mb"),
    params:
        spec=by_arch("job_spec"),
        tokenizer_dir=by_arch("tokenizer_dir"),
        device=COMPUTE["device"],
    script:
        "../scripts/train.py"
