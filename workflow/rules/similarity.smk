# Pair similarity (paper Eq. 1-2, §3.2-3.3, §A.6): for every prompt set, every pair of refits of an
# architecture, S[a, b][l, i, l', j] = mean over prompts of the cosine similarity of the causal
# attention patterns of head (l, i) of refit a and head (l', j) of refit b. One job per
# (architecture, prompt set): the 50 refits of an architecture are a handful of jobs, each one
# streaming prompt chunks of all refits' caches into one Gram matrix product.


rule pair_similarity:
    """All-pairs head similarity of one architecture's refits on one prompt set (Eq. 1-2)."""
    input:
        caches=arch_caches,
    output:
        f"{RESULTS}/{{arch}}/similarity/{{promptset}}.h5",
    log:
        f"{RESULTS}/logs/similarity/{{arch}}/{{promptset}}.log",
    params:
        seeds=lambda wildcards: seeds(wildcards.arch),
        prompt_chunk=config["similarity"]["prompt_chunk"],
    threads: 1
    resources:
        mem_mb=similarity_mem_mb,
        runtime=30,
    script:
        "../scripts/pair_similarity.py"
