"""Provenance records: what produced a file (inputs' sha256, config, code version, packages, host, device).

Writing: `environment_record` goes into every meta.json beside a checkpoint and into the attributes of every
cache and similarity file, so a number in a paper can be traced back to the corpus shards; a corpus's and a
tokenizer's go into `environment.json` beside their meta.json, which other jobs read as inputs and must hold
content only (the same corpus or tokenizer rebuilt gives the same bytes, whenever and wherever it is built). Reading: one file checked against its record (`check_sha256`, `read_record`, `read_h5_attrs` with the
attributes' digests, `read_in_full` for the datasets' checksums), each a `ProvenanceNode` with its status.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import h5py

from headstab.activations.errors import is_filter_failure
from headstab.activations.h5util import attribute_digest_mismatches, decode_attr
from headstab.fileio import read_json, sha256_file

__all__ = [
    "ENVIRONMENT_FILE",
    "FAILED",
    "TRACKED_PACKAGES",
    "ProvenanceNode",
    "check_sha256",
    "environment_record",
    "git_commit",
    "package_versions",
    "read_h5_attrs",
    "read_in_full",
    "read_record",
]

ENVIRONMENT_FILE = "environment.json"  # beside a corpus's or tokenizer's meta.json: the job that built it

TRACKED_PACKAGES = (
    "headstab",
    "torch",
    "transformer-lens",
    "transformers",
    "tokenizers",
    "datasets",
    "numpy",
    "h5py",
    "snakemake",
)


def package_versions(packages: Iterable[str] = TRACKED_PACKAGES) -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in packages:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_commit(repo: str | Path | None = None) -> str:
    """The workflow's git commit (with '-dirty' when the tree has uncommitted changes), or 'unknown'."""
    repo = Path(repo) if repo is not None else Path(__file__).resolve().parent  # git finds the repository above
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def environment_record(device: str | None = None) -> dict[str, Any]:
    """Host, device, code version and package versions, for a meta.json."""
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "device": device or "cpu",
        "git_commit": git_commit(),
        "packages": package_versions(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


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
