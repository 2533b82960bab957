"""Where a run's outputs live, and which rules run a model; importable at parse time (no numpy).

`Layout(config)` gives every path under `results_dir`, so the rules, the scripts and the tests name
a file one way; `check_results_dir` refuses a results_dir those paths cannot live under.
slurm/config.yaml imports GPU_RULES (YTE `__definitions__`) to send exactly these rules to
HEADSTAB_GPU_PARTITION with the GPU constraint and model; tests/workflow/test_plan.py checks that
they are exactly the rules whose `resources:` declare `gpu` (workflow/rules/*.smk). A new rule that
runs a model declares `gpu=MODEL_GPUS` (common.smk) and is added here.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePath

from headstab.plan.spec import ConfigError
from headstab.plan.yaml_files import bounded_repr, bounded_text

# the record beside a table or figure: tables/x.csv -> tables/x.csv.provenance.json, figures/x.png -> ...png.provenance.json
RECORD_SUFFIX = ".provenance.json"

# The rules that run a model: training, the activation caches, the validation perplexity of every
# refit (optimizers.smk, §4.5), the anchor's head ablations (ablation.smk, §4.8), the training
# snapshots' caches (snapshots.smk), the head-type probe passes (head_types.smk, noise_ceiling.smk), neurons.smk's stream.
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
    "head_type_scores_held_out",
    "noise_ceiling_scores",
    "neuron_statistics",
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
    "head_type_scores_held_out",
    "noise_ceiling_scores",
    "neuron_statistics",
)


def check_results_dir(results_dir: str) -> None:
    """ConfigError unless results_dir names a directory other than the file system's root, inside the working
    directory after symlinks are followed, or absolute (on purpose), that is or can be made a directory (no regular
    file at it or above it)."""
    if not results_dir.strip("/ "):  # the rules' paths are f"{results_dir}/data": '' and '/' put them at the root
        raise ConfigError(
            f"config key 'results_dir': {bounded_repr(results_dir)} names no directory, so every output would land at "
            "the root of the file system (/data, /logs, ...); give a directory, e.g. results_dir: results/my_run"
        )
    if results_dir.startswith("~"):
        home = os.path.expanduser(results_dir)
        written_out = f"results_dir: {home}" if not home.startswith("~") else "its absolute path"
        raise ConfigError(
            f"config key 'results_dir': {bounded_repr(results_dir)} starts with '~', which is not expanded: the outputs "
            f"would land in a directory named '~' below the one snakemake runs in; write the path out ({written_out})"
        )
    path, cwd = Path(results_dir), Path.cwd()
    resolved = Path(os.path.realpath(cwd / path))  # a symlink below the working directory may lead anywhere
    if not path.is_absolute() and resolved != cwd and cwd not in resolved.parents:
        through = " (through a symbolic link)" if resolved != Path(os.path.normpath(cwd / path)) else ""
        raise ConfigError(
            f"config key 'results_dir': {bounded_repr(results_dir)} resolves to {bounded_text(str(resolved))}{through}, "
            f"outside the directory snakemake runs in ({cwd}); give a relative path below it, or, to write outside "
            f"it on purpose, the absolute path (results_dir: {bounded_text(str(resolved))})"
        )
    try:
        for candidate in (path, *path.parents):
            if candidate.is_dir():
                return
            if candidate.exists():
                where = "is a file" if candidate == path else f"is below {candidate}, which is a file"
                raise ConfigError(
                    f"config key 'results_dir': {bounded_text(results_dir)} {where}, not a directory; point results_dir "
                    "at a directory (it is created if missing; relative paths start at the directory snakemake runs in)"
                )
    except OSError as error:  # a name longer than the file system allows, a directory that cannot be read
        raise ConfigError(
            f"config key 'results_dir': {bounded_repr(results_dir)} cannot be a directory here ({error.strerror}); "
            "give a shorter or readable path"
        ) from None


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
        """Written once every prompt set fits n_ctx tokens of `tokenizer`; beside the tokenizer, lost only with it."""
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
        """A hub held-out text (wikitext-2-raw-v1_test, neurons.heldout's) as one token shard in `tokenizer`'s ids."""
        return f"{self.results}/data/heldout/{dataset}/{tokenizer}.npy"

    # -- refits (§3.1-3.2)
    def checkpoint_dir(self, arch: str, seed: int | str) -> str:
        return f"{self.results}/{arch}/checkpoints/seed{seed}"

    def final_weights(self, arch: str, seed: int | str) -> str:
        return self.checkpoint_file(arch, seed, "final.pt")

    def checkpoint_file(self, arch: str, seed: int | str, name: str) -> str:
        """A refit's final.pt, meta.json or train_log.csv."""
        return f"{self.checkpoint_dir(arch, seed)}/{name}"

    def training_dir(self, arch: str, seed: int | str) -> str:
        """Where a train job trains the refit: its full states, snapshots and outputs, which rule publish_refit then
        links to final_weights' directory (a train job of k refits declares one record, not k refits' files)."""
        return f"{self.checkpoint_dir(arch, seed)}/training"

    def train_block_record(self, arch: str, block: str) -> str:
        """Written by the train job of one block of refits once every one of them is trained."""
        return f"{self.results}/{arch}/checkpoints/blocks/{block}.json"

    def train_outputs(self, arch: str, seeds: list[int]) -> list[str]:
        names = ("final.pt", "train_log.csv", "meta.json")
        return [self.checkpoint_file(arch, seed, name) for seed in seeds for name in names]

    # -- provenance audit of a hub family (headstab.refits.audit)
    def refit_digest(self, arch: str, seed: int | str) -> str:
        """The weights digest of a fetched refit's final.pt (its analysed revision)."""
        return f"{self.results}/{arch}/audit/seed{seed}/final.digest.json"

    def revision_digest(self, arch: str, seed: int | str, revision: str) -> str:
        """The weights digest of one audited revision of a family's seed (before the analysed one)."""
        return f"{self.results}/{arch}/audit/seed{seed}/revisions/{revision}.digest.json"

    def audit_record(self, arch: str) -> str:
        """Written once the family's audit passes: every analysis of the family reads it."""
        return f"{self.results}/{arch}/audit/audit.json"

    def cache_path(self, arch: str, seed: int | str) -> str:
        return f"{self.results}/{arch}/caches/seed{seed}.h5"

    def cache_block_record(self, arch: str, block: str) -> str:
        """Written by the cache job of one block of refits (compute.cache_refits_per_job) once each refit's cache
        is written to cache_block_file, which rule publish_cache then links to cache_path."""
        return f"{self.results}/{arch}/caches/blocks/{block}.json"

    def cache_block_file(self, arch: str, block: str, seed: int | str) -> str:
        return f"{self.results}/{arch}/caches/blocks/{block}/seed{seed}.h5"

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

    def snapshot_cache_block_record(self, arch: str, step: int | str, block: str) -> str:
        """cache_block_record of the refits' snapshot at training step `step`."""
        return f"{self.snapshot_dir(arch, step)}/caches/blocks/{block}.json"

    def snapshot_cache_block_file(self, arch: str, step: int | str, block: str, seed: int | str) -> str:
        return f"{self.snapshot_dir(arch, step)}/caches/blocks/{block}/seed{seed}.h5"

    def snapshot_grouped_similarity_path(self, arch: str, step: int | str, promptset: str) -> str:
        return f"{self.snapshot_dir(arch, step)}/similarity/{promptset}.groups.h5"

    # -- MLP neurons: streamed statistics of each refit pair and every ordered pair's maxima (docs/beyond_the_paper.md)
    def neuron_statistics_dir(self, arch: str) -> str:
        """One .npz per refit pair, seed<a>_seed<b>.npz (headstab.neurons.statistics_files)."""
        return f"{self.results}/{arch}/neurons/pairs"

    def neuron_maxima_path(self, arch: str) -> str:
        return f"{self.results}/{arch}/neurons/maxima.npz"

    # -- tables and figures: per architecture, per Adam/AdamW pair (named by its Adam member), across all
    def table_path(self, arch: str, name: str) -> str:
        return f"{self.results}/{arch}/tables/{name}.csv"

    @staticmethod
    def table_record(table: str) -> str:
        """The record written beside a table (headstab.table_files.write_table): its sha256, rule and inputs."""
        return table + RECORD_SUFFIX

    @staticmethod
    def figure_record(figure: str) -> str:
        """The record written beside a figure (headstab.table_files.write_figure_records): sha256, rule, inputs."""
        return figure + RECORD_SUFFIX

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

    def summary_page(self, name: str) -> str:
        """A page of the report's summary written as HTML by its rule (e.g. trained_in_types)."""
        return f"{self.results}/summary/{name}.html"

    def headline_dir(self) -> str:
        """The headline's pages per statistic (rule headline_summary)."""
        return f"{self.results}/summary/headline"

    def log(self, rule: str, *parts: str) -> str:
        """The log file of one job of `rule`, e.g. log("train", "{arch}", "seed{seed}") -> logs/train/{arch}/seed{seed}.log."""
        return "/".join([self.results, "logs", rule, *parts]) + ".log"

    @staticmethod
    def parse(path: str | PurePath) -> "ParsedPath | None":
        """The inverse of every path method: what the file at `path` is (`parse_path`)."""
        return parse_path(path)

    def benchmark(self, rule: str, *parts: str) -> str:
        """The `benchmark:` file of one job of `rule` (wall time, memory), laid out as its log."""
        return "/".join([self.results, "benchmarks", rule, *parts]) + ".tsv"


# Every kind of file the workflow writes under results_dir, from its place there (the paths of Layout, most
# specific first), with the rule that writes it (None: several rules, or Snakemake itself).
_FILES = (
    (r"/snapshots/step0/weights/seed[^/]+/(final\.pt|meta\.json)$", "snapshot weights", "init_weights"),
    (r"/snapshots/step[1-9]\d*/weights/seed[^/]+/(final\.pt|meta\.json)$", "snapshot weights", "snapshot_weights"),
    # a cache job writes its block's caches in caches/blocks/, which publish_cache links to caches/ (the same file)
    (r"/snapshots/step\d+/caches/blocks/[^/]+/seed[^/]+\.h5$", "activation cache", "cache_snapshot_activations"),
    (r"/snapshots/step\d+/caches/blocks/[^/]+\.json$", "cache block record", "cache_snapshot_activations"),
    (r"/snapshots/step\d+/caches/seed[^/]+\.h5$", "activation cache", "publish_snapshot_cache"),
    (
        r"/snapshots/step\d+/similarity/[^/]+\.groups\.h5$",
        "prompt-group similarity",
        "snapshot_prompt_group_similarity",
    ),
    (r"/checkpoints/seed[^/]+/(training/)?snapshots/step\d+/(final\.pt|meta\.json)$", "snapshot weights", "train"),
    (r"/checkpoints/seed[^/]+/(training/)?state_\d+\.pt(\.sha256)?$", "full-state checkpoint", "train"),
    (r"/checkpoints/seed[^/]+/training/(final\.pt|meta\.json|train_log\.csv)$", "checkpoint", "train"),
    # a trained refit's outputs, linked from its training directory once its block of refits is trained
    (r"/checkpoints/seed[^/]+/(final\.pt|meta\.json|train_log\.csv)$", "checkpoint", "publish_refit"),
    (r"/checkpoints/blocks/[^/]+\.json$", "train block record", "train"),
    (r"/audit/seed[^/]+/revisions/[^/]+\.digest\.json$", "weights digest", "digest_revision"),
    (r"/audit/seed[^/]+/final\.digest\.json$", "weights digest", "digest_refit"),
    (r"/audit/audit\.json$", "audit record", "audit_family"),
    (r"/caches/blocks/[^/]+/seed[^/]+\.h5$", "activation cache", "cache_activations"),
    (r"/caches/blocks/[^/]+\.json$", "cache block record", "cache_activations"),
    (r"/caches/seed[^/]+\.h5$", "activation cache", "publish_cache"),
    (r"/neurons/pairs/seed[^/]+_seed[^/]+\.npz$", "neuron statistics", "neuron_statistics"),
    (r"/neurons/maxima\.npz$", "neuron maxima", "neuron_statistics"),
    (r"/neurons/pairs/\.snakemake_timestamp$", "directory timestamp", "neuron_statistics"),  # directory() output
    (r"/similarity/[^/]+\.groups\.h5$", "prompt-group similarity", "prompt_group_similarity"),
    (r"/similarity/[^/]+\.h5$", "pair similarity", "pair_similarity"),
    (r"/data/heldout/wikitext-2-raw-v1_test/[^/]+\.(npy|json)$", "held-out shard", "heldout_wikitext"),
    (r"/data/heldout/[^/]+/[^/]+\.(npy|json)$", "held-out shard", "heldout_neuron_text"),  # neurons.heldout's
    (r"/data/[^/]+/shard_\d+\.(npy|json)$", "token shard", "tokenize_shard"),
    (r"/data/[^/]+/meta\.json$", "corpus meta", "corpus_meta"),
    (r"/data/[^/]+/environment\.json$", "build environment", "corpus_meta"),
    (r"/tokenizers/[^/]+/environment\.json$", "build environment", None),  # train_ or fetch_tokenizer
    (r"/data/[^/]+/text\.jsonl$", "corpus text", None),  # synthetic_text, or planted_text for planted repeats
    (r"/tokenizers/[^/]+/prompt_check/n_ctx\d+\.json$", "prompt check", "check_prompts"),
    (r"/tokenizers/[^/]+/[^/]+$", "tokenizer", None),
    (r"/summary/configuration\.yaml$", "configuration", "report_configuration"),
    (r"/summary/report_tables(/.+)?$", "report page", "report_summary_tables"),
    (r"/summary/headline(/.+)?$", "report page", "headline_summary"),
    (r"/report_tables(/.+)?$", "report page", "report_tables"),
    (r"/tables/[^/]+\.csv$", "table", None),
    (r"/tables/[^/]+\.csv\.provenance\.json$", "table record", None),  # written with its table (write_table)
    (r"/figures/[^/]+\.png$", "figure", None),
    (r"/figures/[^/]+\.png\.provenance\.json$", "figure record", None),  # written with its figure
    (r"/logs/.+\.log$", "log", None),
    (r"/benchmarks/.+\.tsv$", "benchmark", None),
    (r"/[^/]+\.(html|zip)$", "report", None),  # snakemake --report
)


def _file_entry(path: str | PurePath) -> tuple[str, str | None] | None:
    text = "/" + PurePath(path).as_posix().lstrip("/")
    return next(((kind, rule) for pattern, kind, rule in _FILES if re.search(pattern, text)), None)


@dataclass(frozen=True)
class ParsedPath:
    """What `Layout.parse` reads from a path under results_dir. kind: what the file is ("checkpoint",
    "activation cache", "table", ...); rule: the rule that writes it (None where the path alone does not
    tell); scope of a table or figure: "arch", "compare" (an Adam/AdamW pair, named by its Adam member) or
    "summary" ("" for other files), with its architecture; name: the file's name without its suffixes."""

    kind: str
    rule: str | None
    scope: str
    arch: str
    name: str


def parse_path(path: str | PurePath) -> ParsedPath | None:
    """Layout's inverse: what the workflow file `path` is, from its place under results_dir; None for a file
    the workflow does not write."""
    entry = _file_entry(path)
    if entry is None:
        return None
    kind, rule = entry
    parts = PurePath(path).parts
    scope, arch = "", ""
    if kind in ("table", "figure") and len(parts) >= 3:
        holder = parts[-3]  # the directory holding tables/ or figures/
        if holder == "summary":
            scope = "summary"
        elif len(parts) >= 4 and parts[-4] == "compare":
            scope, arch = "compare", holder
        else:
            scope, arch = "arch", holder
    return ParsedPath(kind, rule, scope, arch, PurePath(path).name.split(".")[0])


def file_kind(path: str | PurePath) -> str | None:
    """What the workflow file `path` is ("checkpoint", "activation cache", "table", ...; headstab.provenance
    traces each), from its place under results_dir; None for a file the workflow does not write."""
    parsed = parse_path(path)
    return parsed.kind if parsed else None


def writer_rule(path: str | PurePath) -> str | None:
    """The rule that writes `path` (a file under results_dir, laid out as Layout says), or None where the
    path alone does not tell (tables and figures, a tokenizer's files). A refit's checkpoint files are
    train's unless the refit was fetched or copied: headstab.refits.models.weights_rule reads its meta.json."""
    parsed = parse_path(path)
    return parsed.rule if parsed else None
