"""The calibration harness (calibration/, make calibration) and the registry of reported methods
(headstab.statistics.calibration): every method has a case, the labels follow min_n, and the fast form of every
case passes wherever the workflow calls its method calibrated."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from calibration.cases import CASES  # noqa: E402
from calibration.harness import Case, evaluate, min_n_passing  # noqa: E402
from headstab.statistics.calibration import (  # noqa: E402
    CALIBRATED,
    DESCRIPTIVE,
    METHODS,
    Method,
    calibration_label,
)


def test_every_reported_method_has_a_case_and_every_case_a_method():
    assert {case.method for case in CASES} == set(METHODS)


def test_labels_follow_min_n_and_unknown_methods_are_named():
    name = next(iter(METHODS))
    min_n = METHODS[name].min_n
    if min_n is not None:
        assert calibration_label(name, min_n) == CALIBRATED
        assert calibration_label(name, min_n - 1) == DESCRIPTIVE
    with pytest.raises(KeyError, match="no calibrated method 'nope'"):
        calibration_label("nope", 50)
    with pytest.raises(ValueError, match="min_n 7 is not a calibrated n"):
        Method("x", "p_value", "refits", 7, "")


def test_an_anticonservative_test_fails_and_a_uniform_p_passes():
    name = next(iter(METHODS))
    uniform = Case(name, "uniform", "size", lambda rng, n: float(rng.random()))
    liberal = Case(name, "liberal", "size", lambda rng, n: float(rng.random()) * 0.5)
    assert evaluate(uniform, 12, 400, seed=1).passed
    outcome = evaluate(liberal, 12, 400, seed=1)
    assert not outcome.passed and outcome.rate == pytest.approx(0.1, abs=0.04)


def test_min_n_passing_needs_every_larger_n_to_pass():
    name = next(iter(METHODS))
    good = Case(name, "good", "size", lambda rng, n: float(rng.random()))
    bad_small = Case(name, "bad", "size", lambda rng, n: float(rng.random()) * (0.3 if n < 12 else 1.0))
    outcomes = [evaluate(c, n, 300, seed=2) for c in (good, bad_small) for n in (4, 5, 12, 50)]
    assert min_n_passing(outcomes, (4, 5, 12, 50)) == 12
    assert min_n_passing([o for o in outcomes if o.scenario == "good"], (4, 5, 12, 50)) == 4


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.method}-{c.scenario}")
def test_the_fast_form_of_every_case_passes_where_the_workflow_calls_it_calibrated(case):
    outcome = evaluate(case, case.quick_n, case.quick_reps, seed=20261128)
    assert outcome.consistent, outcome
    assert np.isfinite(outcome.rate)
