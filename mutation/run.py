"""Mutation testing of the scientific modules (issue 16): `make mutation` -> results/mutation/summary.json.

Each module is mutated by mutmut in a work folder of its own (results/mutation/work/<module>/, a copy
of src/ and tests/ whose pyproject.toml names that module and its test files), so its mutants run
against its own tests only. BLAS and OpenMP are held to one thread: forked workers that inherit a
thread pool spin, and survivors show up as timeouts.

    python mutation/run.py                  # every module
    python mutation/run.py cka stability    # some of them (the summary keeps the others' last results)
    python mutation/run.py --max-children 2
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "mutation"
EQUIVALENT = ROOT / "tests" / "mutation_equivalent.txt"
# The console script, not `python -m mutmut`, which mutmut warns leaves its own module in sys.modules.
MUTMUT = str(Path(sys.executable).with_name("mutmut"))

# The modules that compute a number a paper would report: the core two, then every similarity engine,
# section (§4.4-4.9), statistics and MLP-neuron module found, each tested by the file that mirrors its path.
CORE = ("stability", "cka")
PACKAGES = ("similarity", "sections", "statistics", "neurons")
# A module whose tests live in another module's file: headline by the report pages' tests, refit_weights
# by the tests of the sections that bootstrap refits.
EXTRA_TESTS = {
    "sections/headline": ["tests/test_report_pages.py"],
    "statistics/refit_weights": [
        "tests/sections/test_effective_rank.py",
        "tests/sections/test_layer_robustness.py",
        "tests/sections/test_seed_grid.py",
    ],
}


def has_code(path: Path) -> bool:
    """Whether a module defines a function or class: a module of constants alone (a registry's rows) computes
    nothing, and mutmut mutates code inside functions only."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for node in tree.body)


def discover_modules() -> dict[str, tuple[str, list[str]]]:
    """module name -> (source file, its test files), test files that exist only; modules of constants left out."""
    names = list(CORE)
    for package in PACKAGES:
        names += sorted(
            f"{package}/{path.stem}"
            for path in (ROOT / "src/headstab" / package).glob("*.py")
            if path.stem != "__init__" and has_code(path)
        )
    modules = {}
    for name in names:
        folder, _, stem = name.rpartition("/")
        mirror = f"tests/{folder + '/' if folder else ''}test_{stem}.py"
        tests = [t for t in [mirror, *EXTRA_TESTS.get(name, [])] if (ROOT / t).exists()]
        modules[name] = (f"src/headstab/{name}.py", tests)
    return modules


MODULES = discover_modules()


def record(name: str, entry: dict) -> None:
    """Set one module's entry in summary.json, re-read just before: concurrent runs keep each other's, and the
    entries of modules no longer listed are dropped."""
    path = OUT / "summary.json"
    summary = json.loads(path.read_text()) if path.exists() else {}
    kept = {module: last for module, last in summary.get("modules", {}).items() if module in MODULES}
    summary["modules"] = kept | {name: entry}  # a module no longer listed leaves the summary
    summary["mutmut"] = "3.8.1"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(summary, indent=2) + "\n")
    partial.replace(path)


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
COUNTED = ("killed", "survived", "timeout", "no tests", "suspicious", "segfault", "skipped", "not checked")


def mutmut_section(source: str, tests: list[str]) -> str:
    """The [tool.mutmut] table that restricts mutmut to one source file and its tests."""
    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["src"]\n'
        f"only_mutate = [{json.dumps(source)}]\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]\n'
        # The git-based change detection looks at the checkout, not at this copy.
        "use_git_change_detection = false\n"
        # mutmut runs the tests in mutants/, a copy of src and tests: the files they read go along.
        f"also_copy = {json.dumps([entry for entry in COPIED if entry not in ('src', 'tests', 'pyproject.toml')])}\n"
    )


# What the tests read besides the code (the docs and captions they check words in, the paper's numbers and
# prompts, the configs, the calibration cases): every top-level entry git tracks, so that no test can read a
# file its copy lacks; without git, these.
FALLBACK_COPIED = ("src", "tests", "docs", "resources", "config", "workflow", "calibration")


def tracked_top_level(root: Path) -> tuple[str, ...]:
    """The top-level files and folders of `root` that git tracks, sorted; FALLBACK_COPIED outside a git checkout."""
    listing = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True)
    if listing.returncode != 0 or not listing.stdout.strip():
        return FALLBACK_COPIED
    return tuple(sorted({line.split("/", 1)[0] for line in listing.stdout.splitlines() if line}))


COPIED = tracked_top_level(ROOT)


def prepare(work: Path, source: str, tests: list[str]) -> None:
    """A fresh copy of COPIED with a pyproject.toml for this module alone (the checkout's, plus mutmut's table)."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".tmp")
    for entry in COPIED:
        if (ROOT / entry).is_dir():
            shutil.copytree(ROOT / entry, work / entry, ignore=ignore)
        elif entry != "pyproject.toml":
            shutil.copy2(ROOT / entry, work / entry)
    pyproject = (ROOT / "pyproject.toml").read_text()
    (work / "pyproject.toml").write_text(pyproject + mutmut_section(source, tests))


def statuses(work: Path, env: dict[str, str]) -> dict[str, str]:
    """{mutant name: status} from `mutmut results --all true`."""
    listing = subprocess.run(
        [MUTMUT, "results", "--all", "true"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = {}
    for line in listing.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep:
            result[name] = status
    return result


def mutation_of(work: Path, name: str, env: dict[str, str]) -> str:
    """The mutated code of one mutant: its added lines from `mutmut show`, stripped, joined by ' / '."""
    diff = subprocess.run([MUTMUT, "show", name], cwd=work, env=env, capture_output=True, text=True).stdout
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return " / ".join(added)


def function_of(name: str) -> str:
    """headstab.cka.x_center_gram__mutmut_17 -> center_gram (methods: Class.method)."""
    local = name.rsplit(".", 1)[-1].rsplit("__mutmut_", 1)[0]
    return local.removeprefix("x_").removeprefix("x").replace("\u01c1", ".").strip(".")


def equivalent_mutants() -> dict[tuple[str, str, str], str]:
    """(module, function, mutated code) -> why, from tests/mutation_equivalent.txt.

    One mutant a line: `module | function | mutated code | why it cannot change any output`. The code
    is matched, not mutmut's running number, which shifts whenever the module is edited.
    """
    if not EQUIVALENT.exists():
        return {}
    listed = {}
    for line in EQUIVALENT.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        module, function, code, why = (part.strip() for part in line.split(" | ", 3))
        listed[(module, function, code)] = why
    return listed


def summarise(
    module: str, by_mutant: dict[str, str], code_of: dict[str, str], equivalent: dict, seconds: float
) -> dict:
    counts = {status: sum(1 for s in by_mutant.values() if s == status) for status in COUNTED}
    total = len(by_mutant)
    killed = counts["killed"]
    keys = {name: (module, function_of(name), code) for name, code in code_of.items()}
    listed = {name for name, key in keys.items() if key in equivalent}
    # An entry that matches no surviving mutant is stale (now killed, or the code changed): say so.
    stale = sorted(" | ".join(key) for key in equivalent if key[0] == module and key not in keys.values())
    return {
        "mutants": total,
        "killed": killed,
        "survived": counts["survived"],
        "timed_out": counts["timeout"],
        "no_tests": counts["no tests"],
        "other": total - killed - counts["survived"] - counts["timeout"] - counts["no tests"],
        "raw_score": round(killed / total, 4) if total else None,
        "equivalent": len(listed),
        "score_without_equivalent": round(killed / (total - len(listed)), 4) if total > len(listed) else None,
        "stale_equivalent": stale,
        "not_killed": [
            f"{by_mutant[name]} | {' | '.join(keys[name])}" for name in sorted(code_of) if name not in listed
        ],
        "seconds": round(seconds, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help=f"some of: {', '.join(MODULES)} (default: all)")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; known: {', '.join(MODULES)}")

    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", **dict.fromkeys(THREAD_VARIABLES, "1"))
    equivalent = equivalent_mutants()
    failed: list[str] = []
    for name in args.modules or list(MODULES):
        source, tests = MODULES[name]
        if not tests:
            print(f"{name}: skipped, it has no test file", flush=True)
            record(name, {"source": source, "tests": [], "skipped": "no test file"})
            continue
        work = OUT / "work" / name
        prepare(work, source, tests)
        print(f"{name}: mutating {source} against {' '.join(tests)}", flush=True)
        start = time.monotonic()
        with open(OUT / "work" / f"{name.replace('/', '_')}.log", "w") as log:
            run = subprocess.run(
                [MUTMUT, "run", "--max-children", str(args.max_children)],
                cwd=work,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if run.returncode != 0:
            # The next modules still run: one module whose tests fail must not leave the others unscored.
            print(f"{name}: mutmut failed ({run.returncode}), see {log.name}", flush=True)
            record(
                name, {"source": source, "tests": tests, "failed": f"mutmut exited {run.returncode}, see {log.name}"}
            )
            failed.append(name)
            continue
        by_mutant = statuses(work, env)
        code_of = {m: mutation_of(work, m, env) for m, status in by_mutant.items() if status != "killed"}
        entry = summarise(name, by_mutant, code_of, equivalent, time.monotonic() - start)
        entry.update(source=source, tests=tests)
        record(name, entry)
        print(
            f"{name}: {entry['killed']}/{entry['mutants']} killed, {entry['survived']} survived, "
            f"{entry['timed_out']} timed out, raw {entry['raw_score']:.1%}, "
            f"without equivalents {entry['score_without_equivalent']:.1%} ({entry['seconds']:.0f} s)",
            flush=True,
        )
    if failed:
        print(f"mutmut failed on {failed}: their logs are in {OUT / 'work'}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
