"""Rule synthetic_text: seeded English-like documents -> text.jsonl (one {"text": ...} per line)."""

import logging
import time

from tqdm import tqdm

from headstab.data.synthetic import generate_synthetic_documents, write_jsonl
from headstab.joblog import run_job


def main():
    seed, n_documents, repeats = snakemake.params.seed, snakemake.params.n_documents, snakemake.params.repeated_spans
    logging.info(
        "corpus %s: generating %d documents with seed %d, %d repeated spans each",
        snakemake.wildcards.corpus, n_documents, seed, repeats,
    )  # fmt: skip
    start = time.perf_counter()
    documents = generate_synthetic_documents(seed, n_documents, repeated_spans=repeats)
    documents = tqdm(documents, total=n_documents, unit="doc", mininterval=5)
    count = write_jsonl(documents, snakemake.output.text)
    logging.info("wrote %d documents to %s in %.1f s", count, snakemake.output.text, time.perf_counter() - start)


run_job(main, "synthetic_text", snakemake.log[0])
