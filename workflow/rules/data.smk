# Data stage (paper §3.1): tokenizers and corpora as token shards.
#
#   synthetic_text  -> {RESULTS}/data/{corpus}/text.jsonl          (source synthetic: the offline demo)
#   train_tokenizer -> {RESULTS}/tokenizers/{tokenizer}/meta.json   (source train: byte-level BPE)
#   fetch_tokenizer -> {RESULTS}/tokenizers/{tokenizer}/meta.json   (source hub: needs internet)
#   tokenize_shard  -> {RESULTS}/data/{corpus}/shard_{shard}.npy/.json (one job per shard)
#   corpus_meta     -> {RESULTS}/data/{corpus}/meta.json
#
# Local tokenizers (source local) are used in place: no rule. File formats: src/headstab/data/shards.py.


rule synthetic_text:
    """Seeded English-like documents with structure for attention to learn (the offline demo's corpus,
    standing in for the paper's C4 / OpenWebText of §3.1)."""
    output:
        text=f"{RESULTS}/data/{{corpus}}/text.jsonl",
    params:
        seed=lambda wildcards: config["corpora"][wildcards.corpus]["seed"],
        n_documents=lambda wildcards: config["corpora"][wildcards.corpus]["n_documents"],
    log:
        f"{RESULTS}/logs/data/synthetic_text/{{corpus}}.log",
    wildcard_constraints:
        corpus=_names_regex(_corpora_with_source("synthetic")),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=30,
    conda:
        CONDA_ENV
    script:
        "../scripts/synthetic_text.py"


rule train_tokenizer:
    """Byte-level BPE tokenizer trained on a corpus of this configuration (the demo's stand-in for the
    paper's pretrained tokenizers, §3.1 / Listings 1-7)."""
    input:
        train_tokenizer_inputs,
    output:
        meta=f"{RESULTS}/tokenizers/{{tokenizer}}/meta.json",
    params:
        entry=lambda wildcards: config["tokenizers"][wildcards.tokenizer],
        corpus=lambda wildcards: tokenizer_training_source(wildcards.tokenizer),
        out_dir=lambda wildcards: tokenizer_dir(wildcards.tokenizer),
    log:
        f"{RESULTS}/logs/data/train_tokenizer/{{tokenizer}}.log",
    wildcard_constraints:
        tokenizer=_names_regex(_tokenizers_with_source("train")),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        CONDA_ENV
    script:
        "../scripts/train_tokenizer.py"


rule fetch_tokenizer:
    """Pretrained tokenizer from the Hugging Face hub (paper §3.1: NeelNanda/gpt-neox-tokenizer-digits for
    2/4/8 layers, gpt2 for GPT-2-small). Needs internet on the node that runs it."""
    output:
        meta=f"{RESULTS}/tokenizers/{{tokenizer}}/meta.json",
    params:
        hub_id=lambda wildcards: config["tokenizers"][wildcards.tokenizer]["name"],
        out_dir=lambda wildcards: tokenizer_dir(wildcards.tokenizer),
    log:
        f"{RESULTS}/logs/data/fetch_tokenizer/{{tokenizer}}.log",
    wildcard_constraints:
        tokenizer=_names_regex(_tokenizers_with_source("hub")),
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    conda:
        CONDA_ENV
    script:
        "../scripts/fetch_tokenizer.py"


rule tokenize_shard:
    """One shard of a corpus as a token stream (paper §3.1: C4 2B-token subset, OpenWebText in 10 shards);
    shard i of n takes a disjoint part of the documents, so shards build in parallel."""
    input:
        unpack(tokenize_shard_inputs),
    output:
        tokens=f"{RESULTS}/data/{{corpus}}/shard_{{shard}}.npy",
        record=f"{RESULTS}/data/{{corpus}}/shard_{{shard}}.json",
    params:
        corpus=lambda wildcards: corpus_source(wildcards.corpus),
        shard_index=lambda wildcards: int(wildcards.shard),
        tokenizer_dir=lambda wildcards: tokenizer_dir(config["corpora"][wildcards.corpus]["tokenizer"]),
    log:
        f"{RESULTS}/logs/data/tokenize_shard/{{corpus}}/shard_{{shard}}.log",
    threads: 1
    resources:
        mem_mb=4000,
        runtime=240,
    conda:
        CONDA_ENV
    script:
        "../scripts/tokenize_shard.py"


rule corpus_meta:
    """A corpus's shards summarised: tokenizer identity, token counts and sha256 per shard (§3.1)."""
    input:
        records=corpus_shard_records,
    output:
        meta=f"{RESULTS}/data/{{corpus}}/meta.json",
    log:
        f"{RESULTS}/logs/data/corpus_meta/{{corpus}}.log",
    threads: 1
    resources:
        mem_mb=500,
        runtime=10,
    conda:
        CONDA_ENV
    script:
        "../scripts/corpus_meta.py"
