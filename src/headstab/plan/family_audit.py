"""What the provenance audit of a hub family checks (headstab.refits.audit), read from its config entry.

Config key `architectures.<family>.audit`, over `architecture_defaults.audit` key by key:

- `declared_axis`: what a different seed changes in this family. `both` (the default: initialisation and
  data order, as in the PolyPythias' seed{N} runs and the Stanford CRFM runs), `init_seed` (the
  initialisation only, one data order) or `data_seed` (the data order only, one shared initialisation).
  The audit checks the initialisation half of the claim: different init seeds give different step-0
  weights, one shared init seed gives the same.
- `revisions`: checkpoints of every seed before the analysed revision, in training order; the first is the
  initialisation (step 0), the second, if listed, the first optimizer step after it, whose distance from
  the initialisation the descent check measures (a checkpoint hundreds of steps in has legitimately moved
  most of the seed-to-seed distance). Hub ids: revisions of the repository (`step0`, `step1`); local
  paths: values of a `{revision}` field in the models' path. Empty: the analysed revision alone is
  audited (weights and duplicates; the initialisation and descent are not checked).
- `accept`: findings the user has examined and accepts, by the id the refusal prints.
- `same_init_max`: relative L2 below which two step-0 weights count as one initialisation.
- `descent_max`: the largest descent ratio d(step 0 -> first step) / d(seed to seed at step 0) of a run
  that continues its own initialisation.

Importable at parse time (no torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from headstab.plan.spec import ArchitectureSpec, ConfigError
from headstab.plan.yaml_files import bounded_repr

AXES = ("both", "init_seed", "data_seed")
# Independent draws of a GPT-2 or GPT-NeoX initialisation sit at relative L2 ~1.2-1.4 (1.2475 between the
# decoupled PolyPythias 160M inits); one init stored again in float16 or bfloat16 sits below 2e-3.
SAME_INIT_MAX = 0.1
# A first optimizer step moves a run 4e-4 (lr 1e-4) to 0.07 (lr 1e-2, no warmup) of the seed-to-seed distance in
# headstab's own refits; a run that starts from another initialisation sits at ~1.0.
DESCENT_MAX = 0.5
# Each threshold's default and its bound: a relative L2 lies in [0, 2]; a descent ratio of 1 is no descent at all.
_THRESHOLDS = {"same_init_max": (SAME_INIT_MAX, 2.0), "descent_max": (DESCENT_MAX, 1.0)}
AUDIT_KEYS = ("declared_axis", "revisions", "accept", "same_init_max", "descent_max")
DIMENSION_KEYS = ("n_layers", "n_heads", "d_model", "d_head", "d_mlp", "n_ctx", "d_vocab")


@dataclass(frozen=True)
class AuditSettings:
    """A family's audit: its declared axis, its audited revisions, accepted findings and thresholds."""

    declared_axis: str = "both"
    revisions: tuple[str, ...] = ()
    accept: tuple[str, ...] = ()
    same_init_max: float = SAME_INIT_MAX
    descent_max: float = DESCENT_MAX

    @property
    def shared_init(self) -> bool:
        """Whether the family claims one initialisation for every seed (declared_axis data_seed)."""
        return self.declared_axis == "data_seed"

    @property
    def init_revision(self) -> str | None:
        return self.revisions[0] if self.revisions else None

    @property
    def descent_revision(self) -> str | None:
        """The first checkpoint after the initialisation, whose descent ratio is checked: the second listed."""
        return self.revisions[1] if len(self.revisions) > 1 else None

    def to_dict(self) -> dict[str, Any]:
        return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()}


def settings_from_dict(values: Mapping[str, Any]) -> AuditSettings:
    """AuditSettings from `AuditSettings.to_dict()` output (Snakemake params)."""
    return AuditSettings(**{key: tuple(value) if isinstance(value, list) else value for key, value in values.items()})


def _revision_name(value: Any, where: str) -> str:
    text = str(value)
    if not text or "/" in text or text in (".", ".."):
        raise ConfigError(
            f"config key '{where}': revision {bounded_repr(value)} cannot name a file (it is empty or has a '/'); "
            "give the branch or tag name, or the commit hash"
        )
    return text


def audit_settings(config: Mapping[str, Any], name: str, analysed: tuple[str, ...]) -> AuditSettings:
    """The audit of family `name` (its entry's `audit` over architecture_defaults' key by key), checked.

    analysed: the analysed revision of each seed (a listed revision must not be one of them).
    Raises ConfigError naming the key.
    """
    where = f"architectures.{name}.audit"
    values = {**config["architecture_defaults"].get("audit", {}), **config["architectures"][name].get("audit", {})}
    unknown = sorted(set(values) - set(AUDIT_KEYS))
    if unknown:
        raise ConfigError(f"config key '{where}': unknown key(s) {bounded_repr(unknown)}; use {', '.join(AUDIT_KEYS)}")
    axis = values.get("declared_axis", "both")
    if axis not in AXES:
        raise ConfigError(f"config key '{where}.declared_axis': {bounded_repr(axis)} is not one of {', '.join(AXES)}")
    revisions = tuple(_revision_name(r, f"{where}.revisions") for r in values.get("revisions") or ())
    if len(set(revisions)) < len(revisions):
        raise ConfigError(f"config key '{where}.revisions': {bounded_repr(list(revisions))} lists a revision twice")
    clash = sorted(set(revisions) & set(analysed))
    if clash:
        raise ConfigError(
            f"config key '{where}.revisions': {bounded_repr(clash)} is the analysed revision, which the audit always "
            "reads; list only the checkpoints before it"
        )
    thresholds = {key: float(values.get(key, default)) for key, (default, _) in _THRESHOLDS.items()}
    for key, value in thresholds.items():
        if not 0 < value < _THRESHOLDS[key][1]:
            raise ConfigError(
                f"config key '{where}.{key}': {value} must lie strictly between 0 and {_THRESHOLDS[key][1]}"
            )
    accept = tuple(str(item) for item in values.get("accept") or ())
    return AuditSettings(axis, revisions, accept, **thresholds)


def audit_peers(specs: Mapping[str, ArchitectureSpec], families: list[str]) -> dict[str, list[str]]:
    """{family: the other families of the same dimensions}: only those can hold the same weights, so each
    family's audit compares its digests with theirs (a suite's runs served under each other's names)."""
    shape = {name: tuple(getattr(specs[name], key) for key in DIMENSION_KEYS) for name in families}
    return {name: [other for other in families if other != name and shape[other] == shape[name]] for name in families}
