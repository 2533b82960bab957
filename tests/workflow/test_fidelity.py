"""docs/fidelity.md, the authors'-code preset and the configs agree: every departure is a switch."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from headstab.plan.config import load_yaml, validate_config

REPO = Path(__file__).resolve().parents[2]
FIDELITY = REPO / "docs/fidelity.md"
PRESET = REPO / "config/presets/authors_code.yaml"
PAPER = REPO / "config/config.yaml"


def fidelity_rows() -> list[dict[str, str]]:
    """The rows of the table in docs/fidelity.md, keyed by its header."""
    lines = [line for line in FIDELITY.read_text().splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == len(header), line
        rows.append(dict(zip(header, cells)))
    return rows


def code_value(cell: str) -> object:
    """A cell's first `...` span, read as YAML (`—`: no value)."""
    match = re.search(r"`([^`]*)`", cell)
    assert match, f"no `value` in cell {cell!r}"
    return yaml.safe_load(match.group(1))


def lookup(config: dict, dotted: str) -> object:
    value = config
    for part in dotted.split("."):
        value = value[part]
    return value


def merged(*paths: Path) -> dict:
    """The configuration Snakemake builds from several --configfile files (recursive update), validated."""
    config: dict = {}
    for path in paths:
        update_config(config, load_yaml(path))
    return validate_config(copy.deepcopy(config))


@pytest.fixture(scope="module")
def rows():
    rows = fidelity_rows()
    assert len(rows) >= 10
    return rows


def test_every_row_names_a_config_key_that_exists(rows):
    paper = merged(PAPER)
    for row in rows:
        key = code_value(row["config key"])
        lookup(paper, key)  # KeyError if the switch does not exist


def test_the_preset_gives_the_authors_value_of_every_row(rows):
    with_preset = merged(PAPER, PRESET)
    checked = 0
    for row in rows:
        if row["authors' value"] == "—":
            continue
        key = code_value(row["config key"])
        assert lookup(with_preset, key) == code_value(row["authors' value"]), key
        checked += 1
    assert checked >= 10


def test_the_paper_config_gives_the_headstab_default_of_every_row(rows):
    paper = merged(PAPER)
    for row in rows:
        key = code_value(row["config key"])
        default = row["headstab default"]
        if default.startswith("`"):
            assert lookup(paper, key) == code_value(default), key


def test_the_preset_layers_onto_the_demo_and_leaves_its_architectures_alone():
    demo = merged(REPO / "config/demo.yaml")
    with_preset = merged(REPO / "config/demo.yaml", PRESET)
    assert with_preset["architectures"] == demo["architectures"]
    assert with_preset["analysis"]["weight_processing"] == [
        "center_writing_weights",
        "center_unembed",
        "fold_value_biases",
    ]
    assert demo["analysis"]["weight_processing"] == []
