"""Rule heldout_wikitext: wikitext-2-raw-v1 test (Hugging Face `datasets`) -> one token shard in the
architecture's tokenizer, the paper's held-out text for validation perplexity (§4.5).

The split's lines are joined with blank lines and tokenized as one text, the usual recipe for
wikitext perplexity; a .json record with counts and checksums is written beside the shard.
"""

import logging

from headstab.data.shards import write_shard
from headstab.joblog import run_job
from headstab.refits.tokenizer import load_tokenizer, tokenizer_identity


def main():
    import datasets

    source, tokenizer_dir = snakemake.params.dataset, snakemake.params.tokenizer_dir
    rows = datasets.load_dataset(source["name"], source["config_name"], split=source["split"])
    text = "\n\n".join(rows["text"])
    tokenizer = load_tokenizer(tokenizer_dir)
    tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
    logging.info(
        "%s/%s %s: %d characters -> %d tokens",
        source["name"],
        source["config_name"],
        source["split"],
        len(text),
        len(tokens),
    )
    meta = {
        "corpus": f"{source['config_name']}_{source['split']}",
        "source": {"source": "hub", **source},
        "tokenizer": tokenizer_identity(tokenizer_dir),
        "n_documents": 1,
    }
    write_shard(tokens, snakemake.output.tokens, meta, vocab_size=len(tokenizer))


run_job(main, "heldout_wikitext", snakemake.log[0])
