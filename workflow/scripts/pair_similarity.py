"""Rule pair_similarity: caches of all refits of one architecture -> similarity/{promptset}.h5, every prompt set."""

import logging

from headstab.activations.reader import open_cache
from headstab.joblog import run_job
from headstab.provenance.records import environment_record
from headstab.similarity.pairs import pair_similarity_from_caches, write_pair_similarity


def main():
    caches = list(snakemake.input.caches)
    # Provenance: each cache already records the sha256 of its checkpoint and prompt files; hashing
    # gigabytes of caches again would cost more than the similarity itself.
    inputs = {}
    for path in caches:
        with open_cache(path) as cache:
            inputs[path] = {"checkpoint_sha256": cache.attrs.get("checkpoint_sha256"), "seed": cache.attrs.get("seed")}
    environment = environment_record()
    for promptset in snakemake.params.promptsets:
        similarity = pair_similarity_from_caches(caches, promptset, snakemake.params.prompt_chunk)
        write_pair_similarity(
            snakemake.output[promptset],
            similarity,
            snakemake.params.seeds,
            attrs={
                "architecture": snakemake.wildcards.arch,
                "promptset": promptset,
                "inputs": inputs,
                "environment": environment,
            },
        )
        logging.info("wrote %s %s", snakemake.output[promptset], similarity.shape)


run_job(main, "pair_similarity", snakemake.log[0])
