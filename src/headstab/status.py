"""Where a run stands: `python -m headstab.status [--configfile FILE ...] [--json]`.

Per architecture, how many refits are trained (weights that match the sha256 their meta.json records,
for the refit's seed, with the architecture the current config would train), stale (trained with
another configuration: the next `snakemake` retrains them), corrupt (weights failing their sha256, or an
unreadable meta.json), cached (an activation cache its writer completed) and analysed (in the completed
pair-similarity file of the primary prompt set), with the tables and figures written so far; then the
stale and corrupt refits, the jobs Snakemake recorded as failed whose outputs are still missing, with
their log paths (`.snakemake/log/*.snakemake.log`), the outputs Snakemake marks incomplete
(`.snakemake/incomplete`: jobs running now, or killed), and a `report.html` in results_dir that is empty
or cut short. Reads files only: no DAG is built. Hashing every final.pt reads every weight once (the
paper's 1,210 refits: tens of GB); --no-verify skips it.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from headstab.fileio import sha256_file
from headstab.plan.config import architecture_spec, load_yaml, selected_architectures, validate_config
from headstab.plan.jobs import job_spec
from headstab.plan.layout import Layout
from headstab.plan.spec import ConfigError


@dataclass(frozen=True)
class ArchitectureStatus:
    """One architecture's progress; every count is of refits unless named otherwise."""

    name: str
    refits: int
    trained: int  # weights verified (or --no-verify), trained with the architecture the config says now
    stale: int  # trained with another architecture or training setting: the next snakemake retrains them
    corrupt: int  # final.pt fails its recorded sha256, or meta.json is unreadable
    cached: int
    analysed: int
    tables: int  # CSV files under {arch}/tables
    figures: int  # PNG files under {arch}/figures


@dataclass(frozen=True)
class RefitProblem:
    """A refit whose weights are there but do not count as trained: stale or corrupt, and why."""

    weights: str
    problem: str  # "stale" | "corrupt"
    why: str


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
    refit_problems: list[RefitProblem] = field(default_factory=list)
    failed: list[FailedJob] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    report: str | None = None  # what is wrong with results_dir/report.html, if anything

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


def spec_differences(recorded: Any, expected: dict[str, Any]) -> list[str]:
    """The fields (but name and seeds) in which the architecture a meta.json records differs from `expected`
    (planning.job_spec of the current config), as "key recorded (config now value)"."""
    if not isinstance(recorded, dict):
        return [f"architecture {recorded!r} (config now a full architecture entry)"]
    expected = json.loads(json.dumps(expected))  # tuples as lists, as the record holds them
    keys = sorted((set(recorded) | set(expected)) - {"name", "seeds"})
    return [
        f"{key} {recorded.get(key)!r} (config now {expected.get(key)!r})"
        for key in keys
        if recorded.get(key) != expected.get(key)
    ]


def refit_state(checkpoint: Path, seed: int | str, expected: dict[str, Any], verify: bool = True) -> tuple[str, str]:
    """("missing" | "trained" | "stale" | "corrupt", why) of the refit whose files are in `checkpoint`: its
    final.pt against the sha256 its meta.json records (when `verify`), and the architecture that meta.json
    records against `expected`, what the current config would train (planning.job_spec)."""
    weights, meta_path = checkpoint / "final.pt", checkpoint / "meta.json"
    if not weights.is_file() or not meta_path.is_file():
        return "missing", ""
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as error:
        return "corrupt", f"{meta_path} is not a readable JSON record ({error})"
    if not isinstance(meta, dict) or meta.get("seed") != seed:
        return "missing", ""  # another refit's record: these weights are not this refit's
    recorded = meta.get("final_weights_sha256")
    if verify and recorded and (found := sha256_file(weights)) != recorded:
        return "corrupt", f"its sha256 is {found}, {meta_path} records {recorded}"
    differing = spec_differences(meta.get("architecture"), expected)
    return ("stale", f"trained with {'; '.join(differing)}") if differing else ("trained", "")


def architecture_status(
    config: dict[str, Any], layout: Layout, arch: str, verify: bool = True
) -> tuple[ArchitectureStatus, list[RefitProblem]]:
    """Counts of one architecture of the validated `config`, from its files under `layout`, and its stale
    and corrupt refits."""
    spec = architecture_spec(config, arch)
    seeds, expected = spec.seeds, job_spec(spec)
    states = {seed: refit_state(Path(layout.checkpoint_dir(arch, seed)), seed, expected, verify) for seed in seeds}
    problems = [
        RefitProblem(layout.final_weights(arch, seed), state, why)
        for seed, (state, why) in states.items()
        if state in ("stale", "corrupt")
    ]
    cached = sum(
        _complete_h5(Path(layout.cache_path(arch, seed)))
        for seed in seeds
        if Path(layout.cache_path(arch, seed)).is_file()
    )
    similarity = Path(layout.similarity_path(arch, config["analysis"]["promptset"]))
    analysed = len(set(_h5_seeds(similarity)) & set(seeds)) if similarity.is_file() else 0
    root = Path(layout.results) / arch
    counts = {state: sum(found == state for found, _ in states.values()) for state in ("trained", "stale", "corrupt")}
    status = ArchitectureStatus(
        name=arch,
        refits=len(seeds),
        **counts,
        cached=cached,
        analysed=analysed,
        tables=sum(1 for _ in (root / "tables").glob("*.csv")),
        figures=sum(1 for _ in (root / "figures").glob("*.png")),
    )
    return status, problems


def report_problem(results: str | Path) -> str | None:
    """What is wrong with `results`/report.html (the documented place of `snakemake --report`), or None:
    Snakemake writes it in place, so a killed `--report` leaves it empty or without its closing tag."""
    path = Path(results) / "report.html"
    if not path.is_file():
        return None
    size = path.stat().st_size
    with open(path, "rb") as handle:
        handle.seek(max(0, size - 64))
        tail = handle.read().rstrip()
    if tail.endswith(b"</html>"):
        return None
    quoted = shlex.quote(str(path))
    what = "is empty" if size == 0 else f"is cut short ({size} bytes, no closing </html>)"
    return (
        f"{path} {what}: a `snakemake --report` was killed while writing it. Write it again with "
        f"`snakemake --report {shlex.quote(str(path.with_name('.report.tmp.html')))} && mv "
        f"{shlex.quote(str(path.with_name('.report.tmp.html')))} {quoted}` (with the run's --configfile)"
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


def run_status(config: dict[str, Any], workdir: Path = Path("."), verify: bool = True) -> RunStatus:
    """The status of the run of the validated `config`, with Snakemake's records from `workdir`/.snakemake;
    verify: check every final.pt against its recorded sha256."""
    layout = Layout(config)
    results = str(workdir / layout.results) if not Path(layout.results).is_absolute() else layout.results
    layout = Layout({**config, "results_dir": results})
    snakemake_dir = workdir / ".snakemake"
    per_arch = [architecture_status(config, layout, arch, verify) for arch in selected_architectures(config)]
    return RunStatus(
        results=layout.results,
        architectures=[status for status, _ in per_arch],
        refit_problems=[problem for _, problems in per_arch for problem in problems],
        failed=failed_jobs(snakemake_dir, results),
        incomplete=incomplete_outputs(snakemake_dir, results),
        report=report_problem(results),
    )


def format_table(status: RunStatus) -> str:
    """A compact text table: one row per architecture and a total, then failed and incomplete jobs."""
    header = ("architecture", "refits", "trained", "stale", "corrupt", "cached", "analysed", "tables", "figures")
    rows = [
        (a.name, a.refits, a.trained, a.stale, a.corrupt, a.cached, a.analysed, a.tables, a.figures)
        for a in status.architectures
    ]
    totals = [sum(row[i] for row in rows) for i in range(1, len(header))]
    rows.append(("total", *totals))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = [f"results: {status.results}"]
    for row in [header, *rows]:
        lines.append(
            "  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
        )
    lines.append(f"stale or corrupt refits (not counted as trained): {len(status.refit_problems)}")
    for problem in status.refit_problems:
        fix = (
            "the next snakemake retrains it"
            if problem.problem == "stale"
            else f"rebuild it with `rm -f {shlex.quote(problem.weights)} && snakemake {shlex.quote(problem.weights)}`"
        )
        lines.append(f"  {problem.problem} {problem.weights}: {problem.why}; {fix}")
    lines.append(f"failed jobs (outputs still missing): {len(status.failed)}")
    for job in status.failed:
        where = f" ({job.wildcards})" if job.wildcards else ""
        lines.append(f"  {job.rule}{where} at {job.when or '?'}: log {', '.join(job.log) or '(none)'}")
        lines.append(f"    snakemake log {job.snakemake_log}")
    lines.append(f"incomplete outputs (running, or killed): {len(status.incomplete)}")
    lines.extend(f"  {path}" for path in status.incomplete)
    if status.report:
        lines.append(f"report: {status.report}")
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
    parser.add_argument(
        "--no-verify", action="store_true", help="skip the sha256 of every final.pt (weights then count unverified)"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        config = load_run_config(args.configfile, args.results_dir)
    except ConfigError as error:
        print(f"headstab.status: {error}", file=sys.stderr)
        return 2
    status = run_status(config, Path(args.directory), verify=not args.no_verify)
    print(json.dumps(status.to_dict(), indent=1) if args.json else format_table(status))
    return 0


if __name__ == "__main__":
    sys.exit(main())
