"""docs/fidelity.md, the authors'-code preset and the configs agree: every departure is a switch."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from headstab.plan.config import architecture_spec, load_yaml, validate_config

REPO = Path(__file__).resolve().parents[2]
FIDELITY = REPO / "docs/fidelity.md"
PRESET = REPO / "config/presets/authors_code.yaml"
PAPER = REPO / "config/config.yaml"
# The authors' choices as their code makes them, written out here so that a row and the preset cannot drift together.
AUTHORS_CHOICES = {
    # Stability_Residual_Stream.ipynb stacks every token of every prompt, BOS included: no cap.
    "analysis.cka_max_tokens": None,
    # Stability_Cross_Layers.ipynb appends the best-match indices before it drops the anchor's own column.
    "analysis.alignment_self_match": True,
    # Their OpenWebText script never sets the train config's seed: torch.manual_seed(0) before every shuffled DataLoader.
    "architectures.gpt2.data_order": "shared",
    "architectures.gpt2_wd.data_order": "shared",
    # Their GPT-2 script builds the model from HF's pretrained gpt2 config (gelu_new); the analyses use gelu for all.
    "architectures.gpt2.act_fn": "gelu_new",
    "architectures.gpt2_wd.act_fn": "gelu_new",
    "analysis.act_fn": "gelu",
    # Every number in the paper is for one anchor refit, seed 1.
    "analysis.anchors": "first",
}


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
    """The value of a dotted key; architectures.<name>.<field> as the architecture's spec resolves it (defaults,
    entry, architecture_overrides)."""
    parts = dotted.split(".")
    if parts[0] == "architectures" and len(parts) == 3:
        return getattr(architecture_spec(config, parts[1]), parts[2])
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


@pytest.mark.parametrize("key", sorted(AUTHORS_CHOICES))
def test_the_preset_and_the_table_make_each_authors_choice(rows, key):
    with_preset = merged(PAPER, PRESET)
    assert lookup(with_preset, key) == AUTHORS_CHOICES[key], key
    listed = [row for row in rows if code_value(row["config key"]) == key]
    assert len(listed) == 1, f"docs/fidelity.md lists {key} {len(listed)} times"
    assert code_value(listed[0]["authors' value"]) == AUTHORS_CHOICES[key], key


def test_the_primary_prompts_row_gives_the_papers_request_and_the_authors_pickle_each_its_own_length():
    (row,) = [row for row in fidelity_rows() if code_value(row["config key"]) == "prompt_sets.primary"]
    # §A.4's generation instruction asks for 15-80 tokens; 21-63 words (median 37) is what the pickle holds.
    assert "15-80 tokens" in row["paper"] and "21-63" not in row["paper"], row["paper"]
    assert "21-63 words" in row["authors' code"] and "median 37" in row["authors' code"], row["authors' code"]
    assert "paper's 21-63" not in FIDELITY.read_text()


@pytest.mark.parametrize("arch", ["gpt2", "gpt2_wd"])
def test_the_published_config_describes_how_the_authors_trained_gpt2(arch):
    published = merged(REPO / "config/published.yaml")
    spec = architecture_spec(published, arch)
    assert spec.data_order == "shared" and spec.act_fn == "gelu_new"  # loaded with what they were trained with
    assert published["analysis"]["act_fn"] is None
    assert merged(REPO / "config/published.yaml", PRESET)["analysis"]["act_fn"] == "gelu"  # the authors' analysis


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
