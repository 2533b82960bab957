# Training stage (paper §3.1, Listings 1-7): one job per block of training.seeds_per_job refits of an architecture.
#
#   check_prompts -> {RESULTS}/tokenizers/{tokenizer}/prompt_check/n_ctx{n_ctx}.json (first, once the tokenizer exists)
#   train         -> {RESULTS}/{arch}/checkpoints/blocks/{block}.json, the record of one block (e.g. seeds1_2_3_4),
#                    after training each refit of it in {RESULTS}/{arch}/checkpoints/seed{seed}/training/
#   publish_refit -> {RESULTS}/{arch}/checkpoints/seed{seed}/final.pt, train_log.csv, meta.json (hard links)
#
# A train job stacks its refits on a seed axis (headstab.training.model) and trains each as it would alone:
# own init, data order, optimiser state, full states, snapshots, outputs and divergence stop. training/ also
# holds the full-state checkpoints state_{step:08d}.pt (+ .sha256) every `checkpoint_every` steps and at the
# last one: a rerun of a killed or requeued job resumes each refit from its newest one written under the same
# configuration (a refit already at its last step is only exported again), ending bit-identical to an
# uninterrupted run (CPU); one written under another configuration is deleted and that refit restarts.
# Library: src/headstab/training/ (loop, stack, refit, checkpoint, data, model).

# Params and resources: ARCH in common.smk (headstab.plan.jobs.job_spec, headstab.plan.resources); the refits of
# each block: TRAIN_BLOCKS (common.smk).

PROMPT_CHECKS = jobs.prompt_checks(SPECS)
# The check is a target of its own, read by no rule: were it an input of train (ancient or not), its rerun
# after a prompt edit would either retrain or hide from Snakemake every reason to rerun below train. The
# caches check the same while they write; the check's priority runs it as soon as the tokenizer exists.
# Every train and cache block record is a target too, so that a block killed after Snakemake deleted its
# record (a forced rerun) runs again, and the published files with it, in the next `snakemake`.
add_outputs(
    upstream={
        arch: [ARCH[arch]["prompt_check"]]
        + [LAYOUT.train_block_record(arch, block) for block in ARCH[arch]["train_blocks"]]
        for arch in ARCHITECTURES
    },
    seed_grid=[ARCH[arch]["prompt_check"] for arch in SEED_GRID_ARCHITECTURES],
)


rule check_prompts:
    """Every prompt set, tokenized as cache_activations will (BOS prepended when cache.prepend_bos), fits
    the context n_ctx of the architectures with this tokenizer: run first once the tokenizer exists (priority),
    so that a prompt that does not fit stops the run before training ends, not at cache_activations after it.
    Seconds of work, so it runs where snakemake runs (also with a profile)."""
    input:
        tokenizer=lookup(dpath="{tokenizer}/target", within=TOKENIZER_JOBS),
        prompts=PROMPT_FILES,
    output:
        record=LAYOUT.prompt_check_record("{tokenizer}", "{n_ctx}"),
    log:
        LAYOUT.log("check_prompts", "{tokenizer}", "n_ctx{n_ctx}"),
    wildcard_constraints:
        n_ctx=r"\d+",
    priority: 100
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
    """Train one block of refits of one architecture together (paper §3.1, Listings 1-7; training.seeds_per_job
    per block): seeded init, seeded data order, constant-lr Adam/AdamW, one epoch or n_tokens, each refit in its
    checkpoint directory's training/; resumes each from its newest full-state checkpoint. Reads no prompt:
    a prompt edit retrains nothing."""
    input:
        unpack(by_arch("train_inputs")),
    output:
        record=LAYOUT.train_block_record("{arch}", "{block}"),
    log:
        LAYOUT.log("train", "{arch}", "{block}"),
    benchmark:
        LAYOUT.benchmark("train", "{arch}", "{block}")
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
        # What changes the weights; training.attention, compile and seeds_per_job do not (read from the config).
        precision=TRAINING["precision"],
        refits=block_refits,
        training_dirs=block_training_dirs,
        tokenizer_dir=by_arch("tokenizer_dir"),
        device=COMPUTE["device"],
    script:
        "../scripts/train.py"


rule publish_refit:
    """Refit {seed} of {arch} where every analysis reads it: the final.pt, train_log.csv and meta.json its block's
    train job wrote in training/, hard-linked (copied where the file system refuses). Seconds of work: local."""
    input:
        record=refit_train_record,
    output:
        weights=LAYOUT.final_weights("{arch}", "{seed}"),
        train_log=LAYOUT.checkpoint_file("{arch}", "{seed}", "train_log.csv"),
        meta=LAYOUT.checkpoint_file("{arch}", "{seed}", "meta.json"),
    log:
        LAYOUT.log("publish_refit", "{arch}", "seed{seed}"),
    wildcard_constraints:
        arch=jobs.names_regex(TRAINED_ARCHITECTURES + SEED_GRID_ARCHITECTURES),
    localrule: True
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    params:
        training=refit_training_dir,
    shell:
        "for name in final.pt train_log.csv meta.json; do ln -f {params.training}/$name $(dirname {output.weights})/$name "
        "|| cp {params.training}/$name $(dirname {output.weights})/$name; done 2> {log}"
