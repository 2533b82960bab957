"""Tables and figures as files: write_table writes the CSV a plain to_csv would, and each table and figure gets a
record that vouches for exactly it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

from headstab.table_files import read_file_record, record_inputs, record_path, write_figure_records, write_table


@dataclass
class Job:
    rule: str
    input: list[str]
    output: list[str] = field(default_factory=list)


FRAME = pd.DataFrame({"layer": [0, 1, 2], "stability": [0.5, 0.125, float("nan")], "calibration": ["a", "b", "c"]})


def test_the_table_is_the_csv_to_csv_writes_and_its_record_holds_its_sha256(tmp_path: Path) -> None:
    table = tmp_path / "l2_h4" / "tables" / "layer_stability.csv"
    write_table(FRAME, table, Job("stability_tables", []))
    plain = tmp_path / "plain.csv"
    FRAME.to_csv(plain, index=False)
    assert table.read_bytes() == plain.read_bytes()
    record = json.loads(record_path(table).read_text())
    assert record_path(table) == table.with_name("layer_stability.csv.provenance.json")
    assert record == {
        "table": "layer_stability.csv",
        "sha256": hashlib.sha256(plain.read_bytes()).hexdigest(),
        "n_rows": 3,
        "rule": "stability_tables",
        "inputs": [],
    }
    assert read_file_record(table) == record


def test_inputs_are_recorded_relative_to_the_table_and_read_back_from_where_it_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    inputs = ["results/l2_h4/checkpoints/seed1/final.pt", str(tmp_path / "config" / "prompts.json")]
    write_table(FRAME, "results/l2_h4/tables/weight_norms.csv", Job("weight_norms", inputs))
    record = read_file_record("results/l2_h4/tables/weight_norms.csv")
    assert record["inputs"] == ["../checkpoints/seed1/final.pt", "../../../config/prompts.json"]
    assert record_inputs("results/l2_h4/tables/weight_norms.csv", record) == [
        Path(inputs[0]),
        Path("config/prompts.json"),
    ]
    absolute = tmp_path / "results/l2_h4/tables/weight_norms.csv"
    assert record_inputs(absolute, record) == [tmp_path / inputs[0], tmp_path / "config" / "prompts.json"]


def test_a_failed_write_leaves_the_old_table_and_record(tmp_path: Path) -> None:
    table = tmp_path / "tables" / "x.csv"
    write_table(FRAME, table, Job("x", []))
    before = (table.read_bytes(), record_path(table).read_bytes())

    class Broken(pd.DataFrame):
        def to_csv(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        write_table(Broken(FRAME), table, Job("x", []))
    assert (table.read_bytes(), record_path(table).read_bytes()) == before
    assert sorted(p.name for p in table.parent.iterdir()) == ["x.csv", "x.csv.provenance.json"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "table record file .*x.csv.provenance.json does not exist"),
        ("{", "table record file .*x.csv.provenance.json is not valid JSON"),
        ('{"inputs": []}', "x.csv.provenance.json holds no sha256; rerun the rule that writes x.csv"),
        ('{"sha256": "ab", "inputs": "a.h5"}', "inputs is not a list; rerun the rule that writes x.csv"),
    ],
)
def test_a_missing_or_damaged_record_is_refused_naming_it(tmp_path: Path, content: str | None, message: str) -> None:
    table = tmp_path / "x.csv"
    FRAME.to_csv(table, index=False)
    if content is not None:
        record_path(table).write_text(content)
    with pytest.raises((FileNotFoundError, ValueError), match=message):
        read_file_record(table)


def test_every_figure_of_the_job_gets_a_record_of_its_bytes_and_no_other_output_does(tmp_path: Path) -> None:
    figures = [tmp_path / "figures" / "a.png", tmp_path / "figures" / "b.png"]
    for index, figure in enumerate(figures):
        figure.parent.mkdir(exist_ok=True)
        figure.write_bytes(b"\x89PNG" + bytes([index]))
    table = tmp_path / "tables" / "a.csv"
    job = Job("stability_figures", [str(table)], [str(table), *map(str, figures)])
    assert write_figure_records(job) == figures
    assert not record_path(table).exists()
    for index, figure in enumerate(figures):
        assert read_file_record(figure) == {
            "figure": figure.name,
            "sha256": hashlib.sha256(b"\x89PNG" + bytes([index])).hexdigest(),
            "rule": "stability_figures",
            "inputs": ["../tables/a.csv"],
        }


def test_a_figure_the_job_did_not_save_is_named_and_a_figure_record_is_called_so(tmp_path: Path) -> None:
    figure = tmp_path / "figures" / "a.png"
    with pytest.raises(FileNotFoundError, match=f"rule seeds_needed did not save its figure {figure}"):
        write_figure_records(Job("seeds_needed", [], [str(figure)]))
    figure.parent.mkdir()
    figure.write_bytes(b"png")
    with pytest.raises(FileNotFoundError, match="figure record file .*a.png.provenance.json does not exist"):
        read_file_record(figure)
