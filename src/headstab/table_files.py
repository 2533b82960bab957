"""Tables and figures as files, each with a record beside it (`<name>.csv.provenance.json`,
`<name>.png.provenance.json`: the file's sha256, the rule that wrote it and that job's inputs), so
`python -m headstab.provenance --verify` can tell a hand-edited table or figure from the one its rule wrote and
trace it through what it was really made from (checkpoints, caches, similarity files or other tables).
Every CSV table is written by `write_table`, whole or not at all; every job that saves figures calls
`write_figure_records` once they are saved.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from headstab.fileio import atomic_path, read_json, sha256_file, write_json_atomic
from headstab.plan.layout import RECORD_SUFFIX

__all__ = [
    "RECORD_SUFFIX",
    "FigureJob",
    "Job",
    "read_file_record",
    "record_inputs",
    "record_path",
    "write_figure_records",
    "write_table",
]

FIGURE_SUFFIX = ".png"


class Job(Protocol):
    """What `write_table` reads of the job that writes a table: Snakemake's `snakemake` object of a script."""

    rule: str
    input: Iterable[str]


class FigureJob(Job, Protocol):
    """What `write_figure_records` reads of the job: also its output files."""

    output: Iterable[str]


def record_path(path: str | Path) -> Path:
    """The record beside a table or figure: tables/x.csv -> tables/x.csv.provenance.json."""
    path = Path(path)
    return path.with_name(path.name + RECORD_SUFFIX)


def _write_record(path: str | Path, job: Job, head: dict[str, Any]) -> None:
    """`head`, the rule and the job's input files, in Snakemake's order, relative to the file's directory (a
    results directory moved whole keeps its lineage; `record_inputs` reads them back)."""
    parent = os.path.abspath(Path(path).parent)
    inputs = [os.path.relpath(os.path.abspath(item), parent) for item in job.input]
    write_json_atomic(record_path(path), head | {"rule": job.rule, "inputs": inputs})


def write_table(frame: pd.DataFrame, path: str | Path, job: Job) -> None:
    """Write `frame` to the CSV `path` (no index), then its record: sha256, number of rows, rule and inputs.
    The table is written first, so a job killed in between leaves a table whose record is missing or stale,
    which --verify reports, never a record that vouches for a table it did not see."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    _write_record(path, job, {"table": Path(path).name, "sha256": sha256_file(path), "n_rows": len(frame)})


def write_figure_records(job: FigureJob) -> list[Path]:
    """The record of every figure (.png) among the job's outputs, written after the figures are saved: sha256,
    rule and inputs. Returns the figures; FileNotFoundError naming a figure the job has not saved."""
    figures = [Path(item) for item in job.output if str(item).endswith(FIGURE_SUFFIX)]
    for figure in figures:
        if not figure.is_file():
            raise FileNotFoundError(f"rule {job.rule} did not save its figure {figure}; no record is written for it")
        _write_record(figure, job, {"figure": figure.name, "sha256": sha256_file(figure)})
    return figures


def read_file_record(path: str | Path) -> dict[str, Any]:
    """The record of the table or figure `path`; raises FileNotFoundError or ValueError naming the record and
    the fix."""
    record_file = record_path(path)
    what = "figure" if str(path).endswith(FIGURE_SUFFIX) else "table"
    record = read_json(record_file, f"{what} record")
    if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
        raise ValueError(f"{what} record {record_file} holds no sha256; rerun the rule that writes {Path(path).name}")
    if not isinstance(record.get("inputs", []), list):
        raise ValueError(
            f"{what} record {record_file}: inputs is not a list; rerun the rule that writes {Path(path).name}"
        )
    return record


def record_inputs(path: str | Path, record: dict[str, Any]) -> list[Path]:
    """The input files `record` lists, as paths from where `path` is named (normalised, no `..` left inside)."""
    parent = Path(path).parent
    return [Path(os.path.normpath(parent / item)) for item in record.get("inputs", [])]
