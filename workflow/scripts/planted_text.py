"""Rule planted_text: seeded planted-repeat documents -> text.jsonl (one {"text": ...} per line)."""

import logging
import time

from tqdm import tqdm

from headstab.data.planted import generate_planted_documents
from headstab.data.synthetic import write_jsonl
from headstab.joblog import run_job


def main():
    seed, n_documents, planted = snakemake.params.seed, snakemake.params.n_documents, snakemake.params.planted_repeats
    logging.info("corpus %s: generating %d planted-repeat documents with seed %d: %s",
                 snakemake.wildcards.corpus, n_documents, seed, planted)  # fmt: skip
    start = time.perf_counter()
    documents = generate_planted_documents(
        seed,
        n_documents,
        planted["words"],
        planted["document_words"],
        planted["span"],
        planted["gap"],
        planted["repeat_fraction"],
    )
    count = write_jsonl(tqdm(documents, total=n_documents, unit="doc", mininterval=5), snakemake.output.text)
    logging.info("wrote %d documents to %s in %.1f s", count, snakemake.output.text, time.perf_counter() - start)


run_job(main, "planted_text", snakemake.log[0])
