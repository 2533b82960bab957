"""headstab.sections.training_dynamics and its figure: layer stability against training step."""

from __future__ import annotations

import dataclasses

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from headstab.plots import training_dynamics as training_dynamics_plots
from headstab.plots.training_dynamics import plot_stability_along_training
from headstab.sections.training_dynamics import TRAINING_DYNAMICS_COLUMNS, stability_along_training
from headstab.similarity.prompt_groups import GroupedSimilarity

N_GROUPS, N_SEEDS, N_LAYERS, N_HEADS = 5, 3, 2, 4


def grouped(level_by_layer, null=0.1, noise=0.0, seed=0, n_seeds=N_SEEDS):
    """Every head pair of layer l at level_by_layer[l] (+ noise), a refit with itself at 1.0, the null at `null`."""
    rng = np.random.default_rng(seed)
    shape = (N_GROUPS, n_seeds, n_seeds, N_LAYERS, N_HEADS, N_HEADS)
    observed = np.broadcast_to(np.asarray(level_by_layer, dtype=np.float32)[:, None, None], shape).copy()
    observed += rng.normal(0, noise, shape).astype(np.float32)
    observed[:, np.arange(n_seeds), np.arange(n_seeds)] = 1.0  # self-pairs: never counted
    return GroupedSimilarity(observed=observed, null=np.full(shape, null, dtype=np.float32),
                             group_sizes=np.full(N_GROUPS, 4), seeds=list(range(1, n_seeds + 1)),
                             partners=np.roll(np.arange(20), 1), lengths=np.full(20, 6))  # fmt: skip


def test_constant_similarity_gives_that_stability_with_a_zero_width_interval():
    table = stability_along_training({72: grouped([0.6, 0.4]), 0: grouped([0.3, 0.2])}, "primary", 50, 0, 0.95)
    assert list(table.columns) == TRAINING_DYNAMICS_COLUMNS
    assert table["step"].tolist() == [0, 0, 72, 72] and table["layer"].tolist() == [0, 1, 0, 1]
    np.testing.assert_allclose(table["stability"], [0.3, 0.2, 0.6, 0.4], atol=1e-6)
    np.testing.assert_allclose(table["ci_low"], table["stability"], atol=1e-6)
    np.testing.assert_allclose(table["ci_high"], table["stability"], atol=1e-6)
    np.testing.assert_allclose(table[["null", "null_ci_low", "null_ci_high"]], 0.1, atol=1e-6)
    assert (table["n_boot"] == 50).all() and (table["promptset"] == "primary").all()


def test_noisy_similarity_gives_an_interval_around_the_estimate_and_the_same_draws_every_step():
    noisy = grouped([0.5, 0.5], noise=0.05, seed=1)
    table = stability_along_training({0: noisy, 10: noisy}, "primary", 200, 3, 0.9)
    assert (table["ci_low"] < table["stability"]).all() and (table["stability"] < table["ci_high"]).all()
    first, second = table[table.step == 0].reset_index(drop=True), table[table.step == 10].reset_index(drop=True)
    np.testing.assert_array_equal(first.drop(columns="step"), second.drop(columns="step"))


def test_steps_with_other_refits_are_refused_naming_both_steps():
    with pytest.raises(ValueError, match=r"step 5 .*seeds \[1, 2\].*does not match step 0"):
        stability_along_training({0: grouped([0.5, 0.5]), 5: grouped([0.5, 0.5], n_seeds=2)}, "primary", 20, 0, 0.95)


def test_the_figure_has_one_line_per_layer_and_the_null(tmp_path, monkeypatch):
    saved = []
    real_save = training_dynamics_plots.save_figure
    monkeypatch.setattr(
        training_dynamics_plots, "save_figure", lambda fig, path: (saved.append(fig), real_save(fig, path))
    )
    table = stability_along_training(
        {0: grouped([0.2, 0.2]), 36: grouped([0.5, 0.3], noise=0.02), 144: grouped([0.8, 0.5], noise=0.02)},
        "primary", 30, 0, 0.95,
    )  # fmt: skip
    path = tmp_path / "stability_along_training.png"
    data = plot_stability_along_training(table, path, "l4_h8")
    assert matplotlib.image.imread(path).shape[2] in (3, 4)
    assert list(data.columns) == [0, 1] and data.index.tolist() == [0, 36, 144]
    lines = saved[0].axes[0].get_lines()
    stability_lines = [line for line in lines if line.get_linestyle() == "-"]
    assert [line.get_label() for line in stability_lines] == ["layer 1", "layer 2"]  # one line per layer
    assert len([line for line in lines if line.get_linestyle() == "--"]) == 2  # and its null
    np.testing.assert_allclose(stability_lines[0].get_ydata(), table[table.layer == 0]["stability"])
    assert len(saved[0].axes[0].collections) == 4  # per layer: the null's band and the interval's


def test_steps_of_other_shapes_or_seed_names_are_refused_and_none_at_all_too():
    step0 = grouped([0.5, 0.5])
    renamed = dataclasses.replace(step0, seeds=[4, 5, 6])  # the same shape, other refits
    wider = grouped([0.5, 0.5], n_seeds=N_SEEDS + 1)
    wider = dataclasses.replace(wider, seeds=step0.seeds)  # the same refit names, another shape
    for other in (renamed, wider):
        with pytest.raises(ValueError, match="step 3 .*does not match step 0's"):
            stability_along_training({0: step0, 3: other}, "primary", 20, 0, 0.95)
    with pytest.raises(ValueError, match="^stability along training needs at least one step$"):
        stability_along_training({}, "primary", 20, 0, 0.95)


def test_intervals_are_reproducible_and_narrow_with_the_confidence():
    steps = {0: grouped([0.5, 0.4], noise=0.05, seed=2), 5: grouped([0.6, 0.5], noise=0.05, seed=3)}
    wide = stability_along_training(steps, "primary", 200, 4, 0.95)
    pd.testing.assert_frame_equal(stability_along_training(steps, "primary", 200, 4, 0.95), wide)
    assert wide.index.tolist() == [0, 1, 2, 3]
    narrow = stability_along_training(steps, "primary", 200, 4, 0.5)
    assert (wide["ci_low"] < narrow["ci_low"]).all() and (narrow["ci_high"] < wide["ci_high"]).all()


def test_every_row_carries_the_label_of_its_percentile_intervals_at_the_refits_number(monkeypatch):
    from headstab.statistics import calibration

    methods = dict(calibration.METHODS)
    methods["multibootstrap_along_training"] = calibration.Method(
        "multibootstrap_along_training", "interval", "refits", 4, ""
    )
    monkeypatch.setattr(calibration, "METHODS", methods)
    steps = {0: grouped([0.3, 0.2], n_seeds=3), 9: grouped([0.6, 0.4], n_seeds=3)}
    assert set(stability_along_training(steps, "primary", 20, 0, 0.95)["ci_calibration"]) == {"descriptive"}
    steps = {0: grouped([0.3, 0.2], n_seeds=4), 9: grouped([0.6, 0.4], n_seeds=4)}
    assert set(stability_along_training(steps, "primary", 20, 0, 0.95)["ci_calibration"]) == {"calibrated"}
