"""Where an architecture's refits come from: trained by the workflow, or the paper's published refits.

Config key `architectures.<name>.source` (or `architecture_defaults.source`):

- `train` (default): rule `train` trains every seed on the architecture's corpus.
- `published`: rule `fetch_published` downloads each seed's `final.pt` from the hub model repository
  `repo_id` at `revision` (the authors' `karanbali/attention_head_seed_stability`) and converts it.
- `published_local`: the same files from a local directory `path` in the repository's layout (an offline
  cluster's copy, e.g. the authors' `chkpts/`).
- `hub_family`: seeded refits of a Hugging Face causal LM trained elsewhere (`models`; rule fetch_family,
  headstab.plan.hub_families).

`refit_file` is the file of one seed inside the repository (or `path`), a template with the fields
{arch}, {seed}, {n_layers}, {n_heads}. Unset, it is the authors' name for a C4 model:
`{arch}/causal_attn_l{n_layers}_h{n_heads}_seed{seed}_epoch1_c4_gelu/final.pt`, with `causal_attn_only`
for attention-only models; GPT-2-small sets `{arch}/gpt2_seed{seed}_shard9_epoch1_owt/final.pt`.
Importable at parse time (no torch).
"""

from __future__ import annotations

import string
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from headstab.plan.config import architecture_spec
from headstab.plan.hub_families import HUB_FAMILY, FamilySource, family_source
from headstab.plan.spec import ArchitectureSpec, ConfigError
from headstab.plan.yaml_files import bounded_repr

TRAIN, PUBLISHED, PUBLISHED_LOCAL = "train", "published", "published_local"
PUBLISHED_REPO_ID = "karanbali/attention_head_seed_stability"
TEMPLATE_FIELDS = ("arch", "seed", "n_layers", "n_heads")
SOURCE_KEYS = ("source", "repo_id", "revision", "path", "refit_file", "models")


@dataclass(frozen=True)
class CheckpointSource:
    """How one architecture's `{arch}/checkpoints/seed{s}/final.pt` is made (see the module docstring)."""

    kind: str = TRAIN
    repo_id: str | None = None
    revision: str | None = None
    path: str | None = None
    refit_file: str | None = None

    @property
    def trained(self) -> bool:
        return self.kind == TRAIN

    @property
    def needs_network(self) -> bool:
        return self.kind == PUBLISHED

    def file_in_repository(self, spec: ArchitectureSpec, seed: int | str) -> str:
        """The refit's file relative to the repository root (or `path`)."""
        template = self.refit_file or default_refit_file(spec)
        return template.format(arch=spec.name, seed=seed, n_layers=spec.n_layers, n_heads=spec.n_heads)

    def local_file(self, spec: ArchitectureSpec, seed: int | str) -> str:
        """source published_local: the refit's file under `path`."""
        if self.path is None:
            raise ValueError(f"architecture '{spec.name}' (source {self.kind}) has no local path")
        return str(Path(self.path) / self.file_in_repository(spec, seed))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_refit_file(spec: ArchitectureSpec) -> str:
    """The authors' file name of a C4 refit, as a template of {arch} and {seed}."""
    kind = "causal_attn_only" if spec.attn_only else "causal_attn"
    return f"{{arch}}/{kind}_l{spec.n_layers}_h{spec.n_heads}_seed{{seed}}_epoch1_c4_gelu/final.pt"


def _template_fields(template: str, where: str) -> set[str]:
    try:
        return {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
    except ValueError as error:
        raise ConfigError(
            f"config key '{where}': {bounded_repr(template)} is not a valid template ({error})"
        ) from error


def checkpoint_source(config: dict[str, Any], name: str) -> CheckpointSource | FamilySource:
    """The checkpoint source of architecture `name` (its entry over architecture_defaults), checked.

    Raises ConfigError naming the key when a published_local path is missing or refit_file has an unknown field.
    """
    merged = {**config["architecture_defaults"], **config["architectures"][name]}
    kind = merged.get("source", TRAIN)
    where = f"architectures.{name}"
    if kind == HUB_FAMILY:
        return family_source(config, name, architecture_spec(config, name).seeds)
    if "audit" in config["architectures"][name]:
        raise ConfigError(
            f"config key '{where}.audit': only a hub family's checkpoints are audited by the workflow (source "
            f"{kind}); remove the key (refits trained here: python -m headstab.refits.audit {name})"
        )
    if kind == TRAIN:
        return CheckpointSource()
    refit_file = merged.get("refit_file")
    if refit_file is not None:
        unknown = _template_fields(refit_file, f"{where}.refit_file") - set(TEMPLATE_FIELDS)
        if unknown:
            raise ConfigError(
                f"config key '{where}.refit_file' (or architecture_defaults.refit_file): unknown field(s) "
                f"{sorted(unknown)} in {bounded_repr(refit_file)}; use {{{'}, {'.join(TEMPLATE_FIELDS)}}}"
            )
    if kind == PUBLISHED:
        return CheckpointSource(
            kind, merged.get("repo_id", PUBLISHED_REPO_ID), merged.get("revision", "main"), refit_file=refit_file
        )
    path = merged.get("path")
    if path is None or not Path(path).is_dir():
        raise ConfigError(
            f"config key '{where}.path' (or architecture_defaults.path): {bounded_repr(path)} is not a directory; source "
            "published_local reads the published refits from a local copy of the hub repository "
            f"({PUBLISHED_REPO_ID}), with one folder per architecture"
        )
    return CheckpointSource(kind, path=path, refit_file=refit_file)


def checkpoint_sources(config: dict[str, Any], names: list[str]) -> dict[str, CheckpointSource | FamilySource]:
    """{architecture: source} of the architectures a run selects."""
    return {name: checkpoint_source(config, name) for name in names}


def published_inputs(source: CheckpointSource, spec: ArchitectureSpec, seed: int | str) -> list[str]:
    """The input files of one fetch_published job: the local refit file (published_local), none (hub)."""
    return [source.local_file(spec, seed)] if source.kind == PUBLISHED_LOCAL else []


def fetch_mem_mb(spec: ArchitectureSpec) -> int:
    """Memory of one fetch_published job: the float32 state dict three times (loaded, converted, saved) + 1 GB."""
    embeddings = (2 * spec.d_vocab + spec.n_ctx) * spec.d_model
    return int(3 * 4 * (embeddings + spec.n_params) / 1e6) + 1000
