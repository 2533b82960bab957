"""Files written whole or not at all (headstab.fileio), and their checksums."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from headstab.fileio import (
    atomic_path,
    read_json,
    save_npy_atomic,
    save_torch_atomic,
    sha256_file,
    temporary_path,
    write_json_atomic,
    write_text_atomic,
)


def test_sha256_of_a_known_file(tmp_path):
    path = tmp_path / "abc.txt"
    path.write_bytes(b"abc")
    # sha256("abc") from FIPS 180-2, appendix B.1
    assert sha256_file(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert sha256_file(path, chunk_bytes=1) == sha256_file(path)


def test_write_json_atomic_round_trip_leaves_no_temporary_and_normal_permissions(tmp_path):
    path = tmp_path / "sub" / "meta.json"
    write_json_atomic(path, {"b": 1, "a": [1, 2]})
    assert read_json(path) == {"a": [1, 2], "b": 1}
    assert [p.name for p in path.parent.iterdir()] == ["meta.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_read_json_names_the_file_when_broken(tmp_path):
    path = tmp_path / "meta.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=str(path)):
        read_json(path)
    with pytest.raises(FileNotFoundError, match="nope.json"):
        read_json(tmp_path / "nope.json")


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "record.txt"
    write_text_atomic(path, "old")
    with pytest.raises(RuntimeError, match="killed"):
        with atomic_path(path) as tmp:
            tmp.write_text("half of the new")
            raise RuntimeError("killed")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.txt"]


def test_a_temporary_left_by_a_killed_job_is_replaced(tmp_path):
    path = tmp_path / "record.txt"
    temporary_path(path).write_text("left by a killed job")
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and not temporary_path(path).exists()


def test_numpy_and_torch_round_trips(tmp_path):
    tokens = np.arange(10, dtype=np.uint16)
    save_npy_atomic(tokens, tmp_path / "shard.npy")
    loaded = np.load(tmp_path / "shard.npy", allow_pickle=False)
    assert loaded.dtype == np.uint16 and np.array_equal(loaded, tokens)
    state = {"w": torch.arange(6.0).reshape(2, 3)}
    save_torch_atomic(state, tmp_path / "final.pt")
    assert torch.equal(torch.load(tmp_path / "final.pt", weights_only=True)["w"], state["w"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final.pt", "shard.npy"]


@pytest.mark.parametrize("write", ["torch", "numpy", "hdf5"])
def test_a_full_disk_names_the_file_being_written_and_the_fix(tmp_path, monkeypatch, write):
    import errno

    import h5py

    path = tmp_path / "seed1" / "final.pt"
    # A write to an open handle fails with an OSError that names no file; HDF5 says it in words, without an errno.
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if write == "hdf5":
        full = OSError("Can't write data (file write failed: errno = 28, error message = 'No space left on device')")

    def fail(*args, **kwargs):
        raise full

    owner, name = {"torch": (torch, "save"), "numpy": (np, "save"), "hdf5": (h5py.File, "create_dataset")}[write]
    monkeypatch.setattr(owner, name, fail)
    with pytest.raises(OSError) as caught:
        if write == "torch":
            save_torch_atomic({"w": torch.zeros(2)}, path)
        elif write == "numpy":
            save_npy_atomic(np.zeros(2), path)
        else:
            with atomic_path(path) as tmp, h5py.File(tmp, "w") as handle:
                handle.create_dataset("x", data=np.zeros(2))
    message = str(caught.value)
    assert caught.value.errno == errno.ENOSPC
    assert f"while writing {path}" in message and f"df -h {path.parent}" in message and "rerun" in message
    assert list(path.parent.iterdir()) == []  # no temporary left


# Each writer under a 64 KiB file size limit (`ulimit -f 64`), in a process of its own: what each raises.
LIMITED_WRITES = """
import json, resource, sys
from pathlib import Path
import numpy as np, torch
from headstab.fileio import save_npy_atomic, save_torch_atomic, write_json_atomic
out = Path(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))
writes = {
    "torch": lambda: save_torch_atomic({"w": torch.zeros(100_000)}, out / "final.pt"),
    "numpy": lambda: save_npy_atomic(np.zeros(100_000), out / "shard_000.npy"),
    "json": lambda: write_json_atomic(out / "meta.json", {"rows": list(range(100_000))}),
}
caught = {}
for name, write in writes.items():
    try:
        write()
    except Exception as error:
        caught[name] = [type(error).__name__, getattr(error, "errno", None), getattr(error, "strerror", None) or str(error)]
print(json.dumps(caught))
"""


def test_a_file_size_limit_names_the_file_being_written_and_the_fix(tmp_path):
    """torch.save reported the refused write as its own RuntimeError ('unexpected pos 704 vs 598'), naming nothing."""
    import errno
    import json
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", LIMITED_WRITES, str(tmp_path)], capture_output=True, text=True, timeout=120, check=True
    )
    caught = json.loads(result.stdout)
    for name, file in (("torch", "final.pt"), ("numpy", "shard_000.npy"), ("json", "meta.json")):
        kind, number, message = caught[name]
        assert (kind, number) == ("OSError", errno.EFBIG), caught[name]
        assert message.startswith(f"File too large while writing {tmp_path / file} (")
        assert "65,536 bytes (`ulimit -f`)" in message and "ulimit -f unlimited" in message and "rerun" in message
    assert list(tmp_path.iterdir()) == []  # no temporary left
