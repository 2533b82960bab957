"""Rules prompt_group_similarity and snapshot_prompt_group_similarity: caches of all refits of one architecture ->
similarity/{promptset}.groups.h5 (observed and null per prompt group, head entropy; the content variant for
params.content_promptsets)."""

import logging

from headstab.activations.reader import open_cache
from headstab.joblog import run_job
from headstab.sharpness import empty_template_entries
from headstab.similarity.prompt_groups import (
    GroupedSimilarity,
    grouped_arrays_from_caches,
    null_partners,
    prompt_groups,
    write_grouped_similarity,
)
from headstab.similarity.prompt_identity import PROMPT_DIGEST, cached_prompt_digest


def main():
    caches = list(snakemake.input.caches)
    seed = snakemake.params.seed
    for promptset in snakemake.params.promptsets:
        with open_cache(caches[0]) as cache:
            lengths = cache.lengths(promptset)
        groups = prompt_groups(lengths.size, snakemake.params.prompt_groups, seed)
        partners = null_partners(lengths, seed)
        content = promptset in snakemake.params.content_promptsets
        if content:
            logging.info(
                "%s: content variant; %d of %d packed entries have no template without the prompt and its partner "
                "(remainder 0)",
                promptset, empty_template_entries(lengths, partners), int((lengths * (lengths + 1) // 2).sum()),
            )  # fmt: skip
        arrays = grouped_arrays_from_caches(caches, promptset, groups, partners, content=content)
        grouped = GroupedSimilarity(
            group_sizes=[len(g) for g in groups],
            seeds=list(snakemake.params.seeds),
            partners=partners,
            lengths=lengths,
            **arrays,
        )
        write_grouped_similarity(
            snakemake.output[promptset],
            grouped,
            attrs={
                "promptset": promptset,
                "seed": seed,
                "caches": caches,
                "groups": [g.tolist() for g in groups],
                PROMPT_DIGEST: cached_prompt_digest(caches, promptset),  # what the files it is compared with share
            },
        )
        logging.info(
            "wrote %s: %d groups, %s, content variant %s",
            snakemake.output[promptset],
            len(groups),
            arrays["observed"].shape,
            "yes" if content else "no",
        )


# snakemake.rule: this script also runs rule snapshot_prompt_group_similarity.
step = f" step {snakemake.wildcards.step}" if "step" in snakemake.wildcards.keys() else ""
run_job(main, snakemake.rule, snakemake.log[0], label=f"{snakemake.wildcards.arch}{step}")
