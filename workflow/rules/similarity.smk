# Pair similarity (paper Eq. 1-2, §3.2-3.3, §A.6): for every prompt set, every pair of refits of an
# architecture, S[a, b][l, i, l', j] = mean over prompts of the cosine similarity of the causal
# attention patterns of head (l, i) of refit a and head (l', j) of refit b. One job per
# architecture covers all its prompt sets: the 50 refits of an architecture are one job, which
# streams prompt chunks of all refits' caches into one Gram matrix product per prompt set (job
# start-up, not arithmetic, dominates at the demo's scale). On the primary prompts the same job writes
# the tensor under the prompt-permutation null (headstab.similarity.null_pairs): the chance level of the
# cross-layer best match (docs/statistics.md).


# The prompt-group similarity files of the trained refits and of every snapshot step read (step 0 included):
# targets themselves, so a file deleted with a killed job of a forced rerun is rebuilt by the next snakemake
# (no table that reads it asks for it again while the table is up to date).
GROUPED_TARGETS = {
    arch: list(
        dict.fromkeys(
            ARCH[arch]["grouped_similarities"]
            + ARCH[arch]["init_grouped_similarities"]
            + [
                LAYOUT.snapshot_grouped_similarity_path(arch, step, promptset)
                for step in SPECS[arch].snapshot_steps
                for promptset in PROMPT_SETS
            ]
        )
    )
    for arch in ARCHITECTURES
}
add_outputs(GROUPED_TARGETS)


rule pair_similarity:
    """All-pairs head similarity of one architecture's refits on every prompt set (Eq. 1-2)."""
    input:
        caches=by_arch("caches"),
    output:
        **{promptset: LAYOUT.similarity_path("{arch}", promptset) for promptset in PROMPT_SETS},
    log:
        LAYOUT.log("pair_similarity", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("similarity_mem_mb"),
        runtime=by_arch("similarity_runtime"),
    params:
        seeds=by_arch("seeds"),
        promptsets=PROMPT_SETS,
        null_promptsets=[PRIMARY],
        seed=STATISTICS["seed"],
        prompt_chunk=config["similarity"]["prompt_chunk"],
        # A new file layout changes this param, so Snakemake rebuilds files written by older code.
        format_version=SIMILARITY_FORMAT_VERSION,
    script:
        "../scripts/pair_similarity.py"


# Same-layer similarity per random group of prompts, observed and under the prompt-permutation null
# (headstab.similarity.prompt_groups): what the bootstrap resamples (docs/statistics.md). The same pass
# gives every head's entropy and, on the primary prompts, the content variant (patterns less their
# position-only template).
rule prompt_group_similarity:
    """Same-layer head similarity of one architecture's refits per prompt group and its null; head entropy;
    the content variant on the primary prompt set."""
    input:
        caches=by_arch("caches"),
    output:
        **{promptset: LAYOUT.grouped_similarity_path("{arch}", promptset) for promptset in PROMPT_SETS},
    log:
        LAYOUT.log("prompt_group_similarity", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("grouped_similarity_mem_mb"),
        runtime=by_arch("similarity_runtime"),
    params:
        library=PROMPT_GROUPS_CODE,
        seeds=by_arch("seeds"),
        promptsets=PROMPT_SETS,
        content_promptsets=[PRIMARY],
        prompt_groups=STATISTICS["prompt_groups"],
        seed=STATISTICS["seed"],
        format_version=GROUPED_FORMAT_VERSION,
    script:
        "../scripts/prompt_group_similarity.py"


use rule prompt_group_similarity as snapshot_prompt_group_similarity with:
    input:
        caches=snapshot_caches,
    output:
        **{
            promptset: LAYOUT.snapshot_grouped_similarity_path("{arch}", "{step}", promptset)
            for promptset in PROMPT_SETS
        },
    log:
        LAYOUT.log("snapshot_prompt_group_similarity", "{arch}", "step{step}"),
    params:
        content_promptsets=[],  # snapshots (step 0, training dynamics) need no content variant
