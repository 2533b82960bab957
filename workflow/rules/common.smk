# Shared configuration lookups and input functions. Rules stay declarative; logic lives here
# and in the headstab library.

import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))  # the library, also without `pip install -e .`

from headstab.config import ConfigError, architecture_spec, selected_architectures, validate_config

try:
    validate_config(config, schema_path=Path(workflow.basedir) / "workflow/schemas/config.schema.yaml")
except ConfigError as error:
    raise WorkflowError(f"Invalid configuration: {error}") from None

RESULTS = config["results_dir"].rstrip("/")
ARCHITECTURES = selected_architectures(config)
SPECS = {name: architecture_spec(config, name) for name in ARCHITECTURES}


wildcard_constraints:
    arch="|".join(sorted(config["architectures"], key=len, reverse=True)),
    seed=r"\d+",
    corpus="|".join(sorted(config["corpora"], key=len, reverse=True)),
    tokenizer="|".join(sorted(config["tokenizers"], key=len, reverse=True)),
    shard=r"\d{3}",


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


def train_inputs(wildcards):
    spec = SPECS[wildcards.arch]
    return {
        "shards": corpus_shards(spec.corpus),
        "corpus_meta": corpus_meta(spec.corpus),
        "tokenizer": tokenizer_target(spec.tokenizer),
    }


def train_threads(wildcards):
    return config["compute"]["train_threads"]


# ---------------------------------------------------------------- targets
def architecture_targets(arch):
    """Every output of one architecture (extended as stages land)."""
    return train_outputs(arch)


def all_targets():
    return [target for arch in ARCHITECTURES for target in architecture_targets(arch)]
