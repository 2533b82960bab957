# Input and params functions of the jobs that need more than {arch} (those use by_arch, common.smk): a seed's
# fetched model, a step's caches, a seed grid's reused paper refit. Kept apart from every rule file (snakemake --lint).

from headstab.plan.sources import published_inputs


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


def paper_refit(name):
    """Input function: the twin paper architecture's checkpoint file `name` of refit s, for the grid's s-s."""

    def twin_file(wildcards):
        seed = refit_seeds(wildcards.seed)[0]
        return str(Path(LAYOUT.final_weights(PAPER_TWINS[wildcards.arch], seed)).with_name(name))

    return twin_file


def paper_twin(wildcards):
    """The paper architecture whose refit s the grid reuses as s-s (seed_grid.smk: PAPER_TWINS)."""
    return PAPER_TWINS[wildcards.arch]
