"""calibration/run.py (`make calibration`): finished (case, n) rows are kept and reused, a changed source or
--fresh recomputes them, and worker processes give the rows one process gives, in the cases' order."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from calibration.harness import Case  # noqa: E402
from calibration.simulate import shared_draws  # noqa: E402

CALLS: list[int] = []


def _uniform_p(rng, n):
    CALLS.append(n)
    return float(rng.uniform())


def _failing(rng, n):
    raise AssertionError("a kept row was recomputed")


def write_files(root: Path, files: dict[str, str]) -> None:
    """Each relative path of `files` under root, with its text."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.fixture()
def runner(monkeypatch):
    spec = importlib.util.spec_from_file_location("calibration_run", REPO / "calibration" / "run.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "calibration_run", module)  # worker processes find _evaluate_row by name
    spec.loader.exec_module(module)
    cases = [
        Case("mantel_layer_blocks", "uniform_a", "size", _uniform_p, reps=40, ns=(4, 5)),
        Case("mantel_layer_blocks", "uniform_b", "size", _uniform_p, reps=30, ns=(12,)),
    ]
    monkeypatch.setattr(module, "CASES", cases)
    CALLS.clear()
    return module, cases


def test_rows_are_written_as_they_finish_and_reused(runner, tmp_path):
    module, cases = runner
    first = module.run_cases(cases, quick=False, seed=3, rows=tmp_path / "rows")
    assert list(zip(first["scenario"], first["n"], first["reps"])) == [
        ("uniform_a", 4, 40),
        ("uniform_a", 5, 40),
        ("uniform_b", 12, 30),
    ]
    assert sorted(CALLS) == [4] * 40 + [5] * 40 + [12] * 30
    assert len(list((tmp_path / "rows").glob("*.json"))) == 3
    module.CASES[:] = [Case(c.method, c.scenario, c.kind, _failing, reps=c.reps, ns=c.ns) for c in cases]
    again = module.run_cases(module.CASES, quick=False, seed=3, rows=tmp_path / "rows")
    pd.testing.assert_frame_equal(first, again)


def test_a_changed_source_another_seed_or_fresh_recomputes(runner, tmp_path, monkeypatch):
    module, cases = runner
    rows = tmp_path / "rows"
    module.run_cases(cases, quick=False, seed=3, rows=rows)
    CALLS.clear()
    module.run_cases(cases, quick=False, seed=4, rows=rows)
    assert len(CALLS) == 110
    CALLS.clear()
    module.run_cases(cases, quick=False, seed=3, rows=rows, fresh=True)
    assert len(CALLS) == 110
    CALLS.clear()
    monkeypatch.setattr(module, "source_digest", lambda *args, **kwargs: "another source")
    module.run_cases(cases, quick=False, seed=3, rows=rows)
    assert len(CALLS) == 110


def test_the_digest_covers_what_the_cases_import_and_nothing_else(runner, tmp_path):
    module, _ = runner
    files = {
        "calibration/cases/x.py": "def f():\n    from headstab.statistics.x import g\n",
        "src/headstab/__init__.py": "",
        "src/headstab/statistics/__init__.py": "",
        "src/headstab/statistics/x.py": "import headstab.statistics.y\ng = 1\n",
        "src/headstab/statistics/y.py": "h = 1\n",
        "src/headstab/neurons/z.py": "k = 1\n",
    }
    write_files(tmp_path, files)
    listed = {str(path.relative_to(tmp_path)) for path in module.source_files(tmp_path)}
    assert listed == set(files) - {"src/headstab/neurons/z.py"}
    before = module.source_digest(tmp_path)
    (tmp_path / "src/headstab/neurons/z.py").write_text("k = 2\n")
    assert module.source_digest(tmp_path) == before
    (tmp_path / "src/headstab/statistics/y.py").write_text("h = 2\n")  # imported by what a case imports
    assert module.source_digest(tmp_path) != before


def test_an_edit_to_one_case_module_changes_only_its_cases_digest(runner, tmp_path, monkeypatch):
    module, _ = runner
    files = {
        "calibration/harness.py": "import headstab.statistics.calibration\n",
        "calibration/cases/a.py": "from headstab.statistics.x import g\n",
        "calibration/cases/b.py": "k = 1\n",
        "src/headstab/__init__.py": "",
        "src/headstab/statistics/__init__.py": "",
        "src/headstab/statistics/calibration.py": "METHODS = {}\n",
        "src/headstab/statistics/x.py": "g = 1\n",
    }
    write_files(tmp_path, files)
    cases = {}
    for name in ("a", "b"):
        fake = types.ModuleType(f"fake_case_{name}")
        fake.__file__ = str(tmp_path / "calibration" / "cases" / f"{name}.py")
        monkeypatch.setitem(sys.modules, fake.__name__, fake)
        simulate = types.FunctionType(_uniform_p.__code__, {"CALLS": CALLS})
        simulate.__module__ = fake.__name__
        cases[name] = Case("mantel_layer_blocks", name, "size", simulate)
    outside = Case("mantel_layer_blocks", "outside", "size", _uniform_p)  # defined in this test, not under cases/

    def digests():
        return {name: module.case_digest(case, tmp_path) for name, case in {**cases, "outside": outside}.items()}

    before = digests()
    assert len(set(before.values())) == 3
    (tmp_path / "calibration/cases/b.py").write_text("k = 2\n")
    after_b = digests()
    assert after_b["a"] == before["a"] and after_b["b"] != before["b"] and after_b["outside"] != before["outside"]
    (tmp_path / "src/headstab/statistics/x.py").write_text("g = 2\n")  # imported by a only
    after_x = digests()
    assert after_x["b"] == after_b["b"] and after_x["a"] != after_b["a"]
    (tmp_path / "calibration/harness.py").write_text("import headstab.statistics.calibration\nx = 1\n")
    after_h = digests()
    assert after_h["a"] != after_x["a"] and after_h["b"] != after_x["b"]
    (tmp_path / "src/headstab/statistics/calibration.py").write_text("METHODS = {1: 2}\n")  # the registry: labels only
    assert digests() == after_h


def test_kept_rows_take_the_registrys_label_of_now(runner, tmp_path, monkeypatch):
    module, cases = runner
    first = module.run_cases(cases, quick=False, seed=3, rows=tmp_path / "rows")
    assert set(first["label"]) == {"calibrated"}
    monkeypatch.setattr(module, "calibration_label", lambda method, n: "descriptive" if n == 12 else "calibrated")
    module.CASES[:] = [Case(c.method, c.scenario, c.kind, _failing, reps=c.reps, ns=c.ns) for c in cases]
    again = module.run_cases(module.CASES, quick=False, seed=3, rows=tmp_path / "rows")
    assert list(again["label"]) == ["calibrated", "calibrated", "descriptive"]
    assert list(again["consistent"]) == [True, True, True] and list(again["passed"]) == list(first["passed"])


def test_worker_processes_give_the_same_rows_in_the_same_order(runner, tmp_path):
    module, cases = runner
    one = module.run_cases(cases, quick=False, seed=3, rows=tmp_path / "one")
    two = module.run_cases(cases, quick=False, seed=3, rows=tmp_path / "two", jobs=2)
    pd.testing.assert_frame_equal(one, two)


def test_the_cases_of_one_shared_study_run_in_one_worker_and_draw_each_dataset_once(runner, tmp_path, monkeypatch):
    module, _ = runner
    log = tmp_path / "studies.txt"

    def study(rng, n):
        with log.open("a") as out:
            out.write(f"{os.getpid()} {n}\n")
        return {"a": float(rng.uniform()), "b": float(rng.uniform())}

    shared = shared_draws(study)

    def reads(name):
        def simulate(rng, n):
            return shared(rng, n)[name]

        return simulate

    cases = [Case("mantel_layer_blocks", name, "size", reads(name), reps=20, ns=(4, 5)) for name in ("a", "b")]
    cases.append(Case("mantel_layer_blocks", "alone", "size", _uniform_p, reps=20, ns=(4,)))
    monkeypatch.setattr(module, "CASES", cases)
    assert module.shared_study(cases[0]) == module.shared_study(cases[1]) is not None
    assert module.shared_study(cases[2]) is None
    two = module.run_cases(cases, quick=False, seed=3, rows=tmp_path / "rows", jobs=2)
    runs = [line.split() for line in log.read_text().splitlines()]
    assert sorted(n for _, n in runs) == ["4"] * 20 + ["5"] * 20  # 2 cases x 2 n x 20 datasets, each drawn once
    assert all(len({pid for pid, n in runs if n == size}) == 1 for size in ("4", "5"))
    log.unlink()
    one = module.run_cases(cases, quick=False, seed=3, rows=tmp_path / "one")
    pd.testing.assert_frame_equal(one, two)
