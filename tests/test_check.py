"""`python -m headstab.check`: a config is checked as the workflow checks it, without Snakemake and without running
any of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from headstab.check import load_configuration, main

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests/config/tiny.yaml"


@pytest.fixture(autouse=True)
def _run_from_repository_root(monkeypatch):
    monkeypatch.chdir(REPO)  # relative paths in configs start at the repository root, as under Snakemake


def _check(*args: str) -> subprocess.CompletedProcess:
    """`python -m headstab.check <args>` from the repository root; prints which packages it imported last."""
    code = (
        "import json, sys\nfrom headstab.check import main\nstatus = main(sys.argv[1:])\n"
        "print(json.dumps(sorted(m for m in ('snakemake', 'yte', 'torch', 'h5py') if m in sys.modules)))\n"
        "sys.exit(status)\n"
    )
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def _templated(tmp_path: Path) -> tuple[Path, Path]:
    """tiny.yaml whose results_dir comes from a YTE block whose condition touches a marker file."""
    marker = tmp_path / "ran"
    text = TINY.read_text().replace("results_dir: results/tiny\n", "")
    path = tmp_path / "templated.yaml"
    path.write_text(
        f"__use_yte__: true\n?if __import__('pathlib').Path({str(marker)!r}).touch() is None:\n"
        f"  results_dir: {tmp_path / 'results'}\n{text}"
    )
    return path, marker


@pytest.mark.parametrize(
    "files",
    [
        *([str(path.relative_to(REPO))] for path in sorted((REPO / "config").glob("*.yaml"))),
        ["tests/config/tiny.yaml"],
        ["config/demo.yaml", "config/presets/authors_code.yaml"],
    ],
)
def test_every_shipped_config_passes(files, capsys):
    assert main(files) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.startswith(f"{' '.join(files)}: valid; architectures ")


def test_a_templated_config_is_refused_before_any_of_it_runs_and_without_snakemake(tmp_path):
    path, marker = _templated(tmp_path)
    result = _check(str(path))
    assert result.returncode == 2 and not marker.exists()
    assert result.stderr.startswith(
        f"Invalid configuration: config file {path}: key '__use_yte__' makes Snakemake run the file's Python expressions"
    )
    assert json.loads(result.stdout) == []  # neither snakemake, yte, torch nor h5py was imported


def test_the_check_imports_no_snakemake_for_a_valid_config():
    result = _check(str(TINY))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == []


def test_a_key_given_twice_in_a_file_is_refused_naming_the_file_the_key_and_both_lines(tmp_path, capsys):
    path = tmp_path / "twice.yaml"
    path.write_text(TINY.read_text().replace("  lr: 3.0e-3\n", "  lr: 3.0e-3\n  lr: 1.0e-3\n", 1))
    lines = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line.startswith("  lr:")]
    assert main([str(path)]) == 2
    assert capsys.readouterr().err.startswith(
        f"Invalid configuration: config file {path}: key 'architecture_defaults.lr' is given twice, "
        f"on line {lines[0]} and line {lines[1]};"
    )


def test_a_key_given_twice_in_a_config_value_is_refused_naming_it(capsys):
    text = "{meta_sne_perplexity: 4, cka_max_tokens: 100, meta_sne_perplexity: 5}"
    second = text.rindex("meta_sne_perplexity") + 1  # 47
    assert main([str(TINY), "--config", f"analysis={text}"]) == 2
    assert capsys.readouterr().err.startswith(
        "Invalid configuration: --config analysis=...: key 'analysis.meta_sne_perplexity' is given twice, on line 1, "
        f"at columns 2 and {second};"
    )


def test_config_values_layer_over_the_files_key_by_key():
    config = load_configuration(
        [TINY, REPO / "config/presets/authors_code.yaml"], ["analysis={meta_sne_perplexity: 4}", "compute={seed: 3}"]
    )
    assert config["analysis"]["meta_sne_perplexity"] == "4"  # a string, as Snakemake's BaseLoader reads it
    assert config["analysis"]["heldout_corpus"] == "tiny_heldout"  # tiny.yaml's, under the preset and the value
    assert config["analysis"]["cka_hook"] == "hook_resid_pre"  # the preset's
    assert config["compute"] == {
        **{"device": "cpu", "train_threads": 1, "cache_threads": 1, "cache_refits_per_job": 2},
        "seed": "3",
    }
    assert load_configuration([TINY], ["results_dir=elsewhere", "seeds_note="])["results_dir"] == "elsewhere"


def test_an_alias_bomb_in_a_config_value_is_refused_naming_it(capsys):
    anchors = ["&a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    anchors += [f"&a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 9)]
    value = f"results_dir=[{', '.join(anchors)}]"
    assert len(value) < 500
    assert main([str(TINY), "--config", value]) == 2
    message = capsys.readouterr().err
    assert message.startswith("Invalid configuration: --config results_dir=...: its aliases (*name) expand to ")
    assert "more than the 100,000 a headstab --config value may hold" in message and len(message) < 400


def test_a_file_nested_3000_deep_is_refused_naming_it(tmp_path, capsys):
    path = tmp_path / "deep.yaml"
    path.write_text(TINY.read_text().replace("seeds: {first: 1, last: 2}", "seeds: " + "[" * 3000 + "]" * 3000))
    assert main([str(path)]) == 2
    assert capsys.readouterr().err == (
        f"Invalid configuration: config file {path} nests mappings or lists too deeply to read; flatten it\n"
    )


def test_a_prompt_set_the_config_names_but_no_file_gives_is_refused_as_the_workflow_refuses_it(capsys):
    assert main([str(TINY), "--config", "analysis={promptset: lenx}"]) == 2
    assert capsys.readouterr().err.startswith(
        "Invalid prompt sets: config key 'analysis.promptset': 'lenx' is not a prompt set; choose from ['primary'"
    )


def test_the_readme_says_on_its_first_screen_that_a_config_is_code_and_how_to_check_one():
    first_screen = "\n".join((REPO / "README.md").read_text().splitlines()[:15])
    assert "A config file is code, as a Snakefile is." in first_screen
    assert "python -m headstab.check CONFIG" in first_screen
    assert "python -m headstab.check their.yaml" in (REPO / "docs/operations.md").read_text()
