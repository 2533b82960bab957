"""Where a run's outputs live, and which rules run a model; importable at parse time (no numpy).

`Layout(config)` gives every path under `results_dir`, so the rules, the scripts and the tests name
a file one way. slurm/config.yaml imports GPU_RULES (YTE `__definitions__`) to send exactly these rules to
HEADSTAB_GPU_PARTITION with the GPU constraint and model; tests/workflow/test_plan.py checks that
they are exactly the rules whose `resources:` declare `gpu` (workflow/rules/*.smk). A new rule that
runs a model declares `gpu=MODEL_GPUS` (common.smk) and is added here.
"""

from pathlib import PurePath

# The rules that run a model: training, the activation caches, the validation perplexity of every
# refit (optimizers.smk, §4.5), the anchor's head ablations (ablation.smk, §4.8), the training
# snapshots' caches (snapshots.smk) and the head-type probe passes (head_types.smk).
GPU_RULES = (
    "train",
    "cache_activations",
    "validation_perplexity",
    "ablation_perplexity",
    "cache_snapshot_activations",
    "layer_drop_swap",
    "train_seed_grid",
    "head_type_scores",
    "head_type_scores_step0",
)
# The rules that start an architecture's analyses from its weights and caches: forcing them reruns every
# analysis of analyses_<arch> and nothing upstream (docs/operations.md; tests/workflow/test_operations.py checks
# them against the DAG).
ANALYSIS_ROOT_RULES = (
    "pair_similarity",
    "prompt_group_similarity",
    "snapshot_prompt_group_similarity",
    "weight_norms",
    "validation_perplexity",
    "activation_norms",
    "ablation_perplexity",
    "layer_drop_swap",
    "training_curves",
    "head_type_scores",
    "head_type_scores_step0",
)


class Layout:
    """Every output path of one configuration (a validated config dict), relative to the working directory."""

    def __init__(self, config: dict) -> None:
        self.results = config["results_dir"].rstrip("/")
        self._tokenizers = config["tokenizers"]
        self._corpora = config["corpora"]

    # -- data (§3.1)
    def tokenizer_dir(self, name: str) -> str:
        """Directory loadable with AutoTokenizer.from_pretrained; a `source: local` tokenizer's own path."""
        entry = self._tokenizers[name]
        return entry["path"] if entry["source"] == "local" else f"{self.results}/tokenizers/{name}"

    def tokenizer_target(self, name: str) -> str:
        """The file that exists once tokenizer `name` is ready (the rules' sentinel output)."""
        entry = self._tokenizers[name]
        if entry["source"] == "local":
            return str(PurePath(entry["path"]) / "tokenizer_config.json")
        return self.tokenizer_meta(name)

    def tokenizer_meta(self, name: str) -> str:
        """The record a fetched or trained tokenizer's rule writes last (name may be the wildcard "{tokenizer}")."""
        return f"{self.results}/tokenizers/{name}/meta.json"

    def prompt_check_record(self, tokenizer: str, n_ctx: int | str) -> str:
        """Written once every prompt set fits n_ctx tokens of `tokenizer`; beside the tokenizer, so it is lost
        only with it."""
        return f"{self.results}/tokenizers/{tokenizer}/prompt_check/n_ctx{n_ctx}.json"

    def corpus_dir(self, name: str) -> str:
        return f"{self.results}/data/{name}"

    def synthetic_text(self, name: str) -> str:
        return f"{self.corpus_dir(name)}/text.jsonl"

    def corpus_shards(self, name: str) -> list[str]:
        return [self.corpus_shard(name, f"{i:03d}") for i in range(self._corpora[name]["n_shards"])]

    def corpus_shard(self, name: str, shard: str) -> str:
        return f"{self.corpus_dir(name)}/shard_{shard}.npy"

    def shard_record(self, name: str, shard: str) -> str:
        """What tokenize_shard records beside a shard: its documents, tokens and sha256."""
        return f"{self.corpus_dir(name)}/shard_{shard}.json"

    def corpus_meta(self, name: str) -> str:
        return f"{self.corpus_dir(name)}/meta.json"

    def heldout_shard(self, dataset: str, tokenizer: str) -> str:
        """A hub held-out text (e.g. wikitext-2-raw-v1_test) as one token shard in `tokenizer`'s ids."""
        return f"{self.results}/data/heldout/{dataset}/{tokenizer}.npy"

    # -- refits (§3.1-3.2)
    def checkpoint_dir(self, arch: str, seed: int | str) -> str:
        return f"{self.results}/{arch}/checkpoints/seed{seed}"

    def final_weights(self, arch: str, seed: int | str) -> str:
        return self.checkpoint_file(arch, seed, "final.pt")

    def checkpoint_file(self, arch: str, seed: int | str, name: str) -> str:
        """A refit's final.pt, meta.json or train_log.csv."""
        return f"{self.checkpoint_dir(arch, seed)}/{name}"

    def train_outputs(self, arch: str, seeds: list[int]) -> list[str]:
        names = ("final.pt", "train_log.csv", "meta.json")
        return [self.checkpoint_file(arch, seed, name) for seed in seeds for name in names]

    def cache_path(self, arch: str, seed: int | str) -> str:
        return f"{self.results}/{arch}/caches/seed{seed}.h5"

    def similarity_path(self, arch: str, promptset: str) -> str:
        return f"{self.results}/{arch}/similarity/{promptset}.h5"

    def grouped_similarity_path(self, arch: str, promptset: str) -> str:
        """Same-layer similarity per prompt group, observed and null (headstab.similarity.prompt_groups)."""
        return f"{self.results}/{arch}/similarity/{promptset}.groups.h5"

    # -- snapshots: the refits' weights at training step `step` (0: the initialisation, rebuilt from the seed)
    def snapshot_dir(self, arch: str, step: int | str) -> str:
        return f"{self.results}/{arch}/snapshots/step{step}"

    def snapshot_weights(self, arch: str, step: int | str, seed: int | str) -> str:
        return f"{self.snapshot_dir(arch, step)}/weights/seed{seed}/final.pt"

    def snapshot_cache_path(self, arch: str, step: int | str, seed: int | str) -> str:
        return f"{self.snapshot_dir(arch, step)}/caches/seed{seed}.h5"

    def snapshot_grouped_similarity_path(self, arch: str, step: int | str, promptset: str) -> str:
        return f"{self.snapshot_dir(arch, step)}/similarity/{promptset}.groups.h5"

    # -- tables and figures: per architecture, per Adam/AdamW pair (named by its Adam member), across all
    def table_path(self, arch: str, name: str) -> str:
        return f"{self.results}/{arch}/tables/{name}.csv"

    def figure_path(self, arch: str, name: str) -> str:
        return f"{self.results}/{arch}/figures/{name}.png"

    def compare_table_path(self, arch: str, name: str) -> str:
        return f"{self.results}/compare/{arch}/tables/{name}.csv"

    def compare_figure_path(self, arch: str, name: str) -> str:
        return f"{self.results}/compare/{arch}/figures/{name}.png"

    def summary_table_path(self, name: str) -> str:
        return f"{self.results}/summary/tables/{name}.csv"

    def summary_figure_path(self, name: str) -> str:
        return f"{self.results}/summary/figures/{name}.png"

    def report_configuration_path(self) -> str:
        return f"{self.results}/summary/configuration.yaml"

    def report_tables_dir(self, arch: str) -> str:
        """The report's table pages of one architecture, or of compare/ and summary/ for arch "summary"."""
        return f"{self.results}/{arch}/report_tables"

    def headline_dir(self) -> str:
        """The headline's pages per statistic (rule headline_summary)."""
        return f"{self.results}/summary/headline"

    def log(self, rule: str, *parts: str) -> str:
        """The log file of one job of `rule`, e.g. log("train", "{arch}", "seed{seed}") -> logs/train/{arch}/seed{seed}.log."""
        return "/".join([self.results, "logs", rule, *parts]) + ".log"

    def benchmark(self, rule: str, *parts: str) -> str:
        """The `benchmark:` file of one job of `rule` (wall time, memory), laid out as its log."""
        return "/".join([self.results, "benchmarks", rule, *parts]) + ".tsv"
