"""Provenance records: the environment record of what produced a file (code version, packages, host, device).

`environment_record` goes into every meta.json beside a checkpoint and into the attributes of every cache and
similarity file, so a number in a paper can be traced back to the code and packages that made it; a corpus's and a
tokenizer's go into `environment.json` beside their meta.json, which other jobs read as inputs and must hold
content only (the same corpus or tokenizer rebuilt gives the same bytes, whenever and wherever it is built).
Training, the tokenizer loader and the job scripts import it, so it imports neither h5py nor the caches (the checks
of a file against its record are in checks.py).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["ENVIRONMENT_FILE", "TRACKED_PACKAGES", "environment_record", "git_commit", "package_versions"]

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
