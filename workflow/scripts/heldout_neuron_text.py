"""Rule heldout_neuron_text: a hub dataset split (config key neurons.heldout), streamed through `datasets`, ->
the first neurons.tokens tokens in one tokenizer as one token shard, the neuron statistics' held-out text.

Documents are tokenized one at a time, each followed by the tokenizer's EOS token, and the stream is cut after
exactly neurons.tokens tokens (headstab.data.heldout.first_tokens); the rest of the split is never downloaded.
A .json record with the counts, the source and the tokenizer's identity is written beside the shard.
"""

import logging

from headstab.data.heldout import column_texts, first_tokens
from headstab.data.shards import write_shard
from headstab.joblog import run_job
from headstab.refits.tokenizer import load_tokenizer, tokenizer_identity


def main():
    import datasets

    source, budget, tokenizer_dir = snakemake.params.source, snakemake.params.tokens, snakemake.params.tokenizer_dir
    tokenizer = load_tokenizer(tokenizer_dir)
    if tokenizer.eos_token_id is None:
        raise ValueError(f"tokenizer {tokenizer_dir} has no EOS token to separate the held-out documents")
    rows = datasets.load_dataset(source["name"], source["config_name"], split=source["split"], streaming=True)
    where = f"hub dataset {source['name']} ({source['config_name']}, {source['split']}) of config key neurons.heldout"
    documents = column_texts(rows, source["text_column"], where)
    text = first_tokens(
        documents,
        lambda document: tokenizer(document, add_special_tokens=False)["input_ids"],
        tokenizer.eos_token_id,
        budget,
    )
    logging.info("%s: %d documents -> %d tokens of the budget %d", where, text.n_documents, text.n_tokens, budget)
    if text.n_tokens < budget:
        logging.warning("%s holds %d tokens, fewer than neurons.tokens=%d: all of them", where, text.n_tokens, budget)
    meta = {
        "corpus": snakemake.wildcards.dataset,
        "source": {"source": "hub", "streaming": True, **source},
        "tokenizer": tokenizer_identity(tokenizer_dir),
        "n_documents": text.n_documents,
        "token_budget": budget,
        "eos_token_id": tokenizer.eos_token_id,
    }
    write_shard(text.tokens, snakemake.output.tokens, meta, vocab_size=len(tokenizer))


run_job(main, "heldout_neuron_text", snakemake.log[0])
