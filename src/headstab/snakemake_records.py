"""What Snakemake recorded of a run in its working directory's .snakemake: the jobs that failed (its logs)
and the outputs it marks incomplete (jobs running now, or killed)."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FailedJob", "failed_jobs", "incomplete_outputs", "parse_failures"]


@dataclass(frozen=True)
class FailedJob:
    """One "Error in rule" record of a Snakemake log whose outputs are not all there now."""

    rule: str
    when: str  # Snakemake's timestamp line before the record, as printed
    wildcards: str
    log: list[str]
    output: list[str]
    snakemake_log: str


_ERROR = re.compile(r"^Error in rule (\w+):\s*$")
_FIELD = re.compile(r"^\s+(\w+): (.*)$")


def parse_failures(text: str, snakemake_log: str = "") -> list[FailedJob]:
    """Every "Error in rule" record in the text of one Snakemake log, in order."""
    lines = text.splitlines()
    failures = []
    for index, line in enumerate(lines):
        match = _ERROR.match(line)
        if not match:
            continue
        fields: dict[str, str] = {}
        for following in lines[index + 1 :]:
            field_match = _FIELD.match(following)
            if not field_match:
                break
            fields[field_match.group(1)] = field_match.group(2)
        when = lines[index - 1].strip("[] ") if index and lines[index - 1].startswith("[") else ""
        log = fields.get("log", "").split(" (check log file")[0]
        failures.append(
            FailedJob(
                rule=match.group(1),
                when=when,
                wildcards=fields.get("wildcards", ""),
                log=[path for path in log.split(", ") if path],
                output=[path for path in fields.get("output", "").split(", ") if path],
                snakemake_log=snakemake_log,
            )
        )
    return failures


def _under(path: str, results: Path) -> bool:
    return Path(path).resolve().is_relative_to(results)


def failed_jobs(snakemake_dir: Path, results: str) -> list[FailedJob]:
    """Failed jobs writing under `results` whose outputs are not all there now: the newest record of each,
    from the Snakemake logs in `snakemake_dir`/log, oldest first."""
    root = Path(results).resolve()
    newest: dict[tuple[str, tuple[str, ...]], FailedJob] = {}
    for path in sorted((snakemake_dir / "log").glob("*.snakemake.log")):  # named by start time
        text = path.read_text(errors="replace")
        if "Error in rule" not in text:
            continue
        for job in parse_failures(text, str(path)):
            if job.output and _under(job.output[0], root):
                newest[(job.rule, tuple(job.output))] = job
    return [job for job in newest.values() if not all(Path(output).exists() for output in job.output)]


def incomplete_outputs(snakemake_dir: Path, results: str) -> list[str]:
    """Outputs under `results` that Snakemake marks incomplete: their jobs run now, or were killed."""
    root = Path(results).resolve()
    marked = []
    directory = snakemake_dir / "incomplete"
    for marker in directory.rglob("*"):
        if marker.is_dir():
            continue
        # urlsafe base64 of the path, split into '@'-prefixed directories when longer than a file name
        encoded = "".join(part.lstrip("@") for part in marker.relative_to(directory).parts)
        try:
            path = base64.urlsafe_b64decode(encoded).decode()
        except ValueError:
            continue
        if _under(path, root):
            marked.append(path)
    return sorted(marked)
