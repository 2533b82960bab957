"""Head-type thresholds: the quantile of per-layer maxima over held-out initialisations by hand, the floor, fixed
thresholds, typing by layer (induction needs prefix matching and copying), and the behaviour the rule exists for:
near-uniform heads stay untyped, a planted head is found, and weak universality at step 0 does not grow with
the number of heads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol

from headstab.head_type_thresholds import (
    FIXED,
    HEAD_TYPE_COLUMNS,
    HELD_OUT,
    THRESHOLD_COLUMNS,
    calibrated_thresholds,
    fixed_thresholds,
    type_heads,
)
from headstab.head_types import CRITERIA, SCORE_COLUMNS, has_type
from headstab.sections.trained_in import weak_universality

ATOL = reduction_atol(np.float64, 64)
FLOORS = {"previous_token": 0.1, "duplicate_token": 0.1, "induction": 0.1, "bos": 0.2, "copying": 0.0}
FIXED_VALUES = {"previous_token": 0.4, "duplicate_token": 0.4, "induction": 0.4, "bos": 0.5, "copying": 0.5}
EVEN = {"previous_token": 0.038, "duplicate_token": 0.015, "induction": 0.015, "bos": 0.042, "entropy": 1.0}


def scores_table(values: np.ndarray, first_refit: int = 1, **columns: np.ndarray) -> pd.DataFrame:
    """score_table rows of refits first_refit.. whose every criterion is `values` [refit, layer, head], with
    `columns` overriding some."""
    refit, layer, head = (axis.ravel() for axis in np.indices(values.shape))
    table = pd.DataFrame({"refit": refit + first_refit, "layer": layer, "head": head})
    table = table.assign(**{name: values.ravel() for name in SCORE_COLUMNS})
    return table.assign(**{name: column.ravel() for name, column in columns.items()})


def test_calibrated_thresholds_are_the_quantile_of_layer_maxima_raised_to_the_floor():
    # 5 draws x 2 layers x 3 heads; the layer maxima are 0.01..0.05 (layer 0) and 0.2..0.6 (layer 1)
    values = np.zeros((5, 2, 3))
    values[:, 0, 1] = [0.03, 0.01, 0.05, 0.02, 0.04]
    values[:, 1, 2] = [0.6, 0.2, 0.4, 0.3, 0.5]
    values[:, 1, 0] = 0.1  # never a layer's maximum
    table = calibrated_thresholds(scores_table(values, 100), 0.5, FLOORS, EVEN)
    assert list(table.columns) == THRESHOLD_COLUMNS and len(table) == 2 * len(CRITERIA)
    rows = table.set_index(["layer", "score"])
    np.testing.assert_allclose(rows.loc[(0, "bos"), ["calibrated", "floor", "threshold"]], [0.03, 0.2, 0.2], atol=ATOL)
    np.testing.assert_allclose(rows.loc[(1, "bos"), ["calibrated", "threshold"]], [0.4, 0.4], atol=ATOL)
    np.testing.assert_allclose(rows.loc[(1, "previous_token"), ["calibrated", "threshold"]], [0.4, 0.4], atol=ATOL)
    assert rows.loc[(0, "copying"), "threshold"] == pytest.approx(0.03, abs=ATOL)  # floor 0 below it
    assert (table["threshold_rule"] == HELD_OUT).all() and (table["n_refits"] == 5).all()
    assert (table["quantile"] == 0.5).all()
    assert rows.loc[(0, "duplicate_token"), "even_attention"] == 0.015 and np.isnan(
        rows.loc[(0, "copying"), "even_attention"]
    )
    # 0.9: np.quantile's linear interpolation between the two largest maxima, 0.05 and 0.04
    high = calibrated_thresholds(scores_table(values), 0.9, None, {}).set_index(["layer", "score"])
    assert high.loc[(0, "induction"), "threshold"] == pytest.approx(0.046, abs=ATOL)
    assert high["floor"].isna().all() and (high["threshold"] == high["calibrated"]).all()


def test_calibration_errors_name_the_config_key():
    table = scores_table(np.zeros((3, 1, 2)))
    with pytest.raises(ValueError, match="head_types.quantile"):
        calibrated_thresholds(table, 1.0, FLOORS, EVEN)
    with pytest.raises(ValueError, match="head_types.quantile"):
        calibrated_thresholds(table, 0.0, FLOORS, EVEN)
    with pytest.raises(ValueError, match="no held-out step-0 scores"):
        calibrated_thresholds(table.iloc[:0], 0.99, FLOORS, EVEN)
    with pytest.raises(ValueError, match=r"head_types.floors' lacks \['copying'\]"):
        calibrated_thresholds(table, 0.99, {k: v for k, v in FLOORS.items() if k != "copying"}, EVEN)


def test_fixed_thresholds_repeat_at_every_layer():
    table = fixed_thresholds(FIXED_VALUES, 3, EVEN)
    assert list(table.columns) == THRESHOLD_COLUMNS and len(table) == 3 * len(CRITERIA)
    assert (table["threshold_rule"] == FIXED).all() and sorted(table["layer"].unique()) == [0, 1, 2]
    assert table.set_index(["layer", "score"]).loc[(2, "bos"), "threshold"] == 0.5
    assert table["calibrated"].isna().all() and (table["n_refits"] == 0).all()
    with pytest.raises(ValueError, match=r"fixed_thresholds' lacks \['copying'\]"):
        fixed_thresholds({k: v for k, v in FIXED_VALUES.items() if k != "copying"}, 3, EVEN)


def test_types_use_their_layers_thresholds_and_induction_needs_copying():
    """One score vector in two layers: typed in layer 0 (thresholds 0.4), not in layer 1 (thresholds 0.7)."""
    thresholds = fixed_thresholds(FIXED_VALUES, 2, EVEN)
    thresholds.loc[thresholds["layer"] == 1, "threshold"] = 0.7
    heads = {  # head: (previous_token, duplicate_token, induction, bos, copying)
        0: (0.6, 0.0, 0.0, 0.0, 0.0),
        1: (0.0, 0.0, 0.6, 0.6, 0.9),  # induction + bos in layer 0
        2: (0.0, 0.0, 0.6, 0.0, 0.2),  # prefix matching without copying: not an induction head
        3: (0.0, 0.0, 0.6, 0.0, np.nan),  # no OV circuit: no copying
        4: (0.0, 0.6, 0.0, 0.0, 0.0),
        5: (0.0, 0.0, 0.0, 0.0, 0.0),
    }
    values = np.array([heads[h] for h in range(6)])  # [head, criterion]
    table = scores_table(np.zeros((1, 2, 6)))
    for k, name in enumerate(CRITERIA):
        table[name] = np.tile(values[:, k], 2)
    types = type_heads(table, thresholds)
    assert list(types.columns) == HEAD_TYPE_COLUMNS and (types["threshold_rule"] == FIXED).all()
    expected = ["previous_token", "induction+bos", "none", "none", "duplicate_token", "none"]
    assert types["type"].tolist() == expected + ["none"] * 6
    assert has_type(types["type"], "induction").sum() == 1


def test_typing_refuses_thresholds_that_do_not_cover_the_scores():
    table = scores_table(np.zeros((1, 3, 2)))
    with pytest.raises(ValueError, match=r"no head-type thresholds for layers \[2\]"):
        type_heads(table, fixed_thresholds(FIXED_VALUES, 2, EVEN))
    mixed = pd.concat([fixed_thresholds(FIXED_VALUES, 3, EVEN), calibrated_thresholds(table, 0.5, FLOORS, EVEN)])
    with pytest.raises(ValueError, match="under one rule"):
        type_heads(table, mixed)
    partial = fixed_thresholds(FIXED_VALUES, 3, EVEN)
    with pytest.raises(ValueError, match="every score"):
        type_heads(table, partial[partial["score"] != "copying"])
    with pytest.raises(ValueError, match="once at every layer"):
        type_heads(table, pd.concat([partial, partial]))
    missing = partial.assign(threshold=partial["threshold"].where(partial["layer"] != 1))
    with pytest.raises(ValueError, match="every score"):
        type_heads(table, missing)


def near_uniform(rng: np.random.Generator, n_refits: int, n_heads: int, first_refit: int = 1) -> pd.DataFrame:
    """Untrained heads of one layer: each attention score at its even-attention value times 1 + N(0, 0.1)."""
    scores = {name: EVEN[name] * (1 + 0.1 * rng.normal(size=(n_refits, 1, n_heads))) for name in EVEN}
    scores["copying"] = rng.uniform(-0.5, 0.5, size=(n_refits, 1, n_heads))
    return scores_table(np.zeros((n_refits, 1, n_heads)), first_refit, **scores)


def test_near_uniform_heads_are_not_typed_and_a_planted_head_is():
    """Trained heads a little sharper than the untrained draws (0.019-0.022 against even 0.015, as a short
    training leaves them) pass the held-out quantile but not the floor; a planted previous-token head passes."""
    rng = np.random.default_rng(0)
    held_out = near_uniform(rng, 20, 8, first_refit=1000)
    trained = near_uniform(rng, 4, 8)
    trained["duplicate_token"] = rng.uniform(0.019, 0.022, size=len(trained))
    trained.loc[trained["head"] == 3, "previous_token"] = 0.55
    with_floor = type_heads(trained, calibrated_thresholds(held_out, 0.99, FLOORS, EVEN))
    assert set(with_floor.loc[with_floor["head"] == 3, "type"]) == {"previous_token"}
    assert (with_floor.loc[with_floor["head"] != 3, "type"] == "none").all()
    without_floor = type_heads(trained, calibrated_thresholds(held_out, 0.99, None, EVEN))
    assert has_type(without_floor["type"], "duplicate_token").mean() > 0.5  # what the floor prevents


def step0_rate(n_heads: int, rule: str, rng: np.random.Generator, datasets: int = 30, draws: int = 20) -> float:
    """The share of fresh step-0 refits with some head typed previous-token, over simulated datasets."""
    rates = []
    for _ in range(datasets):
        held_out = near_uniform(rng, draws, n_heads, first_refit=1000)
        fresh = near_uniform(rng, 100, n_heads)
        if rule == "per_head":  # the rule this module replaces: a quantile over every single head
            thresholds = calibrated_thresholds(held_out, 0.99, None, EVEN)
            thresholds["threshold"] = np.quantile(held_out["previous_token"], 0.99)
        else:
            thresholds = calibrated_thresholds(held_out, 0.99, None, EVEN)
        rates.append(weak_universality(type_heads(fresh, thresholds), "previous_token", 0, 0.95)[0])
    return float(np.mean(rates))


def test_weak_universality_at_step_0_does_not_grow_with_the_number_of_heads():
    """With R held-out draws the threshold is about the largest layer maximum, so a fresh refit exceeds it with
    probability about 1/(R + 1) = 0.048, whatever H; a per-head quantile gives about 1 - 0.99^H."""
    rng = np.random.default_rng(1)
    rate_8, rate_16 = step0_rate(8, "layer_max", rng), step0_rate(16, "layer_max", rng)
    se = np.sqrt(0.05 * 0.95 / (30 * 100))  # binomial s.e.; draws shared within a dataset widen it
    assert abs(rate_8 - rate_16) < 6 * se
    assert rate_8 < 0.08 and rate_16 < 0.08
    per_head_8, per_head_16 = step0_rate(8, "per_head", rng), step0_rate(16, "per_head", rng)
    assert per_head_16 > per_head_8 + 0.03  # the test tells the two rules apart
