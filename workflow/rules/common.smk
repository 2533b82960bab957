# What every rule file reads: the validated config, the output paths (headstab.plan.layout.Layout), each
# architecture's job params and resource requests (headstab.plan.jobs, headstab.plan.resources), looked up
# by the rules with lookup(). The logic behind each value is in the library, where it is tested.

import os
import sys
from functools import partial
from pathlib import Path

# The library, also without `pip install -e .`: on sys.path for this process, and on PYTHONPATH for
# every job's script (local, Slurm, or a `--sdm conda` environment, which does not install the package).
LIBRARY = str(Path(workflow.basedir) / "src")
sys.path.insert(0, LIBRARY)
os.environ.update(PYTHONPATH=os.pathsep.join(filter(None, [LIBRARY, os.environ.get("PYTHONPATH")])))

from headstab.check import check_configuration, refusal
from headstab.plan import jobs, resources
from headstab.plan.config import architecture_spec, selected_architectures
from headstab.plan.spec import ConfigError, paired_by_seed
from headstab.plan.formats import CACHE_FORMAT_VERSION, GROUPED_FORMAT_VERSION, SIMILARITY_FORMAT_VERSION
from headstab.plan.layout import ANALYSIS_ROOT_RULES, Layout
from headstab.plan.profiles import profile_files, refuse_templated_profiles
from headstab.sections import architecture_facts, architecture_summary
from headstab.plan.seed_design import BLOCK_WILDCARD, SEED_WILDCARD, refit_blocks, refit_seeds, train_blocks

# One environment for every rule with `--sdm conda` (the pins of requirements.txt), relative to the rule files.
CONDA_ENV = "../../envs/headstab.yaml"

try:  # the profiles Snakemake read, the config as it read it, and each --configfile and --config value read strictly
    refuse_templated_profiles(profile_files(sys.argv[1:], os.environ, workflow.main_snakefile), workflow.basedir)
    SOURCES, _prompt_sets = check_configuration(
        config,
        workflow.configfiles,
        workflow.config_settings.config_args or (),
        schema_path=Path(workflow.basedir) / "workflow/schemas/config.schema.yaml",
    )
except ConfigError as error:
    raise WorkflowError(refusal(error)) from None
PRIMARY = config["analysis"]["promptset"]  # the prompt set of the single-set analyses
PROMPT_SETS = list(_prompt_sets)  # primary, len5 ... len50, the user's sets
CKA_PROMPT_SETS = [PRIMARY]  # residual CKA's sets (§4.7), whose residual hooks the step-0 caches keep too
LARGEST_PROMPT_SET = max(map(len, _prompt_sets.values()), default=0)
PROMPT_FILES = list(config["prompt_sets"].values())

LAYOUT = Layout(config)
RESULTS = LAYOUT.results
SELECTED_ARCHITECTURES = selected_architectures(config)
# An architecture with a seed_grid (init seed x data-order seed) is trained, cached and decomposed
# by seed_grid.smk alone; ARCHITECTURES, the ones every paper section runs on, leave it out.
SEED_GRID_ARCHITECTURES = [a for a in SELECTED_ARCHITECTURES if config["architectures"][a].get("seed_grid")]
ARCHITECTURES = [arch for arch in SELECTED_ARCHITECTURES if arch not in SEED_GRID_ARCHITECTURES]
SPECS = {arch: architecture_spec(config, arch) for arch in SELECTED_ARCHITECTURES}
# What the analyses build each refit's model from: its spec with the activation of analysis.act_fn, if set.
ANALYSIS_SPECS = {arch: jobs.analysis_spec(spec, config["analysis"]["act_fn"]) for arch, spec in SPECS.items()}
COMPUTE = config["compute"]
TRAINING = config["training"]
STATISTICS = config["statistics"]
# In the params of the rules whose numbers this library code computes: editing it reruns them.
STATISTICS_CODE = jobs.library_digest("statistics", "stability.py", "matching.py")
PROMPT_GROUPS_CODE = jobs.library_digest("similarity/prompt_groups.py", "sharpness.py")
OPTIMIZER_TESTS_CODE = jobs.library_digest("statistics", "sections/optimizer_tests.py")
STABILITY_COMMONNESS_CODE = jobs.library_digest("statistics", "sections/stability_commonness.py")
ARCHITECTURE_FACTS = {arch: architecture_facts(SPECS[arch]) for arch in ARCHITECTURES}
RUN_SUMMARY = f"{len(ARCHITECTURES)} architectures ({', '.join(ARCHITECTURES)}), results_dir {RESULTS}"

SEEDS = {arch: list(spec.seeds) for arch, spec in SPECS.items()}
# The refits each train job trains together (training.seeds_per_job of them): {arch: {block: refits}}, for the
# architectures trained here; a seed grid's refits that its paper twin trains are copied instead.
PAPER_TWINS = jobs.paper_twins(SPECS, SEED_GRID_ARCHITECTURES)
TRAIN_BLOCKS = {
    arch: train_blocks(refits, TRAINING["seeds_per_job"])
    for arch, refits in jobs.trained_refits(SPECS, PAPER_TWINS).items()
    if SOURCES[arch].trained
}
REFIT_BLOCK = {arch: refit_blocks(blocks) for arch, blocks in TRAIN_BLOCKS.items()}
# The refits each cache job caches one after the other (compute.cache_refits_per_job of them), final and snapshot
# caches alike: {arch: {block: refits}}.
CACHE_BLOCKS = {arch: train_blocks(seeds, COMPUTE["cache_refits_per_job"]) for arch, seeds in SEEDS.items()}
REFIT_CACHE_BLOCK = {arch: refit_blocks(blocks) for arch, blocks in CACHE_BLOCKS.items()}
ANCHOR_SEEDS = {arch: seeds[0] for arch, seeds in SEEDS.items()}  # the paper's single-anchor view: the first seed
# Per architecture: what its rules look up with by_arch("<key>").
ARCH = {
    arch: {
        "job_spec": jobs.job_spec(spec),  # train and fetch params: without seeds
        "cache_spec": jobs.job_spec(ANALYSIS_SPECS[arch]),  # cache params: without seeds
        "refit_spec": ANALYSIS_SPECS[arch].to_dict(),  # analysis params: every refit
        "seeds": SEEDS[arch],
        "n_layers": spec.n_layers,
        "d_vocab": spec.d_vocab,
        "anchor_seed": ANCHOR_SEEDS[arch],
        # The ablated anchors: the paper's, the first seed, and the next ones up to analysis.ablation_anchors.
        "ablation_seeds": SEEDS[arch][: config["analysis"]["ablation_anchors"]],
        "ablation_runtime": 30 * len(SEEDS[arch][: config["analysis"]["ablation_anchors"]]),
        "weights": [LAYOUT.final_weights(arch, seed) for seed in SEEDS[arch]],
        "caches": [LAYOUT.cache_path(arch, seed) for seed in SEEDS[arch]],
        "similarities": [LAYOUT.similarity_path(arch, promptset) for promptset in PROMPT_SETS],
        "grouped_similarities": [LAYOUT.grouped_similarity_path(arch, promptset) for promptset in PROMPT_SETS],
        # The same refits at step 0 (docs/statistics.md), when statistics.init_baseline and we trained them:
        # our seed does not rebuild a fetched refit's initialisation.
        "init_grouped_similarities": [
            LAYOUT.snapshot_grouped_similarity_path(arch, 0, promptset)
            for promptset in PROMPT_SETS
            if STATISTICS["init_baseline"] and SOURCES[arch].trained
        ],
        "tokenizer": spec.tokenizer,
        "tokenizer_dir": LAYOUT.tokenizer_dir(spec.tokenizer),
        "configuration": architecture_summary(spec, RESULTS),  # one line for the report captions
        "train_inputs": {
            "shards": LAYOUT.corpus_shards(spec.corpus),
            "corpus_meta": LAYOUT.corpus_meta(spec.corpus),
            "tokenizer": LAYOUT.tokenizer_target(spec.tokenizer),
        },
        # No rule reads the prompt check's record (rule check_prompts): Snakemake would rerun every job below
        # it when the check reruns, and an ancient() input would hide their own reasons to rerun instead.
        "prompt_check": LAYOUT.prompt_check_record(spec.tokenizer, spec.n_ctx),
        "train_blocks": TRAIN_BLOCKS.get(arch, {}),
        "train_runtime": resources.train_runtime(
            spec, config["corpora"][spec.corpus], COMPUTE, TRAINING["seeds_per_job"]
        ),
        "train_mem_mb": resources.train_mem_mb(spec, COMPUTE["device"], TRAINING["seeds_per_job"]),
        "cache_mem_mb": resources.cache_mem_mb(
            spec, config["cache"]["batch_size"], 1 + len(jobs.extra_resid_hooks(config)), LARGEST_PROMPT_SET
        ),
        "cache_runtime": resources.cache_runtime(spec),
        "similarity_mem_mb": resources.similarity_mem_mb(
            spec, len(spec.seeds), config["similarity"]["prompt_chunk"], LARGEST_PROMPT_SET
        ),
        "similarity_runtime": resources.similarity_runtime(spec, len(spec.seeds)),
        "grouped_similarity_mem_mb": resources.grouped_similarity_mem_mb(
            spec, len(spec.seeds), LARGEST_PROMPT_SET, STATISTICS["prompt_groups"]
        ),
        "statistics_mem_mb": resources.statistics_mem_mb(spec, len(spec.seeds), STATISTICS["prompt_groups"]),
    }
    for arch, spec in SPECS.items()
}

# Values several rule files read.
# Optimizer pairs: {arch} (the Adam member) is compared with its AdamW member {arch}_wd when both run; the pair's
# outputs are named by the Adam member. analysis.optimizer_pairs names other pairs (e.g. two hub families).
ADAMW_MEMBERS = {arch: config["analysis"]["optimizer_pairs"].get(arch, f"{arch}_wd") for arch in ARCHITECTURES}
OPTIMIZER_PAIRS = {arch: adamw for arch, adamw in ADAMW_MEMBERS.items() if adamw in ARCHITECTURES}

PAIR_CONFIGURATIONS = {
    arch: " | ".join(architecture_summary(SPECS[member], RESULTS) for member in (arch, adamw))
    for arch, adamw in OPTIMIZER_PAIRS.items()
}

# Held-out text: a corpus of this config in the architecture's tokenizer, else wikitext-2 (rule heldout_wikitext).
HELDOUT_CORPUS = config["analysis"]["heldout_corpus"]
HELDOUT_LABEL = HELDOUT_CORPUS or f"{jobs.HELDOUT_HUB['config_name']} {jobs.HELDOUT_HUB['split']}"
try:
    HELDOUT_SHARDS = jobs.heldout_shards(config, SPECS, LAYOUT)
except ValueError as error:
    raise WorkflowError(str(error)) from None

TOKENIZER_JOBS = jobs.tokenizer_jobs(config, LAYOUT)  # what each tokenizer's jobs look up
TRAINED_ARCHITECTURES = [arch for arch in ARCHITECTURES if SOURCES[arch].trained]

# The model of each architecture without the keys that only shape training (snapshot steps, data order):
# changing them retrains (train's spec holds them), but leaves the step-0 weights and every snapshot's cache
# params as they were. A snapshot's cache runs the model as the final caches do (analysis.act_fn).
TRAINING_ONLY = ("snapshot_steps", "data_order")
MODEL_SPECS = {
    arch: {key: value for key, value in ARCH[arch]["job_spec"].items() if key not in TRAINING_ONLY}
    for arch in ARCHITECTURES
}
by_model_spec = partial(jobs.WildcardLookup, MODEL_SPECS, "arch")

# Every output, registered by the rule file that makes it (add_outputs, functions.smk): targets.smk and report.smk read them
# here, so no rule file reads another's globals.
UPSTREAM_OUTPUTS = {arch: [] for arch in ARCHITECTURES}  # weights, which an analysis rerun never rebuilds
ARCHITECTURE_OUTPUTS = {arch: [] for arch in ARCHITECTURES}  # each section's outputs of one architecture
SHARED_OUTPUTS = []  # compare/ and summary/: across architectures
SEED_GRID_OUTPUTS = []  # the seed grids' own architectures


MODEL_GPUS = resources.model_gpus(COMPUTE["device"])
# by_arch("train_mem_mb"): ARCH[{arch}]["train_mem_mb"] of each job, in constant time (lookup() walks all of ARCH).
by_arch = partial(jobs.WildcardLookup, ARCH, "arch")


wildcard_constraints:
    arch=jobs.names_regex(config["architectures"]),
    seed=SEED_WILDCARD,  # a seed, or a seed grid's {init}-{data} (headstab.plan.seed_design)
    block=BLOCK_WILDCARD,  # the refits one train or cache job handles, e.g. seeds1_2_3_4
    corpus=jobs.names_regex(config["corpora"]),
    tokenizer=jobs.names_regex(config["tokenizers"]),
    shard=r"\d{3}",
    promptset=jobs.names_regex(PROMPT_SETS),
