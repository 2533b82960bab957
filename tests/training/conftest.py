"""Shared by the training tests: one torch thread, cyclic token shards, log and weight readers, a simulated kill."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch

from headstab.training import TrainingOptions
from headstab.training.model import StackedTransformer

# A fixed cycle of 17 distinct tokens: learnable, and one token longer than the tests' 16-token windows, so
# consecutive windows start 1 token further along it and differ (a 16-token cycle made every window the same).
PERIOD = np.array([5, 17, 3, 29, 11, 2, 23, 8, 14, 30, 1, 19, 26, 7, 12, 21, 9])


@pytest.fixture(autouse=True)
def _single_thread(one_thread):
    """Every training test runs on one torch thread (tests/conftest.py's one_thread)."""


def write_shards(directory: Path, arrays, dtype=np.uint16) -> list[Path]:
    paths = []
    for i, array in enumerate(arrays):
        path = directory / f"shard_{i:03d}.npy"
        np.save(path, np.asarray(array, dtype=dtype))
        paths.append(path)
    return paths


@pytest.fixture
def cyclic_shards(tmp_path):
    """Two shards of a repeating 17-token cycle: 40 + 24 windows of 16 tokens, 17 distinct ones."""
    return write_shards(tmp_path, [np.resize(PERIOD, 40 * 16), np.resize(PERIOD, 24 * 16)])


def read_log(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def final_state(out_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(out_dir / "final.pt", weights_only=True)


def states_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class SimulatedKill(Exception):
    pass


def kill_after(step_to_kill: int):
    def callback(step: int) -> None:
        if step == step_to_kill:
            raise SimulatedKill(step)

    return callback


def quiet(**options) -> TrainingOptions:
    """Training options of the tests: no progress bar, the device the CPU (`options` override)."""
    return TrainingOptions(**{"progress": False, "device": "cpu", **options})


def patch_loss(monkeypatch, steps, change):
    """Make training's loss `change(model, loss)` ([seed] losses of the stack) at the given 1-based steps of the
    job, the real loss elsewhere."""
    real_loss = StackedTransformer.loss
    calls = []

    def patched(model, tokens):
        calls.append(1)
        loss = real_loss(model, tokens)
        return change(model, loss) if len(calls) in steps else loss

    monkeypatch.setattr(StackedTransformer, "loss", patched)
