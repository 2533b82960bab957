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
        return [f"{self.corpus_dir(name)}/shard_{i:03d}.npy" for i in range(self._corpora[name]["n_shards"])]

    def corpus_meta(self, name: str) -> str:
        return f"{self.corpus_dir(name)}/meta.json"

    def heldout_shard(self, dataset: str, tokenizer: str) -> str:
        """A hub held-out text (e.g. wikitext-2-raw-v1_test) as one token shard in `tokenizer`'s ids."""
        return f"{self.results}/data/heldout/{dataset}/{tokenizer}.npy"

    # -- refits (§3.1-3.2)
    def checkpoint_dir(self, arch: str, seed: int | str) -> str:
        return f"{self.results}/{arch}/checkpoints/seed{seed}"

    def final_weights(self, arch: str, seed: int | str) -> str:
        return f"{self.checkpoint_dir(arch, seed)}/final.pt"

    def train_outputs(self, arch: str, seeds: list[int]) -> list[str]:
        names = ("final.pt", "train_log.csv", "meta.json")
        return [f"{self.checkpoint_dir(arch, seed)}/{name}" for seed in seeds for name in names]

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

    def log(self, rule: str, *parts: str) -> str:
        """The log file of one job of `rule`, e.g. log("train", "{arch}", "seed{seed}") -> logs/train/{arch}/seed{seed}.log."""
        return "/".join([self.results, "logs", rule, *parts]) + ".log"
