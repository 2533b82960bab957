"""Provenance: what produced a file (inputs' sha256, config, code version, packages, host, device).

Every checkpoint, corpus shard, cache and similarity file carries such a record (a meta.json beside
it or HDF5 attributes), so a number in a paper can be traced back to the corpus shards.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

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


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in chunks (checkpoints run to gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def sha256_files(paths: Iterable[str | Path]) -> dict[str, str]:
    return {str(path): sha256_file(path) for path in paths}


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
    repo = Path(repo) if repo is not None else Path(__file__).resolve().parents[2]
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
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON through a temporary file and a rename, so a killed job never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False) as tmp:
        json.dump(data, tmp, indent=2, sort_keys=True, default=str)
        tmp.write("\n")
        tmp_name = tmp.name
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_name, 0o666 & ~umask)  # NamedTemporaryFile creates 0600; give the usual permissions
    os.replace(tmp_name, path)


def read_json(path: str | Path, what: str = "metadata") -> dict[str, Any]:
    """Read a JSON record, naming the file in the error."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {path} does not exist")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{what} file {path} is not valid JSON ({err}); delete it and rerun the rule that writes it") from err
