# Pair similarity (paper Eq. 1-2, §3.2-3.3, §A.6): for every prompt set, every pair of refits of an
# architecture, S[a, b][l, i, l', j] = mean over prompts of the cosine similarity of the causal
# attention patterns of head (l, i) of refit a and head (l', j) of refit b. One job per
# architecture covers all its prompt sets: the 50 refits of an architecture are one job, which
# streams prompt chunks of all refits' caches into one Gram matrix product per prompt set (job
# start-up, not arithmetic, dominates at the demo's scale).


rule pair_similarity:
    """All-pairs head similarity of one architecture's refits on every prompt set (Eq. 1-2)."""
    input:
        caches=by_arch("caches"),
    output:
        **{promptset: similarity_path("{arch}", promptset) for promptset in PROMPT_SETS},
    log:
        f"{RESULTS}/logs/similarity/{{arch}}.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("similarity_mem_mb"),
        runtime=by_arch("similarity_runtime"),
    params:
        seeds=by_arch("seeds"),
        promptsets=PROMPT_SETS,
        prompt_chunk=config["similarity"]["prompt_chunk"],
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
        **{promptset: grouped_similarity_path("{arch}", promptset) for promptset in PROMPT_SETS},
    log:
        f"{RESULTS}/logs/prompt_group_similarity/{{arch}}.log",
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
        f"{RESULTS}/logs/prompt_group_similarity/{{arch}}/step{{step}}.log",
    params:
        content_promptsets=[],  # snapshots (step 0, training dynamics) need no content variant
