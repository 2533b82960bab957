# Input and params functions of the jobs that need more than {arch} (those use by_arch, common.smk):
# a seed's fetched model, a step's caches. Kept apart from every rule file (snakemake --lint).

from headstab.sources import published_inputs


def published_refit_file(wildcards):
    """source published_local: the seed's file in the local copy (an input, so a changed file refetches); hub: none."""
    return published_inputs(SOURCES[wildcards.arch], SPECS[wildcards.arch], wildcards.seed)


def family_model_files(wildcards):
    """A local model's config.json (an input, so a changed model refetches); a hub model: none."""
    return SOURCES[wildcards.arch].local_inputs(wildcards.seed)


def family_seed_source(wildcards):
    """The seed's own model (its params: adding seeds to a family refetches none of the others)."""
    return SOURCES[wildcards.arch].to_dict(seeds=[int(wildcards.seed)])


def snapshot_caches(wildcards):
    """The pattern-only caches of every refit of {arch} at training step {step}."""
    return [LAYOUT.snapshot_cache_path(wildcards.arch, wildcards.step, seed) for seed in SEEDS[wildcards.arch]]
