# Shared configuration lookups and input functions. Rules stay declarative; logic lives here
# and in the headstab library.

import math
import sys
from pathlib import Path

import os

# The library, also without `pip install -e .`: for this process and for every job's script
# (local, Slurm or a `--sdm conda` environment, which does not install the package).
LIBRARY = str(Path(workflow.basedir) / "src")
sys.path.insert(0, LIBRARY)
os.environ.update(PYTHONPATH=os.pathsep.join(filter(None, [LIBRARY, os.environ.get("PYTHONPATH")])))

# One environment for every rule (same pins as requirements.txt), used with `--sdm conda`
# (relative to the rule files).
CONDA_ENV = "../../envs/headstab.yaml"

from headstab.formats import CACHE_FORMAT_VERSION  # no numpy/h5py at parse time
from headstab.config import ConfigError, architecture_spec, selected_architectures, validate_config
from headstab.prompts import load_prompt_sets

try:
    validate_config(config, schema_path=Path(workflow.basedir) / "workflow/schemas/config.schema.yaml")
except ConfigError as error:
    raise WorkflowError(f"Invalid configuration: {error}") from None

RESULTS = config["results_dir"].rstrip("/")
ARCHITECTURES = selected_architectures(config)
SPECS = {name: architecture_spec(config, name) for name in ARCHITECTURES}
try:
    _prompt_sets = load_prompt_sets(config["prompt_sets"])
    PROMPT_SETS = list(_prompt_sets)  # primary, len5 ... len50, the user's sets
    PRIMARY = config["analysis"]["promptset"]  # the set of the single-set analyses
    if PRIMARY not in _prompt_sets:
        raise ValueError(f"config key 'analysis.promptset': {PRIMARY!r} is not a prompt set; choose from {PROMPT_SETS}")
    LARGEST_PROMPT_SET = max((len(prompts) for prompts in _prompt_sets.values()), default=0)
except (OSError, ValueError) as error:
    raise WorkflowError(f"Invalid prompt sets: {error}") from None


wildcard_constraints:
    arch="|".join(sorted(config["architectures"], key=len, reverse=True)),
    seed=r"\d+",
    corpus="|".join(sorted(config["corpora"], key=len, reverse=True)),
    tokenizer="|".join(sorted(config["tokenizers"], key=len, reverse=True)),
    shard=r"\d{3}",
    promptset="|".join(sorted(PROMPT_SETS, key=len, reverse=True)),


# ---------------------------------------------------------------- data
def tokenizer_dir(name):
    """Directory loadable with AutoTokenizer.from_pretrained for tokenizer `name`."""
    entry = config["tokenizers"][name]
    if entry["source"] == "local":
        return entry["path"]
    return f"{RESULTS}/tokenizers/{name}"


def tokenizer_target(name):
    """File that exists once tokenizer `name` is ready (the rule's sentinel output)."""
    entry = config["tokenizers"][name]
    if entry["source"] == "local":
        return str(Path(entry["path"]) / "tokenizer_config.json")
    return f"{RESULTS}/tokenizers/{name}/meta.json"


def corpus_dir(name):
    return f"{RESULTS}/data/{name}"


def corpus_shards(name):
    n_shards = config["corpora"][name]["n_shards"]
    return [f"{corpus_dir(name)}/shard_{i:03d}.npy" for i in range(n_shards)]


def corpus_meta(name):
    return f"{corpus_dir(name)}/meta.json"


# ---------------------------------------------------------------- training
def seeds(arch):
    return list(SPECS[arch].seeds)


def checkpoint_dir(arch, seed):
    return f"{RESULTS}/{arch}/checkpoints/seed{seed}"


def final_weights(arch, seed):
    return f"{checkpoint_dir(arch, seed)}/final.pt"


def train_outputs(arch):
    return [
        f"{checkpoint_dir(arch, seed)}/{name}"
        for seed in seeds(arch)
        for name in ("final.pt", "train_log.csv", "meta.json")
    ]


def prompt_check_record(tokenizer, n_ctx):
    """What check_prompts writes once every prompt set fits n_ctx in the tokens of `tokenizer`. It lives
    beside the tokenizer, so it is lost only with it (a missing record would retrain, see train_inputs)."""
    return f"{RESULTS}/tokenizers/{tokenizer}/prompt_check/n_ctx{n_ctx}.json"


def prompt_check_architectures(wildcards):
    """The architectures of this run whose prompts one check_prompts job checks."""
    return [arch for arch, spec in SPECS.items() if (spec.tokenizer, str(spec.n_ctx)) == (wildcards.tokenizer, wildcards.n_ctx)]


def train_inputs(wildcards):
    """Shards, corpus meta and tokenizer, and the prompt check, which must pass before training starts.
    ancient: rerunning the check never makes existing weights look out of date, as long as its record
    exists when snakemake plans (Snakemake reruns every consumer of a record that has to be made anew)."""
    spec = SPECS[wildcards.arch]
    return {
        "shards": corpus_shards(spec.corpus),
        "corpus_meta": corpus_meta(spec.corpus),
        "tokenizer": tokenizer_target(spec.tokenizer),
        "prompt_check": ancient(prompt_check_record(spec.tokenizer, spec.n_ctx)),
    }


def train_threads(wildcards):
    return config["compute"]["train_threads"]


def cache_threads(wildcards):
    """Threads of a cache job: torch's forward pass (the HDF5 writes are single-threaded)."""
    return config["compute"]["cache_threads"]


# ---------------------------------------------------------------- caches and similarity
# Positions assumed per prompt when sizing memory: the shipped prompt sets reach 221 tokens with BOS
# in the demo's 1,024-token BPE (rule check_prompts records the maxima), far fewer in the paper's tokenizers.
CACHE_ASSUMED_POSITIONS = 256
def cache_path(arch, seed):
    return f"{RESULTS}/{arch}/caches/seed{seed}.h5"


def arch_caches(wildcards):
    return [cache_path(wildcards.arch, seed) for seed in seeds(wildcards.arch)]


def similarity_mem_mb(wildcards):
    """Two streamed chunks of all refits' features (one read while the other's Gram runs) plus the
    Gram matrix, with headroom. Prompts are assumed at most CACHE_ASSUMED_POSITIONS tokens."""
    spec = SPECS[wildcards.arch]
    rows = len(spec.seeds) * spec.n_layers * spec.n_heads
    n_pos = min(spec.n_ctx, CACHE_ASSUMED_POSITIONS)
    chunk = 2 * rows * config["similarity"]["prompt_chunk"] * n_pos * (n_pos + 1) // 2 * 4
    gram = rows * rows * 8 * 3
    return max(2000, int((chunk + gram) / 1e6 * 1.5) + 1000)


def similarity_runtime(wildcards):
    """Minutes for all prompt sets of one architecture: the Gram grows with the square of the refits."""
    spec = SPECS[wildcards.arch]
    rows = len(spec.seeds) * spec.n_layers * spec.n_heads
    # Generous: 50 l8_h16 refits, same layer only, 100 prompts of 96 tokens: about 20 s on 2 cores
    # (benchmarks/README.md); all layers against all layers is n_layers times that work.
    return max(20, int(120 * (rows / 6400) ** 2))


def similarity_path(arch, promptset):
    return f"{RESULTS}/{arch}/similarity/{promptset}.h5"


def arch_similarities(wildcards):
    return [similarity_path(wildcards.arch, promptset) for promptset in PROMPT_SETS]


STABILITY_TABLES = ("pair_stability", "head_stability", "layer_stability", "alignment_map", "alignment_dispersion", "commonness")
STABILITY_FIGURES = ("head_stability", "layer_stability", "pair_stability", "cross_layer_stability", "alignment_map", "commonness")


def table_path(arch, name):
    return f"{RESULTS}/{arch}/tables/{name}.csv"


def figure_path(arch, name):
    return f"{RESULTS}/{arch}/figures/{name}.png"


# ---------------------------------------------------------------- resources
# Per-rule Slurm/workstation requests of the GPU rules, derived from the architecture and the
# config's compute table (docs/slurm.md). CPU rules declare fixed small requests in their rules.
def model_gpus(wildcards):
    """One GPU for a job that runs a model (headstab.layout.GPU_RULES), unless the
    run is pinned to the CPU (compute.device: cpu)."""
    return 0 if config["compute"]["device"] == "cpu" else 1


# Corpus size assumed when the config gives neither n_tokens nor expected_tokens (OpenWebText is
# about 9e9 gpt2 tokens). Planning reads the config only, never a result file.
UNKNOWN_CORPUS_TOKENS = 9_000_000_000


def train_tokens(arch):
    """Tokens one refit of `arch` trains on, for its runtime request: n_tokens, else epochs x the corpus
    size (corpora.<name>.n_tokens, else expected_tokens, else UNKNOWN_CORPUS_TOKENS)."""
    spec = SPECS[arch]
    if spec.n_tokens is not None:
        return spec.n_tokens
    corpus = config["corpora"][spec.corpus]
    return spec.epochs * (corpus["n_tokens"] or corpus["expected_tokens"] or UNKNOWN_CORPUS_TOKENS)


def train_tokens_per_second(arch):
    """Calibrated throughput of `arch` (compute.train_tokens_per_second): its own entry, else the longest
    key that is a `_`-separated prefix of its name (`l4` serves l4_h8, l4_h16_attn_wd ...), else default."""
    rates = config["compute"]["train_tokens_per_second"]
    if arch in rates:
        return rates[arch]
    prefixes = [key for key in rates if arch.startswith(f"{key}_")]
    return rates[max(prefixes, key=len)] if prefixes else rates["default"]


def train_runtime(wildcards):
    """Minutes: tokens / calibrated throughput (compute.train_tokens_per_second) x runtime_margin, plus 10 for start-up."""
    rate = train_tokens_per_second(wildcards.arch)
    return math.ceil(config["compute"]["runtime_margin"] * train_tokens(wildcards.arch) / rate / 60) + 10


def train_mem_mb(wildcards):
    """Host memory: ~3 GB for Python, torch and CUDA, two copies of the full state (weights + Adam
    moments, while a checkpoint is serialised), and the activations when training on the CPU."""
    spec = SPECS[wildcards.arch]
    n_params = spec.n_params + 2 * spec.d_vocab * spec.d_model + spec.n_ctx * spec.d_model
    state_bytes = 2 * 3 * 4 * n_params
    activation_bytes = 0
    if config["compute"]["device"] == "cpu":
        per_layer = 12 * spec.d_model + 2 * spec.d_mlp + 3 * spec.n_heads * spec.seq_len
        activation_bytes = 4 * spec.tokens_per_step * (spec.n_layers * per_layer + 3 * spec.d_vocab)
    return 500 * math.ceil((3000 + (state_bytes + activation_bytes) / 1e6) / 500)


def train_spec(wildcards):
    """The architecture spec as plain data, without its seed list (adding seeds must not retrain old ones)."""
    spec = SPECS[wildcards.arch].to_dict()
    del spec["seeds"]
    return spec





def cache_mem_mb(wildcards):
    """Host memory: ~3 GB for Python and torch, the weights, one batch of float32 activations and its
    padded copy at CACHE_ASSUMED_POSITIONS positions, and the packed lower-triangle patterns of the
    largest prompt set (written once per set)."""
    spec = SPECS[wildcards.arch]
    n_pos = min(spec.n_ctx, CACHE_ASSUMED_POSITIONS)
    n_resid = 1 + len(cache_extra_resid_hooks())  # resid_mid and the extra residual hooks
    per_prompt = spec.n_layers * (spec.n_heads * n_pos * n_pos + n_resid * n_pos * spec.d_model + n_pos * spec.n_heads * spec.d_head)
    activations = 2 * 4 * config["cache"]["batch_size"] * per_prompt  # x2: the padded copy written to HDF5
    packed_patterns = 4 * spec.n_layers * spec.n_heads * LARGEST_PROMPT_SET * n_pos * (n_pos + 1) // 2
    weights = 4 * (spec.n_params + 2 * spec.d_vocab * spec.d_model)
    return 500 * math.ceil((3000 + (activations + packed_patterns + 2 * weights) / 1e6) / 500)


def cache_runtime(wildcards):
    """Minutes: a forward pass over a few hundred prompts is seconds on a GPU; compression and
    start-up dominate. Generous for gpt2-sized models on a CPU."""
    return 30 if SPECS[wildcards.arch].n_layers * SPECS[wildcards.arch].d_model <= 4096 else 60


# ---------------------------------------------------------------- data stage (data.smk)
def _names_regex(names):
    """Wildcard constraint matching exactly `names` (a regex that never matches when empty)."""
    names = sorted(names, key=len, reverse=True)
    return "|".join(names) if names else "(?!x)x"


def _tokenizers_with_source(source):
    return [name for name, entry in config["tokenizers"].items() if entry["source"] == source]


def _corpora_with_source(source):
    return [name for name, entry in config["corpora"].items() if entry["source"] == source]


def synthetic_text(name):
    return f"{corpus_dir(name)}/text.jsonl"


def corpus_source_inputs(name):
    """Files a corpus's documents come from: its synthetic text, its local path, or none (hub)."""
    entry = config["corpora"][name]
    if entry["source"] == "synthetic":
        return [synthetic_text(name)]
    if entry["source"] == "local":
        return [entry["path"]]
    return []


def corpus_source(name):
    """The corpus's config entry, with `path` pointing at the synthetic text for source synthetic, without
    expected_tokens (a runtime estimate: changing it must not re-tokenize)."""
    entry = {key: value for key, value in config["corpora"][name].items() if key != "expected_tokens"}
    if entry["source"] == "synthetic":
        entry["path"] = synthetic_text(name)
    return entry


def tokenizer_training_source(name):
    """Corpus entry that tokenizer `name` trains on, without the keys that only shape the shards
    (so changing n_tokens or n_shards does not retrain the tokenizer and re-tokenize everything)."""
    corpus = corpus_source(config["tokenizers"][name]["corpus"])
    return {key: value for key, value in corpus.items() if key not in ("n_tokens", "n_shards", "tokenizer")}


def tokenize_shard_inputs(wildcards):
    entry = config["corpora"][wildcards.corpus]
    return {
        "tokenizer": tokenizer_target(entry["tokenizer"]),
        "source": corpus_source_inputs(wildcards.corpus),
    }


def train_tokenizer_inputs(wildcards):
    return corpus_source_inputs(config["tokenizers"][wildcards.tokenizer]["corpus"])


def corpus_shard_records(wildcards):
    return [path.replace(".npy", ".json") for path in corpus_shards(wildcards.corpus)]


# ---------------------------------------------------------------- cache stage (cache.smk)
def cache_inputs(wildcards):
    return {
        "weights": final_weights(wildcards.arch, wildcards.seed),
        "tokenizer": tokenizer_target(SPECS[wildcards.arch].tokenizer),
        "prompts": list(config["prompt_sets"].values()),
    }


def cache_spec(wildcards):
    """The architecture spec as plain data, without its seed list (adding seeds must not rebuild old caches)."""
    spec = SPECS[wildcards.arch].to_dict()
    del spec["seeds"]
    return spec


def cache_extra_resid_hooks():
    """Residual hooks the caches store beside resid_mid: the one analysis.cka_hook names, unless it is
    hook_resid_mid (always stored)."""
    hook = config["analysis"]["cka_hook"]
    return [] if hook == "hook_resid_mid" else [hook]


def cache_options():
    """Options of the cache writer: config["cache"], plus `extra_resid_hooks` only when there are any, so
    that the default cka_hook adds nothing to the params, while choosing another hook changes them
    and Snakemake rebuilds the caches."""
    extra = cache_extra_resid_hooks()
    return {**config["cache"], "extra_resid_hooks": extra} if extra else config["cache"]


# ---------------------------------------------------------------- analyses (stability.smk, one rule file per §4.4-4.9)
# What several paper sections look up; each section's own lookups are at the top of its rule file.
from headstab.sections import architecture_facts, architecture_summary

ARCHITECTURE_FACTS = {arch: architecture_facts(SPECS[arch]) for arch in ARCHITECTURES}
RUN_SUMMARY = f"{len(ARCHITECTURES)} architectures ({', '.join(ARCHITECTURES)}), results_dir {RESULTS}"


def anchor_seed(arch):
    """The paper's single-anchor view: the first seed."""
    return seeds(arch)[0]


def arch_anchor_seed(wildcards):
    return anchor_seed(wildcards.arch)


def arch_weights(wildcards):
    return [final_weights(wildcards.arch, seed) for seed in seeds(wildcards.arch)]


def refit_spec(wildcards):
    """The architecture spec as plain data, seeds included (the analyses read every refit)."""
    return SPECS[wildcards.arch].to_dict()


def configuration(wildcards):
    """One line naming the configuration of an architecture's figures (report captions)."""
    return architecture_summary(SPECS[wildcards.arch], RESULTS)


# ---------------------------------------------------------------- targets stage (targets.smk)
def architecture_upstream_targets(arch):
    """Outputs of `arch` that an analysis rerun must never rebuild: its weights and caches."""
    return train_outputs(arch) + [cache_path(arch, seed) for seed in seeds(arch)]


def architecture_post_training_targets(arch):
    """Every output of `arch` downstream of its caches, in architecture_targets order."""
    upstream = set(architecture_upstream_targets(arch))
    return [target for target in architecture_targets(arch) if target not in upstream]


# Rules whose jobs start an architecture's analyses from its weights and caches (everything else in
# analyses_<arch> is downstream of one of them); tests/test_operations.py checks this list against the DAG.
ANALYSIS_ROOT_RULES = ("pair_similarity", "weight_norms", "validation_perplexity", "activation_norms", "ablation_perplexity")


# ---------------------------------------------------------------- targets
def architecture_targets(arch):
    """Every output of one architecture (extended as stages land)."""
    return (
        train_outputs(arch)
        + [cache_path(arch, seed) for seed in seeds(arch)]
        + [similarity_path(arch, promptset) for promptset in PROMPT_SETS]
        + [table_path(arch, name) for name in STABILITY_TABLES]
        + [figure_path(arch, name) for name in STABILITY_FIGURES]
        + WEIGHT_NORMS_TARGETS[arch]
        + PROMPT_LENGTH_TARGETS[arch]
        + OPTIMIZERS_TARGETS[arch]
        + RESIDUAL_CKA_TARGETS[arch]
        + ABLATION_TARGETS[arch]
    )


def all_targets():
    """Every architecture's outputs, then the Adam/AdamW comparisons and the cross-architecture summaries
    (each section's target lists are at the top of its rule file) and the report's configuration."""
    return (
        [target for arch in ARCHITECTURES for target in architecture_targets(arch)]
        + WEIGHT_NORMS_SUMMARY_TARGETS
        + OPTIMIZERS_COMPARISON_TARGETS
        + STABILITY_GAP_TARGETS
        + META_SNE_TARGETS
        + [report_configuration_path()]
    )


# ---- paths of the comparisons, the summaries and the held-out text (paper §4.4-4.9)
# The paper's held-out text for validation perplexity (§4.5) when analysis.heldout_corpus is null.
HELDOUT_HUB = {"name": "wikitext", "config_name": "wikitext-2-raw-v1", "split": "test"}


def compare_table_path(arch, name):
    return f"{RESULTS}/compare/{arch}/tables/{name}.csv"


def compare_figure_path(arch, name):
    return f"{RESULTS}/compare/{arch}/figures/{name}.png"


def summary_table_path(name):
    return f"{RESULTS}/summary/tables/{name}.csv"


def summary_figure_path(name):
    return f"{RESULTS}/summary/figures/{name}.png"


def heldout_hub_shard(tokenizer):
    """wikitext-2-raw-v1 test as one token shard in `tokenizer`'s ids (rule heldout_wikitext)."""
    return f"{RESULTS}/data/heldout/{HELDOUT_HUB['config_name']}_{HELDOUT_HUB['split']}/{tokenizer}.npy"


def report_configuration_path():
    return f"{RESULTS}/summary/configuration.yaml"


def run_corpora():
    """Corpora this run tokenizes: its architectures' and the held-out one."""
    held_out = config["analysis"]["heldout_corpus"]
    return {spec.corpus for spec in SPECS.values()} | ({held_out} if held_out and ARCHITECTURES else set())


def network_targets():
    """Outputs of every job of this run that downloads from the Hugging Face hub: hub tokenizers (and
    tokenizers trained on a hub corpus), hub corpora's shards, and wikitext-2 when
    analysis.heldout_corpus is null. `snakemake network_inputs` builds them on a node with internet."""
    tokenizers = {spec.tokenizer for spec in SPECS.values()} | {config["corpora"][c]["tokenizer"] for c in run_corpora()}
    targets = []
    for name in sorted(tokenizers):
        entry = config["tokenizers"][name]
        if entry["source"] == "hub" or (entry["source"] == "train" and config["corpora"][entry["corpus"]]["source"] == "hub"):
            targets.append(tokenizer_target(name))
    targets += [corpus_meta(name) for name in sorted(run_corpora()) if config["corpora"][name]["source"] == "hub"]
    if config["analysis"]["heldout_corpus"] is None:
        targets += [heldout_hub_shard(tokenizer) for tokenizer in sorted({spec.tokenizer for spec in SPECS.values()})]
    return targets
