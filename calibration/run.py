"""make calibration: the size and coverage of every kind of p-value and interval the workflow reports, at the n
it is reported for, on data simulated with the dependence the real data has (docs/statistics.md, "Calibration").

    python calibration/run.py                 # the full study -> results/calibration/
    python calibration/run.py --quick         # each case once at its quick n, few datasets (what make test runs)
    python calibration/run.py --methods sign_flip_paired layer_heterogeneity
    python calibration/run.py --jobs 16              # (case, n) rows in 16 processes

Each finished (case, n) row is kept in rows/ under a key of the case, n, datasets, seed and a digest of the case's
module, the harness and of the headstab modules they import, transitively: a run stopped part-way resumes where it
stopped, and a changed line of that code recomputes the rows of the cases that import it (--fresh recomputes
every row).

Writes summary.csv (one row per method, scenario and n: rate, Monte-Carlo s.e., bound, passed, the workflow's
label there, consistent), methods.csv (per method: its min_n in headstab.statistics.calibration and the one the
study measured), power.csv (the effect each claim's test detects with 80% power at n = 4, 5, 50) and
summary.png. Exits 1 when a method the workflow calls calibrated at some n failed there, or when a reported
method has no case.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import multiprocessing
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from calibration.cases import CASES, POWER  # noqa: E402
from calibration.harness import Case, detectable_effect, evaluate, min_n_passing  # noqa: E402
from headstab.statistics.calibration import (  # noqa: E402
    ALPHA,
    CALIBRATED,
    CALIBRATION_NS,
    METHODS,
    calibration_label,
)

OUT = ROOT / "results" / "calibration"


def _imported_modules(path: Path) -> set[str]:
    """The headstab and calibration modules `path` imports anywhere (function bodies too), as dotted names."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name.split(".")[0] in ("headstab", "calibration")}


def _module_file(name: str, root: Path) -> Path | None:
    base = root / "src" / name.replace(".", "/") if name.startswith("headstab") else root / name.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


# The registry of methods and their min_n: it sets a row's label, which is read afresh when the summary is written,
# and ALPHA, which is part of every row's key; a method registered or relabelled recomputes no row.
REGISTRY = ("src/headstab/statistics/calibration.py", "src/headstab/statistics/beyond_methods.py",
            "src/headstab/statistics/neuron_methods.py")  # fmt: skip


def source_files(root: Path = ROOT, start: list[Path] | None = None, skip: tuple[str, ...] = ()) -> list[Path]:
    """`start` (default: every file of calibration/) and the headstab and calibration modules they import,
    transitively (packages' __init__ too); the files `skip` names (relative to root) are neither listed nor
    followed."""
    pending = sorted(start) if start is not None else sorted((root / "calibration").rglob("*.py"))
    seen: set[Path] = set()
    while pending:
        path = pending.pop()
        if path in seen or str(path.relative_to(root)) in skip:
            continue
        seen.add(path)
        for name in _imported_modules(path):
            parts = name.split(".")
            for depth in range(1, len(parts) + 1):
                found = _module_file(".".join(parts[:depth]), root)
                if found is not None and found not in seen:
                    pending.append(found)
    return sorted(seen)


def source_digest(root: Path = ROOT, start: list[Path] | None = None, skip: tuple[str, ...] = ()) -> str:
    """sha256 over the path and bytes of `source_files`: what a row's outcome can depend on."""
    digest = hashlib.sha256()
    for path in source_files(root, start, skip):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def case_digest(case: Case, root: Path = ROOT) -> str:
    """The digest of what one case's rows depend on: the module that defines its simulation, the harness, and
    what they import, the REGISTRY left out; so an edit to one family's code recomputes that family's rows only.
    A simulation defined outside calibration/cases/ gets the digest of all of calibration/."""
    defined = Path(getattr(sys.modules.get(case.simulate.__module__), "__file__", None) or "/").resolve()
    if not defined.is_relative_to(root / "calibration" / "cases"):
        return source_digest(root, skip=REGISTRY)
    return source_digest(root, [defined, root / "calibration" / "harness.py"], REGISTRY)


def row_key(case: Case, n: int, reps: int, seed: int, digest: str) -> str:
    """The file name of one (case, n) row: readable, then a hash of everything its outcome depends on."""
    identity = json.dumps([case.method, case.scenario, case.kind, case.level, n, reps, seed, ALPHA, digest])
    return f"{case.method}.{case.kind}.n{n}.{hashlib.sha256(identity.encode()).hexdigest()[:16]}.json"


def shared_study(case: Case) -> int | None:
    """The identity of the `shared_draws` study a case's simulation reads (found in its closures), or None: the
    cases of one study at one n go to one worker, which then simulates each dataset once."""
    pending, seen = [case.simulate], set()
    while pending:
        function = pending.pop()
        if id(function) in seen:
            continue
        seen.add(id(function))
        if getattr(function, "__qualname__", "") == "shared_draws.<locals>.run":
            return id(function)
        pending += [
            cell.cell_contents for cell in getattr(function, "__closure__", None) or () if callable(cell.cell_contents)
        ]
    return None


def _evaluate_group(group: tuple[Path | None, list[tuple[int, int, int, int, str]]]) -> list[tuple[str, dict]]:
    """Evaluate each (case index, n, reps, seed, key) of one group in order, writing each row as it finishes."""
    rows, tasks = group
    out = []
    for index, n, reps, seed, key in tasks:
        start = time.monotonic()
        outcome = asdict(evaluate(CASES[index], n, reps, seed))
        if rows is not None:
            partial = rows / f".{key}.tmp"
            partial.write_text(json.dumps(outcome) + "\n")
            partial.replace(rows / key)
        print(
            f"{outcome['method']:40s} {outcome['scenario']:28s} n={outcome['n']:3d} {outcome['kind']:8s} "
            f"rate {outcome['rate']:.3f} (bound {outcome['bound']:.3f}) {'pass' if outcome['passed'] else 'FAIL'} "
            f"{time.monotonic() - start:.1f} s",
            flush=True,
        )
        out.append((key, outcome))
    return out


def run_cases(
    cases: list[Case], quick: bool, seed: int, rows: Path | None = None, jobs: int = 1, fresh: bool = False
) -> pd.DataFrame:
    """One row per (case, n), in the cases' order; rows already in `rows` (same key) are read, not recomputed,
    and each new one is written there as soon as it is done. jobs > 1: forked worker processes, each taking
    whole groups (the cases of one shared study at one n)."""
    digests: dict[str, str] = {}  # by the module that defines a simulation
    position = {id(case): index for index, case in enumerate(CASES)}  # by identity: two cases may compare equal
    planned = [(case, n, case.quick_reps if quick else case.reps_for(n)) for case, n in _case_ns(cases, quick)]
    for case, _, _ in planned:
        if case.simulate.__module__ not in digests:
            digests[case.simulate.__module__] = case_digest(case)
    order = [row_key(case, n, reps, seed, digests[case.simulate.__module__]) for case, n, reps in planned]
    groups: dict[tuple, list[tuple[int, int, int, int, str]]] = {}  # (study or case, n) -> its rows to compute
    done = {}
    for (case, n, reps), key in zip(planned, order, strict=True):
        if rows is not None and not fresh and (rows / key).exists():
            done[key] = json.loads((rows / key).read_text())
        else:
            study = shared_study(case)
            group = ("study", study, n) if study is not None else ("row", key)
            groups.setdefault(group, []).append((position[id(case)], n, reps, seed, key))
    if rows is not None:
        rows.mkdir(parents=True, exist_ok=True)
    to_compute = sum(len(tasks) for tasks in groups.values())
    print(
        f"{len(done)} rows kept from {rows}, {to_compute} to compute in {len(groups)} groups with {jobs} process(es)",
        flush=True,
    )
    pool = multiprocessing.get_context("fork").Pool(jobs) if jobs > 1 else None
    try:
        work = [(rows, tasks) for tasks in groups.values()]
        for finished in pool.imap_unordered(_evaluate_group, work) if pool else map(_evaluate_group, work):
            done.update(finished)
    finally:
        if pool:
            pool.close()
            pool.join()
    return pd.DataFrame([labelled(done[key]) for key in order])


def labelled(outcome: dict) -> dict:
    """The row with the label the registry gives its method at its n now, and whether the two agree."""
    label = calibration_label(outcome["method"], outcome["n"])
    return {**outcome, "label": label, "consistent": bool(outcome["passed"]) or label != CALIBRATED}


def _case_ns(cases: list[Case], quick: bool) -> list[tuple[Case, int]]:
    """(case, n) in the cases' order: its quick n, or every n it is calibrated at."""
    return [(case, n) for case in cases for n in ((case.quick_n,) if quick else (case.ns or CALIBRATION_NS))]


def method_table(summary: pd.DataFrame) -> pd.DataFrame:
    from calibration.harness import Outcome

    rows = []
    for name, method in METHODS.items():
        chosen = summary[summary["method"] == name]
        outcomes = [Outcome(**row) for row in chosen.to_dict("records")]
        measured = min_n_passing(outcomes, CALIBRATION_NS) if len(chosen) else None
        rows.append(
            {
                "method": name,
                "reports": method.reports,
                "unit": method.unit,
                "min_n": method.min_n,
                "measured_min_n": measured,
                "cases": int(chosen[["scenario"]].drop_duplicates().shape[0]),
                "statistic": method.statistic,
            }
        )
    return pd.DataFrame(rows)


def run_power(methods: list[str], quick: bool, seed: int) -> pd.DataFrame:
    rows = []
    for case in [c for c in POWER if c.method in methods]:
        for n in case.ns[:1] if quick else case.ns:
            effect, power = detectable_effect(case, n, 50 if quick else case.reps, seed)
            rows.append(
                {
                    "method": case.method,
                    "claim": case.claim,
                    "n": n,
                    "detectable_effect": effect,
                    "effect_unit": case.effect_unit,
                    "power": power,
                }
            )
            print(f"power {case.claim:50s} n={n:3d} detectable {effect:.4g} {case.effect_unit}", flush=True)
    return pd.DataFrame(rows, columns=["method", "claim", "n", "detectable_effect", "effect_unit", "power"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="each case at its quick n with its quick datasets")
    parser.add_argument("--methods", nargs="*", default=None, help=f"some of: {', '.join(METHODS)}")
    parser.add_argument("--seed", type=int, default=20261128)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes for the (case, n) rows")
    parser.add_argument("--fresh", action="store_true", help="recompute rows kept from an earlier run")
    args = parser.parse_args()
    methods = args.methods or list(METHODS)
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown method(s) {unknown}; known: {', '.join(METHODS)}")
    uncovered = sorted(set(methods) - {c.method for c in CASES})
    if uncovered:
        print(f"these reported methods have no calibration case: {uncovered}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    cases = [case for case in CASES if case.method in methods]
    rows = None if args.quick else args.out / "rows"
    summary = run_cases(cases, args.quick, args.seed, rows, args.jobs, args.fresh)
    summary.to_csv(args.out / "summary.csv", index=False)
    method_table(summary).to_csv(args.out / "methods.csv", index=False)
    run_power(methods, args.quick, args.seed).to_csv(args.out / "power.csv", index=False)
    if not args.quick:
        from calibration.figure import plot_summary

        plot_summary(summary, args.out / "summary.png")
    bad = summary[~summary["consistent"]]
    if len(bad):
        print(f"called calibrated but failed:\n{bad.to_string(index=False)}", file=sys.stderr)
        return 1
    print(f"{len(summary)} rows, every one passes or is labelled descriptive -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
