# Snapshots: the refits' weights at training steps and their pattern-only caches, for the step-0
# baseline (statistics.init_baseline) and the stability along training (snapshot_steps; docs/operations.md).
#
#   init_weights                {RESULTS}/{arch}/snapshots/step0/weights/seed{seed}/final.pt, meta.json
#                               (the weights train starts from, rebuilt from the seed; no training)
#   snapshot_weights            {RESULTS}/{arch}/snapshots/step{step}/weights/seed{seed}/final.pt, meta.json
#                               (step > 0: the weights train kept at that step, in the refit's training/)
#   cache_snapshot_activations  {RESULTS}/{arch}/snapshots/step{step}/caches/blocks/{block}.json, after writing each
#                               refit's cache in caches/blocks/{block}/ (hook_pattern; at step 0 also the residual
#                               hooks of residual CKA's prompt sets, for its chance level), as cache_activations
#   publish_snapshot_cache      {RESULTS}/{arch}/snapshots/step{step}/caches/seed{seed}.h5 (a hard link)
#
# Library: headstab.training.snapshots, headstab.training (snapshot_steps), headstab.activations.writer (patterns_only).

SNAPSHOT_CACHE_SPECS = {
    arch: {key: value for key, value in ARCH[arch]["cache_spec"].items() if key not in TRAINING_ONLY}
    for arch in ARCHITECTURES
}
by_snapshot_cache_spec = partial(jobs.WildcardLookup, SNAPSHOT_CACHE_SPECS, "arch")
# The steps whose caches the analyses read: step 0 for the baseline (statistics.init_baseline, refits trained
# here), and snapshot_steps. Each block's record is a target, as the final caches' (cache.smk).
SNAPSHOT_CACHE_STEPS = {
    arch: list(
        dict.fromkeys(
            ([0] if STATISTICS["init_baseline"] and SOURCES[arch].trained else []) + list(SPECS[arch].snapshot_steps)
        )
    )
    for arch in ARCHITECTURES
}
add_outputs(
    upstream={
        arch: [
            LAYOUT.snapshot_cache_block_record(arch, step, block)
            for step in SNAPSHOT_CACHE_STEPS[arch]
            for block in CACHE_BLOCKS[arch]
        ]
        for arch in ARCHITECTURES
    }
)


rule init_weights:
    """Refit {seed} of {arch} at step 0, rebuilt from the seed exactly as training starts (no training)."""
    output:
        weights=LAYOUT.snapshot_weights("{arch}", 0, "{seed}"),
        meta=str(Path(LAYOUT.snapshot_weights("{arch}", 0, "{seed}")).with_name("meta.json")),
    log:
        LAYOUT.log("init_weights", "{arch}", "seed{seed}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("cache_mem_mb"),
        runtime=10,
    params:
        spec=by_model_spec(),
    script:
        "../scripts/init_weights.py"


rule snapshot_weights:
    """The weights refit {seed} of {arch} had after training step {step}: kept by train (snapshot_steps) in
    the refit's training/, published here with their meta.json (a hard link where possible)."""
    input:
        weights=LAYOUT.final_weights("{arch}", "{seed}"),
    output:
        weights=LAYOUT.snapshot_weights("{arch}", "{step}", "{seed}"),
        meta=str(Path(LAYOUT.snapshot_weights("{arch}", "{step}", "{seed}")).with_name("meta.json")),
    log:
        LAYOUT.log("snapshot_weights", "{arch}", "step{step}", "seed{seed}"),
    wildcard_constraints:
        step=r"[1-9]\d*",
    localrule: True
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=500,
        runtime=10,
    params:
        training=refit_training_dir,
    script:
        "../scripts/snapshot_weights.py"


use rule cache_activations as cache_snapshot_activations with:
    input:
        weights=cache_block_weights,
        tokenizer=by_arch("train_inputs", "tokenizer"),
        prompts=PROMPT_FILES,
    output:
        record=LAYOUT.snapshot_cache_block_record("{arch}", "{step}", "{block}"),
    log:
        LAYOUT.log("cache_snapshot_activations", "{arch}", "step{step}", "{block}"),
    benchmark:
        LAYOUT.benchmark("cache_snapshot_activations", "{arch}", "step{step}", "{block}")
    wildcard_constraints:
        step=r"\d+",
    params:
        # The prompt-group similarity reads hook_pattern; residual_cka reads step 0's residual hooks (init_cka).
        cache=snapshot_cache_options,
        spec=by_snapshot_cache_spec(),


use rule publish_cache as publish_snapshot_cache with:
    output:
        LAYOUT.snapshot_cache_path("{arch}", "{step}", "{seed}"),
    log:
        LAYOUT.log("publish_snapshot_cache", "{arch}", "step{step}", "seed{seed}"),
    wildcard_constraints:
        step=r"\d+",
