"""Where a run stands: `python -m headstab.status [--configfile FILE ...] [--json]`.

Per architecture, how many refits are trained (weights and a meta.json naming the refit's seed),
cached (an activation cache its writer completed) and analysed (in the completed pair-similarity
file of the primary prompt set), with the tables and figures written so far; then the jobs
Snakemake recorded as failed whose outputs are still missing, with their log paths
(`.snakemake/log/*.snakemake.log`), and the outputs Snakemake marks incomplete
(`.snakemake/incomplete`: jobs running now, or killed). Reads files only: no DAG is built, so the
paper plan's 1,210 refits take seconds.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from headstab.plan.config import architecture_spec, load_yaml, selected_architectures, validate_config
from headstab.plan.layout import Layout
from headstab.plan.spec import ConfigError


@dataclass(frozen=True)
class ArchitectureStatus:
    """One architecture's progress; every count is of refits unless named otherwise."""

    name: str
    refits: int
    trained: int
    cached: int
    analysed: int
    tables: int  # CSV files under {arch}/tables
    figures: int  # PNG files under {arch}/figures


@dataclass(frozen=True)
class FailedJob:
    """One "Error in rule" record of a Snakemake log whose outputs are not all there now."""

    rule: str
    when: str  # Snakemake's timestamp line before the record, as printed
    wildcards: str
    log: list[str]
    output: list[str]
    snakemake_log: str


@dataclass
class RunStatus:
    results: str
    architectures: list[ArchitectureStatus]
    failed: list[FailedJob] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _complete_h5(path: Path) -> bool:
    """True when `path` is an HDF5 file whose writer set attribute `complete` (caches, result files)."""
    import h5py

    try:
        with h5py.File(path, "r") as handle:
            return bool(handle.attrs.get("complete", False))
    except OSError:
        return False


def _h5_seeds(path: Path) -> list[int]:
    """The `seeds` attribute of a completed result file, else []."""
    import h5py

    if not _complete_h5(path):
        return []
    with h5py.File(path, "r") as handle:
        return [int(seed) for seed in handle.attrs.get("seeds", [])]


def _trained(checkpoint: Path, seed: int) -> bool:
    """Weights and a readable meta.json that names `seed` (trained and fetched refits write both)."""
    meta = checkpoint / "meta.json"
    if not (checkpoint / "final.pt").is_file() or not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text()).get("seed") == seed
    except (OSError, ValueError):
        return False


def architecture_status(config: dict[str, Any], layout: Layout, arch: str) -> ArchitectureStatus:
    """Counts of one architecture of the validated `config`, from its files under `layout`."""
    seeds = architecture_spec(config, arch).seeds
    trained = sum(_trained(Path(layout.checkpoint_dir(arch, seed)), seed) for seed in seeds)
    cached = sum(
        _complete_h5(Path(layout.cache_path(arch, seed)))
        for seed in seeds
        if Path(layout.cache_path(arch, seed)).is_file()
    )
    similarity = Path(layout.similarity_path(arch, config["analysis"]["promptset"]))
    analysed = len(set(_h5_seeds(similarity)) & set(seeds)) if similarity.is_file() else 0
    root = Path(layout.results) / arch
    return ArchitectureStatus(
        name=arch,
        refits=len(seeds),
        trained=trained,
        cached=cached,
        analysed=analysed,
        tables=sum(1 for _ in (root / "tables").glob("*.csv")),
        figures=sum(1 for _ in (root / "figures").glob("*.png")),
    )


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


def run_status(config: dict[str, Any], workdir: Path = Path(".")) -> RunStatus:
    """The status of the run of the validated `config`, with Snakemake's records from `workdir`/.snakemake."""
    layout = Layout(config)
    results = str(workdir / layout.results) if not Path(layout.results).is_absolute() else layout.results
    layout = Layout({**config, "results_dir": results})
    snakemake_dir = workdir / ".snakemake"
    return RunStatus(
        results=layout.results,
        architectures=[architecture_status(config, layout, arch) for arch in selected_architectures(config)],
        failed=failed_jobs(snakemake_dir, results),
        incomplete=incomplete_outputs(snakemake_dir, results),
    )


def format_table(status: RunStatus) -> str:
    """A compact text table: one row per architecture and a total, then failed and incomplete jobs."""
    header = ("architecture", "refits", "trained", "cached", "analysed", "tables", "figures")
    rows = [(a.name, a.refits, a.trained, a.cached, a.analysed, a.tables, a.figures) for a in status.architectures]
    totals = [sum(row[i] for row in rows) for i in range(1, len(header))]
    rows.append(("total", *totals))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = [f"results: {status.results}"]
    for row in [header, *rows]:
        lines.append(
            "  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
        )
    lines.append(f"failed jobs (outputs still missing): {len(status.failed)}")
    for job in status.failed:
        where = f" ({job.wildcards})" if job.wildcards else ""
        lines.append(f"  {job.rule}{where} at {job.when or '?'}: log {', '.join(job.log) or '(none)'}")
        lines.append(f"    snakemake log {job.snakemake_log}")
    lines.append(f"incomplete outputs (running, or killed): {len(status.incomplete)}")
    lines.extend(f"  {path}" for path in status.incomplete)
    return "\n".join(lines)


def load_run_config(configfiles: Sequence[str], results_dir: str | None) -> dict[str, Any]:
    """The configuration Snakemake would resolve from these files (later files update earlier ones at the
    top level, as `--configfile a b` does), with `results_dir` overridden when given; validated."""
    config: dict[str, Any] = {}
    for path in configfiles:
        config.update(load_yaml(path))
    if results_dir is not None:
        config["results_dir"] = results_dir
    return validate_config(config)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headstab.status", description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", nargs="+", default=["config/config.yaml"], help="as given to snakemake")
    parser.add_argument("--results-dir", help="override results_dir (as `--config results_dir=...`)")
    parser.add_argument("--directory", default=".", help="Snakemake's working directory (holds .snakemake)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        config = load_run_config(args.configfile, args.results_dir)
    except ConfigError as error:
        print(f"headstab.status: {error}", file=sys.stderr)
        return 2
    status = run_status(config, Path(args.directory))
    print(json.dumps(status.to_dict(), indent=1) if args.json else format_table(status))
    return 0


if __name__ == "__main__":
    sys.exit(main())
