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


def test_the_calibration_section_of_the_docs_lists_every_method_with_its_min_n():
    text = (Path(__file__).resolve().parents[2] / "docs/statistics.md").read_text(encoding="utf-8")
    section = text.split("\n## Calibration\n", 1)[1].split("\n## ", 1)[0]
    for name, method in METHODS.items():
        shown = method.min_n if method.min_n is not None else "descriptive at every n"
        assert f"| `{name}` | {method.reports} | {method.unit} | {shown} |" in section, name


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


def test_simulated_similarity_is_symmetric_and_a_large_study_estimates_the_true_stability():
    from dataclasses import replace

    from calibration.simulate import SCENARIOS, draw_refits, simulate_grouped, true_one_to_one, true_stability

    rng = np.random.default_rng(3)
    model = SCENARIOS["exchangeable_candidates"].observed
    grouped = simulate_grouped(rng, model, draw_refits(rng, model, 5))
    assert grouped.shape == (20, 5, 5, 2, 4, 4) and grouped.dtype == np.float32
    np.testing.assert_array_equal(grouped, grouped.transpose(0, 2, 1, 3, 5, 4))  # s[a, b, i, j] = s[b, a, j, i]
    # exchangeable: the floor plus E max of 4 partner head levels (s.d. 0.01); clear: the floor plus the diagonal
    np.testing.assert_allclose(true_stability(model)["layer"], np.array(model.floors) + 0.01 * 1.0293753730039637)
    clear = SCENARIOS["clear_best_match"].observed
    np.testing.assert_allclose(true_stability(clear)["layer"], np.array(clear.floors) + 0.1, atol=1e-6)
    np.testing.assert_allclose(true_one_to_one(clear), np.array(clear.floors) + 0.1)
    many = replace(model, n_groups=200)  # 1,000 prompts: the max of the prompt means close to the max of the truths
    n = 30
    refits = draw_refits(rng, many, n)
    mean = simulate_grouped(rng, many, refits).astype(np.float64).mean(axis=0).max(axis=-1)  # [a, b, layer, head]
    pooled = mean[~np.eye(n, dtype=bool)].mean(axis=(0, 2))
    truth = true_stability(many, refits)
    # refit effects (s.d. 0.01 each side, offsets up to 0.015) spread a 30-refit mean by about 0.006
    np.testing.assert_allclose(pooled, truth["layer"], atol=0.02)
    anchor = mean[0, 1:].mean(axis=(0, 2))  # anchor 0 against 29 partners
    np.testing.assert_allclose(anchor, truth["anchor_layer"][0], atol=0.02)


def test_shared_draws_compute_each_dataset_once_and_leave_the_generator_as_a_draw_would():
    from calibration.simulate import shared_draws

    calls = []

    def study(rng, n):
        calls.append(n)
        return float(rng.random()) + n

    shared = shared_draws(study)
    first = [shared(rng, 4) for rng in [np.random.default_rng(0)] for _ in range(3)]
    again = [shared(rng, 4) for rng in [np.random.default_rng(0)] for _ in range(3)]
    plain = [study(rng, 4) for rng in [np.random.default_rng(0)] for _ in range(3)]
    assert first == again == plain and calls == [4, 4, 4, 4, 4, 4]  # 3 computed, 3 repeats, 3 plain
    assert shared(np.random.default_rng(0), 5) == study(np.random.default_rng(0), 5)  # another n: its own draw


def test_coarser_studies_keep_the_prompts_and_the_noise_per_prompt():
    from calibration.simulate import LARGE_N, SCENARIOS, at_refits, coarser

    model = SCENARIOS["clear_best_match"].observed
    small = coarser(model)
    assert (small.n_heads, small.n_groups, small.group_size) == (3, 10, 10)
    assert small.n_groups * small.group_size == model.n_groups * model.group_size
    np.testing.assert_allclose(np.array(small.cell_sd) * np.sqrt(10), np.array(model.cell_sd) * np.sqrt(5))
    scenario = SCENARIOS["clear_best_match"]
    assert at_refits(scenario, LARGE_N - 1) is scenario
    assert at_refits(scenario, LARGE_N).init.n_heads == 3 and at_refits(scenario, LARGE_N).null.n_groups == 10


def test_a_method_is_calibrated_from_its_min_n_on_and_never_without_one(monkeypatch):
    from headstab.statistics import calibration

    planted = {
        "from_5": Method("from_5", "interval", "refits", 5, ""),
        "never": Method("never", "p_value", "refits", None, ""),
    }
    monkeypatch.setattr(calibration, "METHODS", planted)
    assert [calibration.is_calibrated("from_5", n) for n in (4, 5, 12)] == [False, True, True]
    assert [calibration_label("from_5", n) for n in (4, 5, 50)] == [DESCRIPTIVE, CALIBRATED, CALIBRATED]
    assert [calibration_label("never", n) for n in (4, 50, 10**6)] == [DESCRIPTIVE] * 3
    with pytest.raises(KeyError, match=r"^\"no calibrated method 'x'; known: \['from_5', 'never'\]\"$"):
        calibration.is_calibrated("x", 5)


def test_a_method_reports_a_p_value_or_an_interval_at_a_calibrated_n_or_none():
    assert Method("x", "interval", "refits", 12, "").min_n == 12
    assert Method("x", "p_value", "refits", None, "").min_n is None
    with pytest.raises(ValueError, match=r"^method 'x': reports must be 'p_value' or 'interval', got 'p-value'$"):
        Method("x", "p-value", "refits", 4, "")
    with pytest.raises(ValueError, match=r"^method 'x': min_n 3 is not a calibrated n of \(4, 5, 12, 50\)$"):
        Method("x", "interval", "refits", 3, "")


def test_the_detectable_effect_is_the_one_measured_at_the_largest_n_not_above(monkeypatch):
    from headstab.statistics import calibration

    planted = {"a claim": ("some_method", "stability", {4: 0.3, 12: 0.2, 50: 0.1})}
    monkeypatch.setattr(calibration, "DETECTABLE_EFFECTS", planted)
    assert [calibration.detectable_effect("a claim", n) for n in (4, 5, 11, 12, 49, 50, 500)] == [
        0.3, 0.3, 0.3, 0.2, 0.2, 0.1, 0.1,
    ]  # fmt: skip
    assert np.isnan(calibration.detectable_effect("a claim", 3))  # below the smallest measured n
    with pytest.raises(KeyError, match=r"^\"no power measured for claim 'other'; known: \['a claim'\]\"$"):
        calibration.detectable_effect("other", 4)
