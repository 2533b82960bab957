"""Seeded families from the hub: independently seeded refits of a causal LM that someone else trained.

An architecture with `source: hub_family` is not trained here: each seed's model is a Hugging Face
causal LM (any architecture TransformerLens 4's `TransformerBridge.boot_transformers` supports; tested:
GPT-2 and GPT-NeoX), from the hub or from a local directory saved with `save_pretrained`. Config keys of
the architecture's entry:

- `models`: one template for every seed, `{id: "EleutherAI/pythia-70m-seed{seed}", revision: step1000}`
  or `{path: "/data/family/seed{seed}"}`, or a mapping seed -> `{id | path, revision}`;
- `revision`: the default revision of the `id`s (unset: main); a model's own `revision` wins;
- `tokenizer`: a `tokenizers` entry, the family's own tokenizer (source hub with the first seed's id, or
  local with its directory); rule fetch_family refuses a seed whose tokenizer has another vocabulary.

The dimensions (n_layers, n_heads, d_model, d_head, d_mlp, n_ctx, d_vocab) come from the model's
`config.json`: read at parse time from a local `path`; for hub `id`s (not reachable when the workflow
plans) they must be set in the entry (or architecture_defaults); rule fetch_family checks them against the
downloaded config.
A model or tokenizer directory whose config.json or tokenizer_config.json has an `auto_map` (a class of
the model's own Python code) is refused: at parse time for a local `path`, by rule fetch_family for a
hub `id`; every from_pretrained passes trust_remote_code=False.
Importable at parse time (no torch, no transformers).
"""

from __future__ import annotations

import codecs
import json
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from headstab.plan.family_audit import AuditSettings, audit_settings
from headstab.plan.layout import Layout
from headstab.plan.spec import ConfigError
from headstab.plan.yaml_files import bounded_repr, bounded_text

HUB_FAMILY = "hub_family"
DIMENSIONS = ("n_layers", "n_heads", "d_model", "d_head", "d_mlp", "n_ctx", "d_vocab")
MODEL_KEYS = ("id", "path", "revision")
REVISION_FIELD = "{revision}"  # in a local path: where each revision's directory differs
# HF config.json keys of each dimension, per model_type; "*" for any other model_type.
_HF_KEYS = {
    "gpt2": {"n_layers": "n_layer", "n_heads": "n_head", "d_model": "n_embd", "n_ctx": "n_positions"},
    "*": {
        "n_layers": "num_hidden_layers",
        "n_heads": "num_attention_heads",
        "d_model": "hidden_size",
        "n_ctx": "max_position_embeddings",
    },
}
_ROTARY_MODEL_TYPES = ("gpt_neox", "gptj", "llama", "mistral", "qwen2")
_ACT_FNS = ("gelu", "gelu_new", "relu", "silu")
# Files in which an `auto_map` key makes transformers import Python code shipped with the model.
REMOTE_CODE_FILES = ("config.json", "tokenizer_config.json")
REMOTE_CODE_ADVICE = (
    "headstab never runs a model's own code (trust_remote_code=False): use a model whose architecture "
    "transformers ships (e.g. GPT-2, GPT-NeoX), or remove the key if transformers has the class it names"
)


@dataclass(frozen=True)
class FamilyModel:
    """One seed's model: a hub repository `id` at `revision`, or a local `path` (save_pretrained), whose
    `{revision}` field, if it has one, names the directory of each revision."""

    id: str | None = None
    path: str | None = None
    revision: str | None = None

    @property
    def directory(self) -> str | None:
        """A local model's directory at its revision."""
        return None if self.path is None else self.path.replace(REVISION_FIELD, self.revision or "")

    @property
    def location(self) -> str:
        """What from_pretrained reads: the hub id or the local directory."""
        return str(self.id if self.id is not None else self.directory)

    @property
    def identity(self) -> str:
        return f"{self.id}@{self.revision or 'main'}" if self.id is not None else str(self.directory)

    @property
    def revision_name(self) -> str:
        """The analysed revision's name: its revision, else main (a hub id) or final (a local directory)."""
        return self.revision or ("main" if self.id is not None else "final")

    @property
    def has_revisions(self) -> bool:
        """Whether other revisions of this model can be found: a hub id, or a path with a {revision} field."""
        return self.id is not None or REVISION_FIELD in str(self.path)

    def at(self, revision: str) -> FamilyModel:
        """The same model at another revision."""
        return replace(self, revision=revision)


@dataclass(frozen=True)
class FamilySource:
    """How a family's `{arch}/checkpoints/seed{s}/final.pt` is made: rule fetch_family (headstab.refits.hub_models)."""

    models: tuple[tuple[int, FamilyModel], ...]
    kind: str = HUB_FAMILY
    audit: AuditSettings = field(default=AuditSettings(), compare=False)

    trained = False

    @property
    def needs_network(self) -> bool:
        return any(model.id is not None for _, model in self.models)

    def model(self, seed: int | str) -> FamilyModel:
        for known, model in self.models:
            if known == int(seed):
                return model
        raise KeyError(f"no model for seed {seed}; the family has seeds {[known for known, _ in self.models]}")

    def local_inputs(self, seed: int | str) -> list[str]:
        """Input files of one fetch_family job: a local model's config.json (a changed model refetches)."""
        model = self.model(seed)
        return [str(Path(model.directory) / "config.json")] if model.directory is not None else []

    def to_dict(self, seeds: list[int] | None = None) -> dict[str, Any]:
        """Plain data (Snakemake params), of every seed or of `seeds` only."""
        models = {
            str(seed): {k: v for k, v in vars(m).items() if v is not None}
            for seed, m in self.models
            if seeds is None or seed in seeds
        }
        return {"kind": self.kind, "models": models}


def source_from_dict(values: dict[str, Any]) -> FamilySource:
    """FamilySource from `FamilySource.to_dict()` output (Snakemake params)."""
    models = tuple((int(seed), FamilyModel(**model)) for seed, model in values["models"].items())
    return FamilySource(models)


def _model_json(file: Path) -> Any:
    """The JSON of one of a model's files, read past a leading byte-order mark; ValueError when it is not JSON."""
    try:
        return json.loads(file.read_bytes().decode("utf-8-sig"))
    except RecursionError as error:  # nested deeper than the parser goes
        raise ValueError(f"{error}") from None


def remote_code(directory: str | Path) -> str | None:
    """Why `directory` cannot be loaded without its own Python code, or be checked for it, with the fix; or None.

    A config.json or tokenizer_config.json with key `auto_map` names classes of the model's own code; one that is
    not JSON cannot be checked for it. An editor's byte-order mark does not hide the key, and is refused after the
    check: transformers cannot read a file that starts with one.
    """
    for name in REMOTE_CODE_FILES:
        file = Path(directory) / name
        if not file.is_file():  # from_pretrained fails on a missing config.json, naming it
            continue
        try:
            data = _model_json(file)
        except (OSError, ValueError) as error:
            return (
                f"{file} cannot be read as JSON ({bounded_text(str(error))}), so whether it names the model's own "
                "code (key 'auto_map') cannot be checked; repair the file or fetch the model again"
            )
        if isinstance(data, dict) and "auto_map" in data:
            return f"{file} has key 'auto_map' (classes from the model's own Python code); {REMOTE_CODE_ADVICE}"
        if file.read_bytes().startswith(codecs.BOM_UTF8):
            return (
                f"{file} starts with a UTF-8 byte-order mark, which transformers cannot read; remove it "
                f"(sed -i '1s/^\\xEF\\xBB\\xBF//' {shlex.quote(str(file))})"
            )
    return None


def audit_files(layout: Layout, family: str, source: FamilySource) -> list[tuple[int, str, str]]:
    """(seed, revision, digest file) of every checkpoint the audit of `family` reads, each seed's in training
    order: audit.revisions (rule digest_revision), then the analysed revision (rule digest_refit, of final.pt)."""
    files = []
    for seed, model in source.models:
        files += [
            (seed, revision, layout.revision_digest(family, seed, revision)) for revision in source.audit.revisions
        ]
        files.append((seed, model.revision_name, layout.refit_digest(family, seed)))
    return files


def _is_template(models: dict[Any, Any]) -> bool:
    return set(map(str, models)) <= set(MODEL_KEYS)


def _resolve_model(entry: dict[str, Any], seed: int, where: str, default_revision: str | None) -> FamilyModel:
    if ("id" in entry) == ("path" in entry):
        raise ConfigError(
            f"config key '{where}': give exactly one of id (a hub repository) or path (a local directory)"
        )
    try:  # a path keeps its {revision} field: each audited revision fills it in
        values = {
            key: str(entry[key]).format(seed=seed, revision=REVISION_FIELD)
            for key in MODEL_KEYS
            if entry.get(key) is not None
        }
    except (KeyError, IndexError, ValueError) as error:
        raise ConfigError(
            f"config key '{where}': {bounded_repr(entry)} is not a valid template of {{seed}} ({error!r})"
        ) from error
    values.setdefault("revision", default_revision)
    if "path" in values and REVISION_FIELD in values["path"] and values["revision"] is None:
        raise ConfigError(
            f"config key '{where}.path': {bounded_repr(values['path'])} has a {REVISION_FIELD} field; set the analysed "
            "revision (the entry's revision, e.g. revision: final)"
        )
    model = FamilyModel(**values)
    if model.path is not None:
        check_local_model(model, f"{where}.path", seed)
    return model


def check_local_model(model: FamilyModel, where: str, seed: int) -> None:
    """A local model's directory exists and runs no code of its own; ConfigError naming `where` otherwise."""
    directory = str(model.directory)
    which = f"seed {seed}, revision {model.revision}" if REVISION_FIELD in str(model.path) else f"seed {seed}"
    if not Path(directory).is_dir():
        raise ConfigError(
            f"config key '{where}': {bounded_repr(directory)} ({which}) is not a directory; point it at a model "
            "saved with save_pretrained (config.json and its weights), or use id: for a hub repository"
        )
    reason = remote_code(directory)
    if reason is not None:
        raise ConfigError(f"config key '{where}' ({which}): {reason}")


def family_source(config: dict[str, Any], name: str, seeds: tuple[int, ...]) -> FamilySource:
    """The models of family `name` for `seeds`, checked. Raises ConfigError naming the key."""
    merged = {**config["architecture_defaults"], **config["architectures"][name]}
    where = f"architectures.{name}.models"
    models = merged.get("models")
    if not models:
        raise ConfigError(
            f"config key '{where}': source hub_family needs the models of its seeds, e.g. "
            "{id: 'EleutherAI/pythia-70m-seed{seed}'} or {1: {path: /data/seed1}, 2: {path: /data/seed2}}"
        )
    processing = config.get("analysis", {}).get("weight_processing") or []
    if processing:
        raise ConfigError(
            f"config key 'analysis.weight_processing': {bounded_repr(processing)} applies to refits in our checkpoint format; "
            f"architecture '{name}' (source hub_family) is analysed with its weights as published; set it to []"
        )
    if merged.get("snapshot_steps"):
        raise ConfigError(
            f"config key 'architectures.{name}.snapshot_steps': a hub family is not trained here, so there are no "
            "snapshots to keep; remove the key (load a checkpoint revision as a family of its own instead)"
        )
    revision = merged.get("revision")
    if _is_template(models):
        resolved = {seed: _resolve_model(models, seed, where, revision) for seed in seeds}
    else:
        per_seed = {int(seed): entry for seed, entry in models.items()}
        missing = [seed for seed in seeds if seed not in per_seed]
        if missing:
            raise ConfigError(
                f"config key '{where}': no model for seed(s) {bounded_repr(missing)}; it has seeds {bounded_repr(sorted(per_seed))} "
                "(add them, or select fewer seeds with the entry's seeds or run.seeds)"
            )
        resolved = {seed: _resolve_model(per_seed[seed], seed, f"{where}.{seed}", revision) for seed in seeds}
    return FamilySource(tuple(resolved.items()), audit=_family_audit(config, name, resolved))


def _family_audit(config: dict[str, Any], name: str, models: dict[int, FamilyModel]) -> AuditSettings:
    """The family's audit settings; every audited revision of a local model must be a directory."""
    settings = audit_settings(config, name, tuple(model.revision_name for model in models.values()))
    for seed, model in models.items():
        if settings.revisions and not model.has_revisions:
            raise ConfigError(
                f"config key 'architectures.{name}.audit.revisions': the path of seed {seed}, "
                f"{bounded_repr(model.path)}, has no {REVISION_FIELD} field, so revisions "
                f"{bounded_repr(list(settings.revisions))} cannot be found; put it in the path "
                "(e.g. /data/run/seed{seed}/{revision}) or list no revisions"
            )
        if model.path is not None:
            for revision in settings.revisions:
                check_local_model(model.at(revision), f"architectures.{name}.audit.revisions", seed)
    return settings


def hf_dimensions(hf_config: dict[str, Any]) -> dict[str, Any]:
    """Our architecture keys from a Hugging Face config (config.json as a dict).

    n_layers, n_heads, d_model, d_head (d_model / n_heads), d_mlp (intermediate_size, n_inner or
    4 d_model), n_ctx, d_vocab, attn_only (false), and positional_embedding_type and act_fn where known.
    Raises ConfigError naming the missing key.
    """
    model_type = hf_config.get("model_type", "?")
    keys = _HF_KEYS.get(model_type, _HF_KEYS["*"])
    out: dict[str, Any] = {}
    for ours, theirs in keys.items():
        if hf_config.get(theirs) is None:
            raise ConfigError(
                f"Hugging Face config of model_type {bounded_repr(model_type)} has no {theirs!r} (our {ours}); set the "
                f"architecture's {', '.join(DIMENSIONS)} in its config entry"
            )
        out[ours] = int(hf_config[theirs])
    out["d_head"] = out["d_model"] // out["n_heads"]
    d_mlp = hf_config.get("intermediate_size") or hf_config.get("n_inner")
    out["d_mlp"] = int(d_mlp) if d_mlp else 4 * out["d_model"]
    out["d_vocab"] = int(hf_config["vocab_size"])
    out["attn_only"] = False
    out["positional_embedding_type"] = "rotary" if model_type in _ROTARY_MODEL_TYPES else "standard"
    act = hf_config.get("activation_function") or hf_config.get("hidden_act")
    if act in _ACT_FNS:
        out["act_fn"] = act
    return out


def family_dimensions(config: dict[str, Any], name: str) -> dict[str, Any]:
    """The dimensions of family `name` that its entry does not set, from the first local model's config.json
    (over architecture_defaults).

    Hub `id`s cannot be read when the workflow plans: then every dimension must be in the entry or in
    architecture_defaults (rule fetch_family checks them). Raises ConfigError naming the keys.
    """
    entry = config["architectures"][name]
    merged = {**config["architecture_defaults"], **entry}
    models = merged.get("models") or {}
    first = models if _is_template(models) else next(iter(models.values()), {})
    if not isinstance(first, dict) or first.get("path") is None:  # hub ids: the entry's (or defaults') values
        missing = [key for key in DIMENSIONS if key not in merged]
        if missing:
            raise ConfigError(
                f"config key 'architectures.{name}': a hub family's dimensions are read from a local model's "
                f"config.json; with hub ids set {', '.join(missing)} in the entry (the model's config.json values)"
            )
        return {}
    if all(key in entry for key in DIMENSIONS):
        return {}
    seed = next(iter(models)) if not _is_template(models) else None
    revision = first.get("revision", merged.get("revision")) or ""
    path = Path(
        str(first["path"]).format(seed=seed if seed is not None else _first_seed(config, name), revision=revision)
    )
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ConfigError(
            f"config key 'architectures.{name}.models': {config_file} does not exist; point path at a directory "
            "saved with save_pretrained"
        )
    try:
        hf_config = _model_json(config_file)
    except (OSError, ValueError) as error:
        hf_config = f"({bounded_text(str(error))})"
    if not isinstance(hf_config, dict):
        raise ConfigError(
            f"config key 'architectures.{name}.models': {config_file} is not a JSON object {bounded_repr(hf_config)}; "
            "point path at a directory saved with save_pretrained, or repair the file"
        )
    found = hf_dimensions(hf_config)
    return {key: value for key, value in found.items() if key not in entry}


def _first_seed(config: dict[str, Any], name: str) -> int:
    seeds = config["run"].get("seeds")
    if seeds is None:
        seeds = {**config["architecture_defaults"], **config["architectures"][name]}.get("seeds", [0])
    return int(seeds["first"] if isinstance(seeds, dict) else seeds[0])
