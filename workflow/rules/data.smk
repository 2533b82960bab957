# Data stage (paper §3.1): tokenizers and corpora as token shards.
#
#   synthetic_text  -> {RESULTS}/data/{corpus}/text.jsonl          (source synthetic: the offline demo)
#   planted_text    -> {RESULTS}/data/{corpus}/text.jsonl          (source synthetic with planted_repeats)
#   train_tokenizer -> {RESULTS}/tokenizers/{tokenizer}/meta.json   (source train: byte-level BPE)
#   fetch_tokenizer -> {RESULTS}/tokenizers/{tokenizer}/meta.json   (source hub: needs internet)
#   tokenize_shard  -> {RESULTS}/data/{corpus}/shard_{shard}.npy/.json (one job per shard)
#   corpus_meta     -> {RESULTS}/data/{corpus}/meta.json
#   heldout_wikitext -> {RESULTS}/data/heldout/wikitext-2-raw-v1_test/{tokenizer}.npy/.json (analysis.heldout_corpus
#                      null: the paper's held-out text, §4.5; needs internet)
#   heldout_neuron_text -> {RESULTS}/data/heldout/{dataset}/{tokenizer}.npy/.json (neurons.heldout: the neuron
#                      statistics' text, the first neurons.tokens tokens of a hub split; needs internet)
#
# Local tokenizers (source local) are used in place: no rule. File formats: src/headstab/data/shards.py.

TOKENIZERS, CORPORA = config["tokenizers"], config["corpora"]
PLANTED_CORPORA = [name for name in jobs.names_with_source(CORPORA, "synthetic") if "planted_repeats" in CORPORA[name]]
SYNTHETIC_TEXT_CORPORA = [name for name in jobs.names_with_source(CORPORA, "synthetic") if name not in PLANTED_CORPORA]
# Per corpus: what its jobs look up (headstab.plan.jobs says what each job's params hold).
CORPUS_JOBS = {
    name: {
        "entry": jobs.corpus_job_entry(config, LAYOUT, name),
        "inputs": {
            "tokenizer": LAYOUT.tokenizer_target(entry["tokenizer"]),
            "source": jobs.corpus_source_inputs(config, LAYOUT, name),
        },
        "tokenizer_dir": LAYOUT.tokenizer_dir(entry["tokenizer"]),
        "shard_records": [path.replace(".npy", ".json") for path in LAYOUT.corpus_shards(name)],
        "shard_index": {f"{index:03d}": index for index in range(entry["n_shards"])},
    }
    for name, entry in CORPORA.items()
}
HELDOUT_HUB_SHARD = LAYOUT.heldout_shard(jobs.HELDOUT_HUB_DATASET, "{tokenizer}")
HELDOUT_NEURON_DATASET = jobs.neuron_heldout_dataset(config)  # None: neurons.heldout is null, no such job
HELDOUT_NEURON_SHARD = LAYOUT.heldout_shard("{dataset}", "{tokenizer}")


rule synthetic_text:
    """Seeded English-like documents with structure for attention to learn (the offline demo's corpus,
    standing in for the paper's C4 / OpenWebText of §3.1)."""
    output:
        text=LAYOUT.synthetic_text("{corpus}"),
    log:
        LAYOUT.log("synthetic_text", "{corpus}"),
    wildcard_constraints:
        corpus=jobs.names_regex(SYNTHETIC_TEXT_CORPORA),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=30,
    params:
        seed=lookup(dpath="{corpus}/seed", within=CORPORA),
        n_documents=lookup(dpath="{corpus}/n_documents", within=CORPORA),
        repeated_spans=lookup(dpath="{corpus}/repeated_spans", within=CORPORA),
    script:
        "../scripts/synthetic_text.py"


rule planted_text:
    """Seeded documents of uniform random words of a closed vocabulary with spans copied later: the
    induction control's corpus (headstab.data.planted), where copying is all there is to learn."""
    output:
        text=LAYOUT.synthetic_text("{corpus}"),
    log:
        LAYOUT.log("planted_text", "{corpus}"),
    wildcard_constraints:
        corpus=jobs.names_regex(PLANTED_CORPORA),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=30,
    params:
        seed=lookup(dpath="{corpus}/seed", within=CORPORA),
        n_documents=lookup(dpath="{corpus}/n_documents", within=CORPORA),
        planted_repeats=lookup(dpath="{corpus}/planted_repeats", within=CORPORA),
    script:
        "../scripts/planted_text.py"


rule train_tokenizer:
    """Byte-level BPE tokenizer trained on a corpus of this configuration (the demo's stand-in for the
    paper's pretrained tokenizers, §3.1 / Listings 1-7)."""
    input:
        lookup(dpath="{tokenizer}/training_inputs", within=TOKENIZER_JOBS),
    output:
        meta=LAYOUT.tokenizer_meta("{tokenizer}"),
    log:
        LAYOUT.log("train_tokenizer", "{tokenizer}"),
    wildcard_constraints:
        tokenizer=jobs.names_regex(jobs.names_with_source(TOKENIZERS, "train")),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        entry=lookup(dpath="{tokenizer}", within=TOKENIZERS),
        corpus=lookup(dpath="{tokenizer}/training_corpus", within=TOKENIZER_JOBS),
        out_dir=lookup(dpath="{tokenizer}/dir", within=TOKENIZER_JOBS),
    script:
        "../scripts/train_tokenizer.py"


rule fetch_tokenizer:
    """Pretrained tokenizer from the Hugging Face hub (paper §3.1: NeelNanda/gpt-neox-tokenizer-digits for
    2/4/8 layers, gpt2 for GPT-2-small). Needs internet on the node that runs it."""
    output:
        meta=LAYOUT.tokenizer_meta("{tokenizer}"),
    log:
        LAYOUT.log("fetch_tokenizer", "{tokenizer}"),
    wildcard_constraints:
        tokenizer=jobs.names_regex(jobs.names_with_source(TOKENIZERS, "hub")),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        hub_id=lookup(dpath="{tokenizer}/name", within=TOKENIZERS),
        out_dir=lookup(dpath="{tokenizer}/dir", within=TOKENIZER_JOBS),
    script:
        "../scripts/fetch_tokenizer.py"


rule tokenize_shard:
    """One shard of a corpus as a token stream (paper §3.1: C4 2B-token subset, OpenWebText in 10 shards);
    shard i of n takes a disjoint part of the documents, so shards build in parallel."""
    input:
        unpack(lookup(dpath="{corpus}/inputs", within=CORPUS_JOBS)),
    output:
        tokens=LAYOUT.corpus_shard("{corpus}", "{shard}"),
        record=LAYOUT.shard_record("{corpus}", "{shard}"),
    log:
        LAYOUT.log("tokenize_shard", "{corpus}", "shard_{shard}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=240,
    params:
        corpus=lookup(dpath="{corpus}/entry", within=CORPUS_JOBS),
        shard_index=lookup(dpath="{corpus}/shard_index/{shard}", within=CORPUS_JOBS),
        tokenizer_dir=lookup(dpath="{corpus}/tokenizer_dir", within=CORPUS_JOBS),
    script:
        "../scripts/tokenize_shard.py"


rule corpus_meta:
    """A corpus's shards summarised: tokenizer identity, token counts and sha256 per shard (§3.1)."""
    input:
        records=lookup(dpath="{corpus}/shard_records", within=CORPUS_JOBS),
    output:
        meta=LAYOUT.corpus_meta("{corpus}"),
    log:
        LAYOUT.log("corpus_meta", "{corpus}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=500,
        runtime=10,
    script:
        "../scripts/corpus_meta.py"


rule heldout_wikitext:
    """The paper's held-out text for validation perplexity (§4.5): wikitext-2-raw-v1 test through
    `datasets`, joined with blank lines and tokenized with `tokenizer` into one token shard. Used when
    analysis.heldout_corpus is null (the full paper); needs internet on the node that runs it."""
    input:
        tokenizer=lookup(dpath="{tokenizer}/target", within=TOKENIZER_JOBS),
    output:
        tokens=HELDOUT_HUB_SHARD,
        record=HELDOUT_HUB_SHARD.replace(".npy", ".json"),
    log:
        LAYOUT.log("heldout_wikitext", "{tokenizer}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    params:
        dataset=jobs.HELDOUT_HUB,
        tokenizer_dir=lookup(dpath="{tokenizer}/dir", within=TOKENIZER_JOBS),
    script:
        "../scripts/heldout_wikitext.py"


rule heldout_neuron_text:
    """The neuron statistics' held-out text (neurons.heldout): a hub split streamed through `datasets`, each
    document tokenized with `tokenizer` and followed by its EOS token, cut after the first neurons.tokens tokens
    into one token shard (the directory names the split and the budget). Needs internet on the node that runs it."""
    input:
        tokenizer=lookup(dpath="{tokenizer}/target", within=TOKENIZER_JOBS),
    output:
        tokens=HELDOUT_NEURON_SHARD,
        record=HELDOUT_NEURON_SHARD.replace(".npy", ".json"),
    log:
        LAYOUT.log("heldout_neuron_text", "{dataset}", "{tokenizer}"),
    wildcard_constraints:
        dataset=jobs.names_regex([HELDOUT_NEURON_DATASET] if HELDOUT_NEURON_DATASET else []),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        source=config["neurons"]["heldout"],
        tokens=config["neurons"]["tokens"],
        tokenizer_dir=lookup(dpath="{tokenizer}/dir", within=TOKENIZER_JOBS),
    script:
        "../scripts/heldout_neuron_text.py"
