"""Where a run stands: `python -m headstab.status [--configfile FILE ...] [--config KEY=VALUE ...] [--json]`.

What is out of date is Snakemake's answer, never this module's: it runs `snakemake -n` with the same
--configfile and --config (headstab.dry_run) and reports the jobs the next `snakemake` runs, with
Snakemake's reasons. Per architecture, how many refits are trained (weights that match the sha256 their
meta.json records, for the refit's seed, that the next `snakemake` does not retrain), stale (the dry run
retrains them), unrecorded (trained with another architecture or training setting than the config's,
which Snakemake cannot see: no record in .snakemake/metadata of what made them, e.g. a copied results
directory), corrupt (weights failing their sha256, or an unreadable meta.json), cached (an activation
cache its writer completed) and analysed (in the completed pair-similarity file of the primary prompt
set), with the tables and figures written so far; then those refits, the jobs Snakemake recorded as
failed whose outputs are still missing, with their log paths (`.snakemake/log/*.snakemake.log`), the
outputs Snakemake marks incomplete (`.snakemake/incomplete`: jobs running now, or killed), and a
`report.html` in results_dir that is empty or cut short. Hashing every final.pt reads every weight once
(the paper's 1,210 refits: tens of GB); --no-verify skips it; --no-plan skips the dry run.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from headstab.check import load_configuration
from headstab.dry_run import DryRunError, PlannedJob, dry_run, parse_dry_run, plan_lines, retrain_reasons
from headstab.fileio import sha256_file
from headstab.plan.config import architecture_spec, selected_architectures, validate_config
from headstab.plan.jobs import job_spec
from headstab.plan.layout import Layout
from headstab.plan.spec import ConfigError
from headstab.snakemake_records import FailedJob, failed_jobs, incomplete_outputs


@dataclass(frozen=True)
class ArchitectureStatus:
    """One architecture's progress; every count is of refits unless named otherwise."""

    name: str
    refits: int
    trained: int  # weights verified (or --no-verify) that the next snakemake does not retrain
    stale: int  # weights there that the next snakemake retrains (its dry run plans their train job)
    unrecorded: int  # trained with another configuration than the config's, which Snakemake does not see
    corrupt: int  # final.pt fails its recorded sha256, or meta.json is unreadable
    cached: int
    analysed: int
    tables: int  # CSV files under {arch}/tables
    figures: int  # PNG files under {arch}/figures


@dataclass(frozen=True)
class RefitProblem:
    """A refit whose weights are there but do not count as trained: stale, unrecorded or corrupt, and why."""

    weights: str
    problem: str  # "stale" | "unrecorded" | "corrupt"; "differs" where no dry run was asked
    why: str


@dataclass
class RunStatus:
    results: str
    architectures: list[ArchitectureStatus]
    refit_problems: list[RefitProblem] = field(default_factory=list)
    failed: list[FailedJob] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    report: str | None = None  # what is wrong with results_dir/report.html, if anything
    planned: list[PlannedJob] | None = None  # the jobs of the next snakemake (its dry run); None: not asked
    plan_error: str | None = None  # why the dry run failed, if it did

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


def _planned_state(state: str, why: str, retrain: str | None) -> tuple[str, str]:
    """A refit's state from its files (refit_state) with what the dry run plans for it: `retrain` is Snakemake's
    reason to rerun its train job, "" when it plans none, None when no dry run was asked."""
    if retrain is None:
        return ("differs", why) if state == "stale" else (state, why)
    if retrain and state in ("trained", "stale"):
        return "stale", "; ".join(filter(None, [why, f"Snakemake: {retrain}"]))
    return ("unrecorded", why) if state == "stale" else (state, why)


def architecture_status(
    config: dict[str, Any],
    layout: Layout,
    arch: str,
    verify: bool = True,
    retrained: dict[str, str] | None = None,
) -> tuple[ArchitectureStatus, list[RefitProblem]]:
    """Counts of one architecture of the validated `config`, from its files under `layout` and the refits
    the dry run retrains (`retrained`, retrain_reasons; None: not asked), and its refits that are not trained."""
    spec = architecture_spec(config, arch)
    seeds, expected = spec.seeds, job_spec(spec)
    states = {
        seed: _planned_state(
            *refit_state(Path(layout.checkpoint_dir(arch, seed)), seed, expected, verify),
            None if retrained is None else retrained.get(str(seed), ""),
        )
        for seed in seeds
    }
    problems = [
        RefitProblem(layout.final_weights(arch, seed), state, why)
        for seed, (state, why) in states.items()
        if state in ("stale", "unrecorded", "corrupt", "differs")
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
    counts["unrecorded"] = sum(found in ("unrecorded", "differs") for found, _ in states.values())
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


def run_status(
    config: dict[str, Any],
    workdir: Path = Path("."),
    verify: bool = True,
    planned: Sequence[PlannedJob] | None = None,
    plan_error: str | None = None,
) -> RunStatus:
    """The status of the run of the validated `config`, with Snakemake's records from `workdir`/.snakemake
    and the jobs its dry run `planned` there (None: not asked; plan_error: why it failed); verify: check
    every final.pt against its recorded sha256."""
    layout = Layout(config)
    results = str(workdir / layout.results) if not Path(layout.results).is_absolute() else layout.results
    layout = Layout({**config, "results_dir": results})
    snakemake_dir = workdir / ".snakemake"
    per_arch = [
        architecture_status(
            config,
            layout,
            arch,
            verify,
            None if planned is None else retrain_reasons(arch, planned),
        )
        for arch in selected_architectures(config)
    ]
    return RunStatus(
        results=layout.results,
        architectures=[status for status, _ in per_arch],
        refit_problems=[problem for _, problems in per_arch for problem in problems],
        failed=failed_jobs(snakemake_dir, results),
        incomplete=incomplete_outputs(snakemake_dir, results),
        report=report_problem(results),
        planned=None if planned is None else list(planned),
        plan_error=plan_error,
    )


def format_table(status: RunStatus) -> str:
    """A compact text table: one row per architecture and a total, then failed and incomplete jobs."""
    header = tuple("architecture refits trained stale unrecorded corrupt cached analysed tables figures".split())
    rows = [
        (a.name, a.refits, a.trained, a.stale, a.unrecorded, a.corrupt, a.cached, a.analysed, a.tables, a.figures)
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
    lines.append(f"refits not counted as trained: {len(status.refit_problems)}")
    for problem in status.refit_problems:
        lines.append(f"  {problem.problem} {problem.weights}: {problem.why}; {_refit_fix(problem)}")
    lines.extend(plan_lines(status.planned, status.plan_error))
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


def _refit_fix(problem: RefitProblem) -> str:
    weights = shlex.quote(problem.weights)
    return {
        "stale": "the next snakemake retrains it",
        "unrecorded": "Snakemake does not retrain it, having no record of what made it (.snakemake/metadata of "
        f"this directory; a copied results directory has none): retrain it with `snakemake {weights} --forcerun "
        "train`, or set the config back",
        "differs": "whether the next snakemake retrains it, the dry run says (run without --no-plan)",
    }.get(problem.problem, f"rebuild it with `rm -f {weights} && snakemake {weights}`")


def load_run_config(
    configfiles: Sequence[str], results_dir: str | None, config_args: Sequence[str] = ()
) -> dict[str, Any]:
    """The configuration Snakemake resolves from `--configfile configfiles --config config_args` (files and
    values layered as Snakemake layers them), with `results_dir` overridden when given; validated."""
    config = load_configuration(configfiles, config_args)
    if results_dir is not None:
        config["results_dir"] = results_dir
    return validate_config(config)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headstab.status", description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", nargs="+", default=["config/config.yaml"], help="as given to snakemake")
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE", help="as given to snakemake")
    parser.add_argument("--results-dir", help="override results_dir (as `--config results_dir=...`)")
    parser.add_argument("--directory", default=".", help="Snakemake's working directory (holds .snakemake)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--no-verify", action="store_true", help="skip the sha256 of every final.pt (weights then count unverified)"
    )
    parser.add_argument("--no-plan", action="store_true", help="skip the dry run: nothing said about staleness")
    args = parser.parse_args(list(argv) if argv is not None else None)
    config_args = [*args.config, *([f"results_dir={args.results_dir}"] if args.results_dir is not None else [])]
    try:
        config = load_run_config(args.configfile, args.results_dir, args.config)
    except ConfigError as error:
        print(f"headstab.status: {error}", file=sys.stderr)
        return 2
    directory = Path(args.directory)
    planned, plan_error = None, None
    if not args.no_plan:
        try:
            configfiles = [str(Path(path).resolve()) for path in args.configfile]
            planned = parse_dry_run(dry_run(configfiles, config_args, directory))
        except DryRunError as error:
            plan_error = str(error)
    status = run_status(config, directory, not args.no_verify, planned, plan_error)
    print(json.dumps(status.to_dict(), indent=1) if args.json else format_table(status))
    return 0


if __name__ == "__main__":
    sys.exit(main())
