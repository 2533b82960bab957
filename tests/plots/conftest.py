"""Shared by the figure tests: noisy layer-stability tables, a check that a PNG was written, and a check,
on every figure any of them saves, that no text leaves the canvas."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from headstab.plots import text_outside_canvas

SEEDS = (1, 2, 3, 4)
N_LAYERS, N_HEADS = 4, 8


@pytest.fixture
def layer_stability():
    """Factory: LAYER_COLUMNS of every anchor in SEEDS, stability falling with depth, plus noise.

    chance=True adds the interval columns of headstab.statistics.interval_tables: an interval around the mean,
    a null rising with `offset` far below it, and a step-0 baseline between the two.
    """

    def make(n_layers=N_LAYERS, promptset="primary", offset=0.0, seed=0, chance=False):
        rng = np.random.default_rng(seed)
        rows = []
        for anchor in SEEDS:
            for layer in range(n_layers):
                mean = 0.9 - 0.12 * layer + offset + rng.normal(0, 0.03)
                rows.append((promptset, "same_layer", anchor, layer, mean, 0.08))
        table = pd.DataFrame(rows, columns=["promptset", "scope", "anchor_seed", "layer", "mean", "std"])
        if chance:
            null = 0.2 + 0.01 * table["layer"] + offset
            table = table.assign(
                ci_low=table["mean"] - 0.04,
                ci_high=table["mean"] + 0.05,
                null=null,
                null_ci_low=null - 0.02,
                null_ci_high=null + 0.03,
                init=null + 0.1,
            )
        return table

    return make


@pytest.fixture
def assert_written():
    """Checks that `path` is a PNG of some substance."""

    def check(path):
        assert path.exists() and path.stat().st_size > 10_000
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"

    return check


@pytest.fixture(autouse=True)
def text_inside_the_canvas(monkeypatch):
    """Every figure a test saves keeps its titles, labels, tick labels and legends inside the canvas."""
    clipped: list[str] = []
    savefig = Figure.savefig

    def check_and_save(figure, path, *args, **kwargs):
        clipped.extend(f"{path}: {text}" for text in text_outside_canvas(figure))
        return savefig(figure, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", check_and_save)
    yield
    assert not clipped, f"text outside the canvas: {clipped}"
