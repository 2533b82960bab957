"""Provenance audit of a seeded family: are its checkpoints what their names claim?

Public seed suites hold checkpoints that are not what their names say: a `step0` equal to `step1`, branches
that serve the final weights, runs of one suite served under another's names, runs that do not descend from
their own `step0`. Before a family is analysed, its audit compares the digests (headstab.refits.weight_digest)
of every seed's checkpoints, in training order: its `audit.revisions`, then the analysed revision.

- duplicate: two checkpoints with identical weights (one sha256), in this family or in a family of the same
  dimensions (its peers); the step-0 weights of seeds that claim one initialisation are expected to be equal.
- partial_duplicate: a tensor equal in two revisions of one seed, that is not equal in every checkpoint of
  the family (a buffer or a constant is).
- init: the relative L2 between seeds at step 0 contradicts the declared axis: different init seeds
  (declared_axis both or init_seed) must start at least `same_init_max` apart, one shared init seed
  (data_seed) closer than that.
- descent: the descent ratio d(step0 -> first step) / d(seed to seed at step 0) must stay below
  `descent_max` (the first step: the second of `audit.revisions`). The denominator is the median step-0
  distance over pairs of seeds with different initialisations; a family without such a pair (a shared
  initialisation) uses the distance expected between independent draws of each seed's step-0 weights
  (weight_digest.independent_draw_distance).

A finding refuses the family with a message naming the family, the checkpoints and the numbers, unless its
id is in `audit.accept`; a family whose seeds vary another axis than declared is relabelled with
`audit.declared_axis` (headstab.plan.family_audit, docs/refits.md "Audit").

    python -m headstab.refits.audit FAMILY [--configfile CONFIG ...] [--results-dir DIR]

audits FAMILY (and compares it with its peers) from the models themselves (a hub download, a local
directory, or a refit trained here: its step-0 and snapshot weights and final.pt), prints the numbers and
exits 1 when the family is refused.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from headstab.plan.family_audit import AuditSettings
from headstab.refits.weight_digest import (
    SKETCH_BUCKETS,
    Checkpoint,
    WeightDigest,
    identical_tensors,
    independent_draw_distance,
    relative_l2,
)


class AuditRefused(ValueError):
    """A family's checkpoints contradict their names; the message lists every finding with its numbers."""


@dataclass(frozen=True)
class Finding:
    """One contradiction: its check, the id that `audit.accept` names it by, and the message with its numbers."""

    check: str
    id: str
    message: str


@dataclass
class AuditResult:
    """What the audit of one family measured and found; `passed` when every finding is accepted."""

    family: str
    settings: AuditSettings
    checkpoints: list[Checkpoint]
    peers: list[str]
    step0_distances: dict[tuple[int, int], float] = field(default_factory=dict)
    reference: dict[int, tuple[float, str]] = field(default_factory=dict)
    descent: dict[int, tuple[str, str, float, float]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)

    @property
    def refusing(self) -> list[Finding]:
        return [finding for finding in self.findings if finding.id not in self.settings.accept]

    @property
    def passed(self) -> bool:
        return not self.refusing


def _by_seed(checkpoints: Sequence[Checkpoint]) -> dict[int, list[Checkpoint]]:
    seeds: dict[int, list[Checkpoint]] = {}
    for checkpoint in checkpoints:
        seeds.setdefault(checkpoint.seed, []).append(checkpoint)
    return seeds


def _short(sha256: str) -> str:
    return sha256[:12]


def duplicate_findings(
    checkpoints: Sequence[Checkpoint], settings: AuditSettings, peers: Mapping[str, Sequence[Checkpoint]]
) -> list[Finding]:
    """Checkpoints with one sha256: each against the first of its group (this family's first), in this family
    and against its peers; step-0 pairs of two seeds are the init check's."""
    named = [(c.label, c) for c in checkpoints]
    named += [(f"{family}/{c.label}", c) for family, theirs in peers.items() for c in theirs]
    own = {id(c) for c in checkpoints}
    groups: dict[str, list[tuple[str, Checkpoint]]] = {}
    for name, checkpoint in named:
        groups.setdefault(checkpoint.digest.sha256, []).append((name, checkpoint))
    findings = []
    for sha, members in groups.items():
        first_name, first = members[0]
        for name, other in members[1:]:
            if id(other) not in own and id(first) not in own:
                continue  # two peers' checkpoints: their own audit's
            both_init = {first.revision, other.revision} == {settings.init_revision} and id(other) in own
            if both_init and first.seed != other.seed:  # own step-0 weights of two seeds: the init check's
                continue
            findings.append(
                Finding(
                    "duplicate",
                    f"duplicate:{first_name}={name}",
                    f"{first_name} ({first.identity}) and {name} ({other.identity}) have identical weights "
                    f"(sha256 {_short(sha)}): two names for one checkpoint",
                )
            )
    return findings


def partial_duplicate_findings(checkpoints: Sequence[Checkpoint]) -> list[Finding]:
    """Tensors equal in two revisions of one seed (whose whole weights differ) that are not equal in every
    checkpoint of the family."""
    constant = set.intersection(*(set(identical_tensors(checkpoints[0].digest, c.digest)) for c in checkpoints))
    findings = []
    for mine in _by_seed(checkpoints).values():
        for a, b in combinations(mine, 2):
            if a.digest.sha256 == b.digest.sha256:
                continue  # a whole duplicate
            shared = [name for name in identical_tensors(a.digest, b.digest) if name not in constant]
            if shared:
                findings.append(
                    Finding(
                        "partial_duplicate",
                        f"partial_duplicate:{a.label}={b.label}",
                        f"{a.label} and {b.label} share {len(shared)} of {len(a.digest.tensors)} tensors exactly "
                        f"({', '.join(shared[:3])}{', ...' if len(shared) > 3 else ''}), which differ elsewhere in "
                        "the family: parts of one checkpoint served under two names",
                    )
                )
    return findings


def _init_digests(checkpoints: Sequence[Checkpoint], revision: str) -> dict[int, WeightDigest]:
    return {c.seed: c.digest for c in checkpoints if c.revision == revision}


def init_findings(result: AuditResult, family_checkpoints: Sequence[Checkpoint]) -> list[Finding]:
    """Every pair of seeds at step 0 against the declared axis; fills result.step0_distances."""
    settings, family = result.settings, result.family
    init = _init_digests(family_checkpoints, str(settings.init_revision))
    findings = []
    for s, t in combinations(sorted(init), 2):
        distance = relative_l2(init[s], init[t])
        result.step0_distances[(s, t)] = distance
        same = distance < settings.same_init_max
        if same == settings.shared_init:
            continue
        pair = f"seed{s}@{settings.init_revision} and seed{t}@{settings.init_revision}"
        if same:
            claim = (
                f"they start from one initialisation, but declared_axis {settings.declared_axis} says their init "
                "seeds differ (declare data_seed if the seeds vary the data order only)"
            )
        else:
            claim = (
                "they start from different initialisations, but declared_axis data_seed says they share one "
                "(declare init_seed or both if the seeds vary the initialisation)"
            )
        findings.append(
            Finding(
                "init",
                f"init:seed{s}-seed{t}",
                f"{pair} of '{family}' are at relative L2 {distance:.4g} (same_init_max {settings.same_init_max}): "
                f"{claim}",
            )
        )
    return findings


def seed_to_seed_reference(result: AuditResult, family_checkpoints: Sequence[Checkpoint]) -> dict[int, tuple]:
    """Each seed's descent denominator: (distance, where it comes from); after init_findings."""
    init = _init_digests(family_checkpoints, str(result.settings.init_revision))
    distinct = [d for d in result.step0_distances.values() if d >= result.settings.same_init_max]
    if distinct:
        value = statistics.median(distinct)
        return {seed: (value, f"median over {len(distinct)} pairs of seeds at step 0") for seed in init}
    return {
        seed: (independent_draw_distance(digest), "independent draws of its step-0 weights' per-tensor distribution")
        for seed, digest in init.items()
    }


def descent_findings(result: AuditResult, family_checkpoints: Sequence[Checkpoint]) -> list[Finding]:
    """Each seed's descent ratio from its init revision to the first revision after it; fills result.descent."""
    settings = result.settings
    findings = []
    for seed, mine in _by_seed(family_checkpoints).items():
        start = next(c for c in mine if c.revision == settings.init_revision)
        after = next(c for c in mine if c.revision == settings.descent_revision)
        distance = relative_l2(start.digest, after.digest)
        reference = result.reference[seed][0]
        ratio = distance / reference if reference > 0 else float("inf")
        result.descent[seed] = (start.revision, after.revision, distance, ratio)
        if ratio >= settings.descent_max:
            findings.append(
                Finding(
                    "descent",
                    f"descent:seed{seed}",
                    f"{after.label} ({after.identity}) is at relative L2 {distance:.4g} from its own "
                    f"{start.label}, {ratio:.4g} of the seed-to-seed distance {reference:.4g} (descent_max "
                    f"{settings.descent_max}): it does not continue its own initialisation",
                )
            )
    return findings


def audit_family(
    family: str,
    settings: AuditSettings,
    checkpoints: Sequence[Checkpoint],
    peers: Mapping[str, Sequence[Checkpoint]] | None = None,
) -> AuditResult:
    """The audit of `family` from its checkpoints (each seed's in training order: settings.revisions, then the
    analysed revision) and its peers' (families of the same dimensions)."""
    peers = dict(peers or {})
    result = AuditResult(family, settings, list(checkpoints), sorted(peers))
    result.findings += duplicate_findings(checkpoints, settings, peers)
    result.findings += partial_duplicate_findings(checkpoints)
    if settings.init_revision is None:
        result.not_checked.append("init and descent: audit.revisions lists no initialisation (step 0)")
        return result
    result.findings += init_findings(result, checkpoints)
    result.reference = seed_to_seed_reference(result, checkpoints)
    if settings.descent_revision is None:
        result.not_checked.append(
            "descent: no checkpoint of the first step after the initialisation (the second of audit.revisions; "
            "for refits trained here, a step-1 snapshot)"
        )
        return result
    result.findings += descent_findings(result, checkpoints)
    return result


def refusal_message(result: AuditResult) -> str:
    """Why the family is refused: every finding not accepted, and the three ways on."""
    key = f"architectures.{result.family}.audit"
    lines = [
        f"hub family '{result.family}' is refused by its provenance audit (declared_axis "
        f"{result.settings.declared_axis}; {len(result.refusing)} finding(s)):"
    ]
    lines += [f"  - [{finding.id}] {finding.message}" for finding in result.refusing]
    lines.append(
        f"Correct the family's models or revisions; or, if its seeds vary another axis than declared, set {key}."
        f"declared_axis; or, having checked a finding, accept it by its id in {key}.accept "
        f"(docs/refits.md, Audit). Nothing of '{result.family}' is analysed until then."
    )
    return "\n".join(lines)


def audit_record(result: AuditResult) -> dict[str, Any]:
    """The record the workflow keeps (its `audit` file): every checkpoint's sha256, every number, the findings."""
    return {
        "family": result.family,
        "passed": result.passed,
        "settings": result.settings.to_dict(),
        "sketch_buckets": int(result.checkpoints[0].digest.sketch.size) if result.checkpoints else SKETCH_BUCKETS,
        "peers": result.peers,
        "checkpoints": [
            {"seed": c.seed, "revision": c.revision, "identity": c.identity, "sha256": c.digest.sha256}
            for c in result.checkpoints
        ],
        "step0_relative_l2": [{"seeds": [s, t], "value": d} for (s, t), d in result.step0_distances.items()],
        "descent": [
            {
                "seed": seed,
                "from": start,
                "to": after,
                "relative_l2": distance,
                "ratio": ratio,
                "seed_to_seed": result.reference[seed][0],
                "seed_to_seed_from": result.reference[seed][1],
            }
            for seed, (start, after, distance, ratio) in result.descent.items()
        ],
        "findings": [{"check": f.check, "id": f.id, "message": f.message} for f in result.findings],
        "accepted": [f.id for f in result.findings if f.id in result.settings.accept],
        "not_checked": result.not_checked,
    }


def format_report(result: AuditResult) -> str:
    """The audit's numbers as lines of text: checkpoints, step-0 distances, descent ratios, findings."""
    settings = result.settings
    lines = [
        f"audit of '{result.family}': declared_axis {settings.declared_axis}, same_init_max "
        f"{settings.same_init_max}, descent_max {settings.descent_max}; peers: {', '.join(result.peers) or 'none'}"
    ]
    lines += [f"  {c.label:<24} sha256 {_short(c.digest.sha256)}  {c.identity}" for c in result.checkpoints]
    lines += [f"  step-0 relative L2 seed{s}-seed{t}: {d:.4f}" for (s, t), d in sorted(result.step0_distances.items())]
    lines += [
        f"  descent seed{seed} {start} -> {after}: relative L2 {distance:.3g}, ratio {ratio:.3g} "
        f"(seed to seed {result.reference[seed][0]:.4f}: {result.reference[seed][1]})"
        for seed, (start, after, distance, ratio) in sorted(result.descent.items())
    ]
    lines += [f"  not checked: {reason}" for reason in result.not_checked]
    lines += [f"  {'accepted' if f.id in settings.accept else 'FINDING'} [{f.id}] {f.message}" for f in result.findings]
    lines.append("passed" if result.passed else refusal_message(result))
    return "\n".join(lines)


def command_line_audit(
    family: str, configfiles: list[str], results_dir: str | None, scratch: str | Path
) -> AuditResult:
    """The audit of `family` for `python -m headstab.refits.audit`: a hub family from its models (and its peers
    from theirs), or refits trained here from their step-0 snapshot, other snapshots and final.pt."""
    from headstab.plan.config import architecture_spec
    from headstab.plan.family_audit import audit_peers
    from headstab.plan.hub_families import FamilySource
    from headstab.plan.layout import Layout
    from headstab.plan.sources import checkpoint_source
    from headstab.plan.spec import ConfigError
    from headstab.refits.audit_inputs import model_checkpoints, trained_checkpoints
    from headstab.status import load_run_config

    config = load_run_config(configfiles, results_dir)
    if family not in config["architectures"]:
        raise ConfigError(f"'{family}' is not an architecture of {', '.join(configfiles)}")
    spec = architecture_spec(config, family)
    source = checkpoint_source(config, family)
    if isinstance(source, FamilySource):
        families = [name for name in config["architectures"] if _is_family(config, name)]
        specs = {name: architecture_spec(config, name) for name in families}
        peers = {
            peer: model_checkpoints(peer, checkpoint_source(config, peer), specs[peer], scratch)
            for peer in audit_peers(specs, families)[family]
        }
        return audit_family(family, source.audit, model_checkpoints(family, source, spec, scratch), peers)
    if not source.trained or config["architectures"][family].get("seed_grid"):
        raise ConfigError(
            f"'{family}' is neither a hub family nor trained here with one seed per refit (a seed grid's refits "
            "are audited through its paper architecture): the audit reads its own checkpoints"
        )
    layout = Layout(config)
    first_step = Path(layout.snapshot_weights(family, 1, spec.seeds[0])).is_file() and 1 in spec.snapshot_steps
    checkpoints, settings = trained_checkpoints(layout, spec, (0, 1) if first_step else (0,))
    return audit_family(family, settings, checkpoints)


def _is_family(config: Mapping[str, Any], name: str) -> bool:
    from headstab.plan.hub_families import HUB_FAMILY

    return {**config["architecture_defaults"], **config["architectures"][name]}.get("source") == HUB_FAMILY


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (module docstring): exit 0 when FAMILY passes, 1 when refused, 2 on a config error."""
    import argparse
    import sys
    import tempfile

    from headstab.refits.models import CheckpointError

    parser = argparse.ArgumentParser(prog="python -m headstab.refits.audit", description=__doc__.splitlines()[0])
    parser.add_argument("family", help="an architecture of the config: a hub family, or refits trained here")
    parser.add_argument("--configfile", nargs="+", default=["config/hub_families.yaml"], help="as given to snakemake")
    parser.add_argument("--results-dir", help="override results_dir (where refits trained here are read)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        with tempfile.TemporaryDirectory(prefix="headstab_audit_") as scratch:
            result = command_line_audit(args.family, args.configfile, args.results_dir, scratch)
    except (ValueError, OSError, CheckpointError) as error:  # a config error, a model that cannot be read
        print(f"headstab.refits.audit: {error}", file=sys.stderr)
        return 2
    print(format_report(result))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
