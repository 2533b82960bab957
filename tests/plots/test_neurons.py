"""The neuron figures: the universal share per layer beside its null share, and heads beside neurons by
relative depth, written with their text inside the canvas (the autouse check of conftest.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headstab.neurons.head_layers import LAYER_COLUMNS
from headstab.neurons.shares import SHARE_COLUMNS
from headstab.plots import neurons


def _shares(n_layers: int) -> pd.DataFrame:
    share = np.linspace(0.08, 0.02, n_layers)
    table = {name: 0.0 for name in SHARE_COLUMNS}
    table |= {"layer": np.arange(n_layers), "universal_share": share, "ci_low": share - 0.01, "ci_high": share + 0.01}
    table |= {
        "null_share": 0.005,
        "null_ci_low": 0.0,
        "null_ci_high": 0.01,
        "n_refits": 4,
        "calibration": "descriptive",
    }
    return pd.DataFrame(table, columns=SHARE_COLUMNS)


def test_the_share_figure_draws_the_observed_share_and_the_null_per_layer(tmp_path, assert_written, monkeypatch):
    drawn, save = [], neurons.save_figure
    monkeypatch.setattr(neurons, "save_figure", lambda figure, path: (drawn.append(figure), save(figure, path)))
    neurons.plot_universal_share(_shares(6), tmp_path / "share.png", "l6_h8", 0.5)
    assert_written(tmp_path / "share.png")
    (ax,) = drawn[0].axes
    observed, null = (container.lines[0].get_ydata() for container in ax.containers)
    np.testing.assert_allclose(observed, np.linspace(0.08, 0.02, 6))
    np.testing.assert_allclose(null, 0.005)


def test_the_depth_figure_draws_one_line_per_architecture_in_both_panels(tmp_path, assert_written):
    rows = []
    for arch, n_layers in (("l2_h8", 2), ("gpt2", 12)):
        for layer in range(n_layers):
            row = dict.fromkeys(LAYER_COLUMNS, 0.01)
            row |= {
                "architecture": arch,
                "layer": layer,
                "n_layers": n_layers,
                "relative_depth": (layer + 1) / n_layers,
            }
            rows.append(row)
    neurons.plot_head_neuron_depth(pd.DataFrame(rows, columns=LAYER_COLUMNS), tmp_path / "depth.png")
    assert_written(tmp_path / "depth.png")
