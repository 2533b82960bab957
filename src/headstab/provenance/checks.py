"""One file of the workflow checked against the record that covers it: `check_sha256`, `read_record`,
`read_h5_attrs` with the attributes' digests, `read_in_full` for the datasets' checksums, each result a
`ProvenanceNode` with its status (lineage.py walks the chain of them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py

from headstab.activations.errors import is_filter_failure
from headstab.activations.h5util import attribute_digest_mismatches, decode_attr
from headstab.fileio import read_json, sha256_file

__all__ = ["FAILED", "ProvenanceNode", "check_sha256", "read_h5_attrs", "read_in_full", "read_record"]


@dataclass
class ProvenanceNode:
    """One file in the chain from an output back to the corpus shards."""

    path: str
    kind: str
    details: dict[str, Any] = field(default_factory=dict)
    # ok | missing | sha256 mismatch | checksum mismatch | digest mismatch | unreadable | unrecorded | unverified
    status: str = "ok"
    inputs: list[ProvenanceNode] = field(default_factory=list)


FAILED = ("missing", "sha256 mismatch", "checksum mismatch", "digest mismatch", "unreadable", "unrecorded")


def check_sha256(path: Path, expected_sha256: str | None, verify: bool) -> str:
    """The status of `path` against its recorded sha256: missing, ok (nothing recorded), unverified (not
    `verify`), ok or sha256 mismatch."""
    if not path.exists():
        return "missing"
    if expected_sha256 is None:
        return "ok"
    if not verify:
        return "unverified"
    return "ok" if sha256_file(path) == expected_sha256 else "sha256 mismatch"


def read_record(path: Path, node: ProvenanceNode, what: str) -> dict[str, Any] | None:
    """The JSON record `path` (None, with the node marked, when it is missing or unreadable)."""
    try:
        record = read_json(path, what)
    except (FileNotFoundError, ValueError, UnicodeDecodeError) as error:
        node.status = "missing" if isinstance(error, FileNotFoundError) else "unreadable"
        node.details["error"] = str(error)
        return None
    if not isinstance(record, dict):
        node.status, node.details["error"] = "unreadable", f"{what} file {path} is not a JSON object"
        return None
    return record


def read_h5_attrs(path: Path, node: ProvenanceNode, verify: bool) -> dict[str, Any] | None:
    """The file attributes of an HDF5 file of the workflow (None, the node marked, when it is missing or
    unreadable); with `verify` also their digests (attrs_sha256)."""
    if not path.exists():
        node.status = "missing"
        return None
    try:
        with h5py.File(path, "r") as handle:
            attrs = {key: decode_attr(handle.attrs[key]) for key in handle.attrs}
            mismatches = attribute_digest_mismatches(handle) if verify else []
    except OSError as error:
        node.status, node.details["error"] = "unreadable", str(error)
        return None
    if mismatches:
        node.status, node.details["error"] = "digest mismatch", f"{'; '.join(mismatches)} (attrs_sha256 differs)"
    return attrs


def read_in_full(node: ProvenanceNode, read: Callable[[], Any]) -> None:
    """Run `read()`, a reader that checks the file's format and reads its datasets (their fletcher32 checksums)."""
    try:
        read()
    except ValueError as error:  # CacheError, SimilarityFileError, GroupedSimilarityError
        if node.status == "ok":
            cause = error.__cause__
            checksum = isinstance(cause, OSError) and is_filter_failure(cause)
            node.status, node.details["error"] = "checksum mismatch" if checksum else "unreadable", str(error)
