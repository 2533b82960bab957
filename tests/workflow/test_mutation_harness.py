"""The quick form of `make mutation` (mutation/run.py) without mutmut: each module's work folder holds every file
its tests can read, mutmut is told to copy them on, and the summary's arithmetic and equivalent matching are
right by hand. The full run is `make mutation` (docs/testing.md)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("mutation_run", REPO / "mutation" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_run"] = module
    spec.loader.exec_module(module)
    return module


def test_every_top_level_entry_git_tracks_is_copied(harness):
    listing = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if listing.returncode != 0:
        pytest.skip("not a git checkout: the fallback list is used")
    tracked = {line.split("/", 1)[0] for line in listing.stdout.splitlines()}
    assert tracked <= set(harness.COPIED)
    assert {"docs", "resources", "config", "workflow", "calibration", "README.md"} <= set(harness.COPIED)


def test_a_module_work_folder_holds_what_its_tests_read_and_mutmut_copies_it_on(harness, tmp_path):
    source, tests = harness.MODULES["statistics/bootstrap"]
    assert tests == ["tests/statistics/test_bootstrap.py"]
    work = tmp_path / "work"
    harness.prepare(work, source, tests)
    # test_bootstrap reads docs/statistics.md; other tests read README.md, the report captions and the prompts
    for path in ("docs/statistics.md", "README.md", "workflow/report", "resources", "tests/conftest.py", source):
        assert (work / path).exists(), path
    table = tomllib.loads((work / "pyproject.toml").read_text())["tool"]["mutmut"]
    assert table["only_mutate"] == ["src/headstab/statistics/bootstrap.py"]
    assert table["pytest_add_cli_args_test_selection"] == tests
    assert set(table["also_copy"]) == set(harness.COPIED) - {"src", "tests", "pyproject.toml"}
    assert "__pycache__" not in {p.name for p in (work / "src" / "headstab").iterdir()}


def test_function_of_names_the_mutated_function_and_method(harness):
    assert harness.function_of("headstab.cka.x_center_gram__mutmut_17") == "center_gram"
    assert harness.function_of("headstab.cka.x\u01c1Cache\u01c1read__mutmut_3") == "Cache.read"


def test_the_summary_counts_and_sets_equivalents_aside(harness):
    by_mutant = {
        "headstab.cka.x_f__mutmut_1": "killed",
        "headstab.cka.x_f__mutmut_2": "killed",
        "headstab.cka.x_f__mutmut_3": "survived",
        "headstab.cka.x_g__mutmut_1": "survived",
        "headstab.cka.x_g__mutmut_2": "timeout",
    }
    code_of = {
        "headstab.cka.x_f__mutmut_3": "a = 2",
        "headstab.cka.x_g__mutmut_1": "b = None",
        "headstab.cka.x_g__mutmut_2": "while True: pass",
    }
    equivalent = {("cka", "g", "b = None"): "b is unused", ("cka", "h", "c = 1"): "gone"}
    entry = harness.summarise("cka", by_mutant, code_of, equivalent, 1.25)
    assert (entry["mutants"], entry["killed"], entry["survived"], entry["timed_out"]) == (5, 2, 2, 1)
    assert entry["raw_score"] == 0.4
    assert entry["equivalent"] == 1
    assert entry["score_without_equivalent"] == 0.5  # 2 killed of the 4 not listed as equivalent
    assert entry["stale_equivalent"] == ["cka | h | c = 1"]
    assert entry["not_killed"] == ["survived | cka | f | a = 2", "timeout | cka | g | while True: pass"]


def test_equivalent_entries_are_read_with_their_reason(harness, tmp_path, monkeypatch):
    listing = tmp_path / "equivalent.txt"
    listing.write_text("# comment\n\ncka | f | a = 2 | the value is overwritten | before use\n")
    monkeypatch.setattr(harness, "EQUIVALENT", listing)
    assert harness.equivalent_mutants() == {("cka", "f", "a = 2"): "the value is overwritten | before use"}


def test_every_listed_module_has_code_and_a_test_file_and_registries_of_constants_are_left_out(harness, tmp_path):
    assert all(tests for _, tests in harness.MODULES.values()), "a listed module would be skipped, not scored"
    assert "statistics/beyond_methods" not in harness.MODULES
    assert "statistics/neuron_methods" not in harness.MODULES
    assert {"statistics/calibration", "statistics/hypothesis", "stability"} <= set(harness.MODULES)
    constants = tmp_path / "rows.py"
    constants.write_text('"""Rows."""\n\nROWS = (("a", 1),)\n\nif ROWS:\n    NAMES = [r[0] for r in ROWS]\n')
    assert not harness.has_code(constants)
    for body in ("def f():\n    return 1\n", "class C:\n    pass\n", "async def g():\n    return 1\n"):
        constants.write_text(body)
        assert harness.has_code(constants)


def test_the_summary_keeps_the_other_listed_modules_and_drops_modules_no_longer_listed(harness, tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "OUT", tmp_path)
    old = {"stability": {"mutants": 3}, "statistics/beyond_methods": {"skipped": "no test file"}}
    (tmp_path / "summary.json").write_text(json.dumps({"modules": old, "mutmut": "3.8.1"}))
    harness.record("cka", {"mutants": 5})
    modules = json.loads((tmp_path / "summary.json").read_text())["modules"]
    assert modules == {"stability": {"mutants": 3}, "cka": {"mutants": 5}}
