"""Rule prompt_group_similarity: caches of all refits of one architecture -> similarity/{promptset}.groups.h5."""

import logging

from headstab.activations.reader import open_cache
from headstab.joblog import run_job
from headstab.similarity.prompt_groups import (
    GroupedSimilarity,
    grouped_similarity_from_caches,
    null_partners,
    prompt_groups,
    write_grouped_similarity,
)


def main():
    caches = list(snakemake.input.caches)
    seed = snakemake.params.seed
    for promptset in snakemake.params.promptsets:
        with open_cache(caches[0]) as cache:
            lengths = cache.lengths(promptset)
        groups = prompt_groups(lengths.size, snakemake.params.prompt_groups, seed)
        partners = null_partners(lengths, seed)
        observed, null = grouped_similarity_from_caches(caches, promptset, groups, partners)
        grouped = GroupedSimilarity(
            observed=observed,
            null=null,
            group_sizes=[len(g) for g in groups],
            seeds=list(snakemake.params.seeds),
            partners=partners,
            lengths=lengths,
        )
        write_grouped_similarity(
            snakemake.output[promptset],
            grouped,
            attrs={"promptset": promptset, "seed": seed, "caches": caches, "groups": [g.tolist() for g in groups]},
        )
        logging.info("wrote %s: %d groups, %s", snakemake.output[promptset], len(groups), observed.shape)


run_job(main, "prompt_group_similarity", snakemake.log[0])
