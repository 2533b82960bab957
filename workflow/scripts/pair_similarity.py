"""Rule pair_similarity: caches of all refits of one architecture -> similarity/{promptset}.h5, every prompt set; the
null tensor too for params.null_promptsets."""

import logging

from headstab.activations.reader import open_cache
from headstab.joblog import run_job
from headstab.provenance.records import environment_record
from headstab.similarity.null_pairs import null_pair_similarity_from_caches
from headstab.similarity.pairs import pair_similarity_from_caches, write_pair_similarity
from headstab.similarity.prompt_groups import null_partners


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
        null = partners = None
        if promptset in snakemake.params.null_promptsets:
            with open_cache(caches[0]) as cache:
                partners = null_partners(cache.lengths(promptset), snakemake.params.seed)
            null = null_pair_similarity_from_caches(caches, promptset, partners)
        write_pair_similarity(
            snakemake.output[promptset],
            similarity,
            snakemake.params.seeds,
            attrs={
                "architecture": snakemake.wildcards.arch,
                "promptset": promptset,
                "inputs": inputs,
                "environment": environment,
                "seed": snakemake.params.seed,
            },
            null=null,
            partners=partners,
        )
        logging.info("wrote %s %s, null %s", snakemake.output[promptset], similarity.shape, null is not None)


run_job(main, "pair_similarity", snakemake.log[0])
