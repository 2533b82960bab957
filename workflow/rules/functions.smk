# Input and params functions of the jobs that need more than {arch} (those use by_arch, common.smk): a seed's
# fetched model, a step's caches, a seed grid's reused paper refit, a train or cache job's refits and a refit's
# train or cache job.
# Kept apart from every rule file (snakemake --lint).

from headstab.plan.hub_families import HUB_FAMILY
from headstab.plan.sources import published_inputs


def published_refit_file(wildcards):
    """source published_local: the seed's file in the local copy (an input, so a changed file refetches); hub: none."""
    return published_inputs(SOURCES[wildcards.arch], SPECS[wildcards.arch], wildcards.seed)


def family_model_files(wildcards):
    """A local model's config.json (an input, so a changed model refetches); a hub model: none."""
    return SOURCES[wildcards.arch].local_inputs(wildcards.seed)


def family_revision_files(wildcards):
    """A local model's config.json at audited revision {revision} (a changed model re-digests); a hub model: none."""
    model = SOURCES[wildcards.arch].model(wildcards.seed).at(wildcards.revision)
    return [str(Path(model.directory) / "config.json")] if model.directory is not None else []


def family_audit(wildcards):
    """A hub family's audit record, an input of every rule that reads its weights: no analysis of a family runs
    before its provenance audit passes (hub_families.smk). Other architectures: none."""
    return [LAYOUT.audit_record(wildcards.arch)] if SOURCES[wildcards.arch].kind == HUB_FAMILY else []


def family_seed_source(wildcards):
    """The seed's own model (its params: adding seeds to a family refetches none of the others)."""
    return SOURCES[wildcards.arch].to_dict(seeds=[int(wildcards.seed)])


def snapshot_caches(wildcards):
    """The pattern-only caches of every refit of {arch} at training step {step}."""
    return [LAYOUT.snapshot_cache_path(wildcards.arch, wildcards.step, seed) for seed in SEEDS[wildcards.arch]]


def snapshot_cache_options(wildcards):
    """The writer's options of a snapshot's cache: hook_pattern alone, and at step 0 also the residual hooks of the
    residual CKA's prompt sets (its chance level: residual_cka's init_cka)."""
    if int(wildcards.step) == 0:
        return jobs.cache_options(config, residual_sets=CKA_PROMPT_SETS)
    return jobs.cache_options(config, patterns_only=True)


def paper_refit(name):
    """Input function: the paper twin's checkpoint file `name` of refit s, for the grid's s-s."""

    def paper_twin_file(wildcards):
        seed = refit_seeds(wildcards.seed)[0]
        return str(Path(LAYOUT.final_weights(PAPER_TWINS[wildcards.arch], seed)).with_name(name))

    return paper_twin_file


def paper_twin(wildcards):
    """The paper architecture whose refit s the grid reuses as s-s (seed_grid.smk: PAPER_TWINS)."""
    return PAPER_TWINS[wildcards.arch]


def block_refits(wildcards):
    """The refits train job {block} of {arch} trains, as the spec lists them (7, or "1-2" in a seed grid)."""
    return TRAIN_BLOCKS[wildcards.arch][wildcards.block]


def block_training_dirs(wildcards):
    """Where train job {block} of {arch} trains each of its refits (Layout.training_dir)."""
    return [LAYOUT.training_dir(wildcards.arch, refit) for refit in block_refits(wildcards)]


def cache_block_refits(wildcards):
    """The refits cache job {block} of {arch} caches, as the spec lists them (7, or "1-2" in a seed grid)."""
    return CACHE_BLOCKS[wildcards.arch][wildcards.block]


def cache_block_weights(wildcards):
    """The weights cache job {block} of {arch} runs: each refit's final.pt, or its weights at step {step}."""
    if "step" in wildcards.keys():
        return [LAYOUT.snapshot_weights(wildcards.arch, wildcards.step, r) for r in cache_block_refits(wildcards)]
    return [LAYOUT.final_weights(wildcards.arch, refit) for refit in cache_block_refits(wildcards)]


def cache_block_files(wildcards):
    """Where cache job {block} of {arch} writes each refit's cache (Layout.cache_block_file)."""
    if "step" in wildcards.keys():
        file = partial(LAYOUT.snapshot_cache_block_file, wildcards.arch, wildcards.step, wildcards.block)
    else:
        file = partial(LAYOUT.cache_block_file, wildcards.arch, wildcards.block)
    return [file(refit) for refit in cache_block_refits(wildcards)]


def cache_block_runtime(wildcards):
    """A cache job's runtime request (minutes): one refit's, times the refits of its block."""
    return ARCH[wildcards.arch]["cache_runtime"] * len(cache_block_refits(wildcards))


def _cache_block(wildcards):
    block = REFIT_CACHE_BLOCK[wildcards.arch].get(wildcards.seed)
    if block is None:
        raise ValueError(
            f"refit {wildcards.seed} of {wildcards.arch} is not among its seeds {SEEDS[wildcards.arch]}; add it "
            f"to architectures.{wildcards.arch}.seeds (or run.seeds) to cache it"
        )
    return block


def refit_cache_record(wildcards):
    """The record of the cache job whose block holds refit {seed} of {arch} (of its snapshot at step {step})."""
    if "step" in wildcards.keys():
        return LAYOUT.snapshot_cache_block_record(wildcards.arch, wildcards.step, _cache_block(wildcards))
    return LAYOUT.cache_block_record(wildcards.arch, _cache_block(wildcards))


def refit_cache_file(wildcards):
    """Where the cache job of refit {seed}'s block wrote its cache (of its snapshot at step {step})."""
    if "step" in wildcards.keys():
        return LAYOUT.snapshot_cache_block_file(wildcards.arch, wildcards.step, _cache_block(wildcards), wildcards.seed)
    return LAYOUT.cache_block_file(wildcards.arch, _cache_block(wildcards), wildcards.seed)


def refit_training_dir(wildcards):
    return LAYOUT.training_dir(wildcards.arch, wildcards.seed)


def refit_train_record(wildcards):
    """The record of the train job whose block holds refit {seed} of {arch}; none for a seed grid's refit that
    rule reuse_paper_refit copies (that rule wins: ruleorder in seed_grid.smk)."""
    block = REFIT_BLOCK[wildcards.arch].get(wildcards.seed)
    if block is None:
        if wildcards.arch in PAPER_TWINS:
            return []
        raise ValueError(
            f"refit {wildcards.seed} of {wildcards.arch} is not among its seeds {SEEDS[wildcards.arch]}; add it "
            f"to architectures.{wildcards.arch}.seeds (or run.seeds) to train it"
        )
    return LAYOUT.train_block_record(wildcards.arch, block)


def add_outputs(per_architecture=None, shared=(), upstream=None, seed_grid=()):
    """Register a rule file's outputs: per_architecture and upstream {arch: [path]}, shared and seed_grid [path]."""
    for registry, outputs in ((ARCHITECTURE_OUTPUTS, per_architecture), (UPSTREAM_OUTPUTS, upstream)):
        for arch, paths in (outputs or {}).items():
            registry[arch].extend(paths)
    SHARED_OUTPUTS.extend(shared)
    SEED_GRID_OUTPUTS.extend(seed_grid)
