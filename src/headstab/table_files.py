"""Tables as files: every CSV table of the workflow is written by `write_table`, whole or not at all, with a
record beside it (`<name>.csv.provenance.json`: the table's sha256, the rule that wrote it and that job's
inputs), so `python -m headstab.provenance --verify` can tell a hand-edited table from the one its rule wrote
and trace it through what it was really made from (checkpoints, caches, similarity files or other tables).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from headstab.fileio import atomic_path, read_json, sha256_file, write_json_atomic
from headstab.plan.layout import TABLE_RECORD_SUFFIX as RECORD_SUFFIX

__all__ = ["RECORD_SUFFIX", "Job", "read_table_record", "table_inputs", "table_record_path", "write_table"]


class Job(Protocol):
    """What `write_table` reads of the job that writes a table: Snakemake's `snakemake` object of a script."""

    rule: str
    input: Iterable[str]


def table_record_path(table: str | Path) -> Path:
    """The record beside `table`: tables/x.csv -> tables/x.csv.provenance.json."""
    table = Path(table)
    return table.with_name(table.name + RECORD_SUFFIX)


def write_table(frame: pd.DataFrame, path: str | Path, job: Job) -> None:
    """Write `frame` to the CSV `path` (no index), then its record: sha256, rule and the job's input files, in
    Snakemake's order, relative to the table's directory (a results directory moved whole keeps its lineage;
    `table_inputs` reads them back). The table is written first, so a job killed in between leaves a table whose record is
    missing or stale, which --verify reports, never a record that vouches for a table it did not see."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    record = {
        "table": Path(path).name,
        "sha256": sha256_file(path),
        "n_rows": len(frame),
        "rule": job.rule,
        "inputs": [os.path.relpath(os.path.abspath(item), os.path.abspath(Path(path).parent)) for item in job.input],
    }
    write_json_atomic(table_record_path(path), record)


def read_table_record(table: str | Path) -> dict[str, Any]:
    """The record of `table`; raises FileNotFoundError or ValueError naming the record and the fix."""
    path = table_record_path(table)
    record = read_json(path, "table record")
    if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
        raise ValueError(f"table record {path} holds no sha256; rerun the rule that writes {Path(table).name}")
    if not isinstance(record.get("inputs", []), list):
        raise ValueError(f"table record {path}: inputs is not a list; rerun the rule that writes {Path(table).name}")
    return record


def table_inputs(table: str | Path, record: dict[str, Any]) -> list[Path]:
    """The input files `record` lists, as paths from where `table` is named (normalised, no `..` left inside)."""
    parent = Path(table).parent
    return [Path(os.path.normpath(parent / item)) for item in record.get("inputs", [])]
