"""Files written whole or not at all, and their checksums.

Every file the workflow writes goes through `atomic_path`: it is written under a temporary name in
the same directory, flushed to disk and renamed onto its real name, so a job killed half-way never
leaves a file that looks finished. The temporary name is fixed (`.<name>.tmp`), so a rerun removes
what a killed job left.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import re
import resource
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np


def temporary_path(path: str | Path) -> Path:
    """Where `atomic_path` writes `path` before renaming it."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write `path` to; on success it is fsynced and renamed onto `path`
    (with the permissions a plain open() gives), on an error it is removed and `path` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    tmp.unlink(missing_ok=True)  # left by a killed job
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        if is_disk_full(error):  # a write to an open handle names no file: say which one
            raise OSError(errno.ENOSPC, disk_full_message(path, error)) from error
        if is_file_too_large(error):
            raise OSError(errno.EFBIG, file_too_large_message(path, error)) from error
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def is_disk_full(error: OSError) -> bool:
    """Whether `error` is a full file system (or quota): errno ENOSPC/EDQUOT, or HDF5's text for it."""
    return error.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in str(error)


def disk_full_message(path: str | Path, error: OSError) -> str:
    """What to do when writing `path` filled its file system."""
    parent = Path(path).parent
    return (
        f"No space left on device while writing {path} ({error}); its temporary file was removed and {path} "
        f"was not written. Free space on the file system that holds {parent} (`df -h {shlex.quote(str(parent))}`), then rerun "
        "the same snakemake command: the job starts again and rebuilds the file"
    )


def is_file_too_large(error: OSError) -> bool:
    """Whether `error` is a write past the process's file size limit (`ulimit -f`) or the file system's largest file."""
    return error.errno == errno.EFBIG or "File too large" in str(error)


def file_too_large_message(path: str | Path, error: OSError) -> str:
    """What to do when writing `path` ran past the largest file this process may write."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    fix = (
        "its file system holds no larger file: point results_dir at one that does"
        if limit == resource.RLIM_INFINITY
        else f"this process may write files of at most {limit:,} bytes (`ulimit -f`): raise the limit (`ulimit -f "
        "unlimited` before snakemake, or a larger one from the cluster's job options)"
    )
    return (
        f"File too large while writing {path} ({error}); its temporary file was removed and {path} was not written. "
        f"{fix[0].upper()}{fix[1:]}, then rerun the same snakemake command: the job starts again and rebuilds the file"
    )


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | Path, data: Any) -> None:
    """JSON with sorted keys and a trailing newline; values JSON does not know are written as str()."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


class _WriteErrors:
    """A binary file that keeps the first OSError of its writes: torch.save reports a refused write as its own
    RuntimeError ("unexpected pos 704 vs 598"), which names neither the file nor the reason, and numpy writes to
    anything but a real file with Python's write."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.error = handle, None

    def write(self, data: bytes) -> int:
        try:
            return self.handle.write(data)
        except OSError as error:
            self.error = self.error or error
            raise

    def flush(self) -> None:
        self.handle.flush()


def save_npy_atomic(array: np.ndarray, path: str | Path) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        # through Python's write, whose OSError carries the errno (numpy's own file write says "N requested and M written")
        np.save(_WriteErrors(handle), array, allow_pickle=False)


def save_torch_atomic(obj: Any, path: str | Path) -> None:
    import torch

    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        writer = _WriteErrors(handle)
        try:
            torch.save(obj, writer)
        except RuntimeError:
            if writer.error is None:
                raise
            raise writer.error from None  # the full disk or file size limit, which atomic_path names with its fix


# How torch.load(weights_only=True) names a global it will not unpickle (torch/_weights_only_unpickler.py):
# "Unsupported global: GLOBAL builtins.exec was not an allowed global by default" or, for os, sys, posix
# and nt, "Trying to load unsupported GLOBAL posix.system whose module posix is blocked".
_REFUSED_GLOBAL = re.compile(r"\bGLOBAL (\S+) (?:was not an allowed global|whose module \S+ is blocked)")


def weights_only_refusal(error: BaseException) -> str | None:
    """The global (a function or class) that torch.load(weights_only=True) refused to unpickle, or None.

    torch raises pickle.UnpicklingError worded "Weights only load failed ..." before calling anything
    the file names, so a refusal means nothing of the file ran.
    """
    text = str(error)
    if not isinstance(error, pickle.UnpicklingError) or "weights only" not in text.lower():
        return None
    match = _REFUSED_GLOBAL.search(text)
    return match.group(1) if match else None


def torch_reason(error: BaseException) -> str:
    """The line of a torch.load error that says what went wrong, without torch's advice around it."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    specific = [line for line in lines if not line.startswith(("Check the documentation", "Weights only load failed"))]
    return (specific or lines or [type(error).__name__])[-1].removeprefix("WeightsUnpickler error: ")[:300]


def read_json(path: str | Path, what: str = "metadata") -> dict[str, Any]:
    """A JSON record, naming the file and what it is in the error."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {path} does not exist")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{what} file {path} is not valid JSON ({err}); rerun the rule that writes it") from err


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in chunks (checkpoints run to gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()
