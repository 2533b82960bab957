"""What the next `snakemake` runs, and why: Snakemake's own dry run (`snakemake -n`), read job by job.

`python -m headstab.status` asks this rather than judging staleness from the files itself: Snakemake
decides from file dates, the params, input sets and code it recorded in `.snakemake/metadata` for each
output, missing outputs and forced rules, and only its dry run says what it will do.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DryRunError",
    "PlannedJob",
    "dry_run",
    "parse_dry_run",
    "plan_lines",
    "retrain_reasons",
    "snakemake_command",
]


class DryRunError(RuntimeError):
    """`snakemake -n` failed: the message holds the command and the end of what Snakemake printed."""


@dataclass(frozen=True)
class PlannedJob:
    """One job of a dry run, as Snakemake prints it."""

    rule: str
    output: list[str]
    reason: str
    wildcards: str


_JOB = re.compile(r"^\s*(?:local)?rule (\w+):$")
_FIELD = re.compile(r"^\s+(\w+): (.*)$")


def parse_dry_run(text: str) -> list[PlannedJob]:
    """Every job block ("rule NAME:" and its indented fields) of what `snakemake -n` printed, in order."""
    lines = text.splitlines()
    jobs = []
    for index, line in enumerate(lines):
        match = _JOB.match(line)
        if not match:
            continue
        fields: dict[str, str] = {}
        for following in lines[index + 1 :]:
            field = _FIELD.match(following)
            if not field:
                break
            fields[field.group(1)] = field.group(2)
        jobs.append(
            PlannedJob(
                rule=match.group(1),
                output=[path for path in fields.get("output", "").split(", ") if path],
                reason=fields.get("reason", ""),
                wildcards=fields.get("wildcards", ""),
            )
        )
    return jobs


def snakemake_command(configfiles: Sequence[str], config_args: Sequence[str]) -> list[str]:
    """`python -m snakemake -n` with these --configfile files and --config values, as the run is given them."""
    command = [sys.executable, "-m", "snakemake", "-n", "--configfile", *configfiles]
    return command + (["--config", *config_args] if config_args else [])


def dry_run(configfiles: Sequence[str], config_args: Sequence[str], directory: Path, timeout: int = 1800) -> str:
    """What `snakemake -n` prints in `directory` (where the run's Snakefile and .snakemake are); DryRunError
    when it fails."""
    command = snakemake_command(configfiles, config_args)
    result = subprocess.run(command, cwd=directory, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        printed = (result.stdout + result.stderr).strip().splitlines()
        raise DryRunError(f"`{' '.join(command[1:])}` in {directory} failed: " + "\n".join(printed[-15:]))
    return result.stdout + result.stderr


def short_reason(reason: str, width: int = 160) -> str:
    """Snakemake's reason with each clause's detail cut to `width` characters: a params clause holds every
    param before and after, which for a whole-config param runs to pages."""
    clauses = []
    for clause in reason.split("; "):
        head, _, detail = clause.partition(": ")
        detail = detail if len(detail) <= width else detail[: width - 3].rstrip() + "..."
        clauses.append(f"{head}: {detail}" if detail else head)
    return "; ".join(clauses)


def wildcard_values(job: PlannedJob) -> dict[str, str]:
    """{wildcard: value} of a planned job ("arch=l2_h4, block=seeds1_2" as the dry run prints it)."""
    return dict(pair.split("=", 1) for pair in job.wildcards.split(", ") if "=" in pair)


def retrain_reasons(arch: str, planned: Sequence[PlannedJob]) -> dict[str, str]:
    """{refit name: Snakemake's reason} of each refit of `arch` whose block's train job the dry run `planned`
    holds; a block's name lists its refits (headstab.plan.seed_design.block_name: seeds1_2 -> 1 and 2)."""
    reasons = {}
    for job in planned:
        values = wildcard_values(job)
        if job.rule == "train" and values.get("arch") == arch and values.get("block", "").startswith("seeds"):
            reasons.update(dict.fromkeys(values["block"].removeprefix("seeds").split("_"), short_reason(job.reason)))
    return reasons


def plan_lines(planned: Sequence[PlannedJob] | None, error: str | None = None) -> list[str]:
    """The next snakemake's jobs per rule, each with the reason Snakemake gives for its first job."""
    if error:
        return [f"next snakemake: its dry run failed: {error}"]
    if planned is None:
        return ["next snakemake: not asked (--no-plan)"]
    jobs = [job for job in planned if job.output]  # rule all and the other targets have no output
    if not jobs:
        return ["next snakemake (snakemake -n): nothing to be done"]
    first: dict[str, PlannedJob] = {}
    counts: dict[str, int] = {}
    for job in jobs:
        first.setdefault(job.rule, job)
        counts[job.rule] = counts.get(job.rule, 0) + 1
    lines = [f"next snakemake (snakemake -n): {len(jobs)} jobs"]
    for rule, job in first.items():
        where = f" ({job.wildcards})" if job.wildcards else ""
        lines.append(f"  {rule} x{counts[rule]}: e.g.{where} {short_reason(job.reason)}")
    return lines
