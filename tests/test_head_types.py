"""Head types: the probe set, each score on hand-built patterns, the thresholds and the typing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers.bridges import tiny_bridge
from helpers.tolerances import reduction_atol

from headstab.head_types import (
    HEAD_TYPE_COLUMNS,
    HEAD_TYPES,
    THRESHOLD_COLUMNS,
    calibrated_thresholds,
    fixed_thresholds,
    has_type,
    pattern_scores,
    probe_scores,
    probe_set,
    score_table,
    type_heads,
)

ATOL = reduction_atol(np.float64, 128)  # means over at most ~100 queries of float64 probabilities


@pytest.fixture
def probe():
    return probe_set(vocab_size=300, seed=7, n_sequences=12, length=60, bos_token=299, exclude=[0, 1])


def test_the_probe_set_repeats_one_span_and_nothing_else(probe):
    tokens = probe.tokens
    assert tokens.shape == (12, 60) and (tokens[:, 0] == 299).all()
    assert not np.isin(tokens[:, 1:], [0, 1, 299]).any()
    assert ((probe.span >= 4) & (probe.span <= 12)).all() and (probe.first >= 1).all()
    assert (probe.second >= probe.first + probe.span).all() and (probe.second + probe.span <= 60).all()
    for row, (first, second, span) in enumerate(zip(probe.first, probe.second, probe.span)):
        np.testing.assert_array_equal(tokens[row, second : second + span], tokens[row, first : first + span])
        # every other token is distinct: the sequence has exactly `span` duplicates
        assert np.unique(tokens[row, 1:]).size == 59 - span
    again = probe_set(vocab_size=300, seed=7, n_sequences=12, length=60, bos_token=299, exclude=[0, 1])
    np.testing.assert_array_equal(again.tokens, tokens)
    other = probe_set(vocab_size=300, seed=8, n_sequences=12, length=60, bos_token=299, exclude=[0, 1])
    assert not np.array_equal(other.tokens, tokens)
    assert len({(f, s) for f, s in zip(probe.first, probe.second)}) > 6  # offsets and gaps vary


def test_the_probe_set_without_bos_and_its_errors():
    plain = probe_set(vocab_size=100, seed=1, n_sequences=3, length=40)
    assert plain.tokens.shape == (3, 40) and (plain.first >= 0).all()
    with pytest.raises(ValueError, match="usable tokens"):
        probe_set(vocab_size=50, seed=1, n_sequences=3, length=60)
    with pytest.raises(ValueError, match="head_types"):
        probe_set(vocab_size=500, seed=1, n_sequences=3, length=20)


def repeat_queries(probe):
    """(sequence, query, earlier copy) of every token of every second copy."""
    return [
        (row, second + k, first + k)
        for row, (first, second, span) in enumerate(zip(probe.first, probe.second, probe.span))
        for k in range(span)
    ]


def planted_patterns(probe):
    """Heads 0-4: previous token, BOS, duplicate token, induction (both BOS elsewhere), even attention."""
    n, length = probe.tokens.shape
    patterns = np.zeros((n, 5, length, length))
    patterns[:, 0, np.arange(1, length), np.arange(length - 1)] = 1.0
    patterns[:, 1, :, 0] = 1.0
    patterns[:, 2:4, :, 0] = 1.0
    for row, query, earlier in repeat_queries(probe):
        patterns[row, 2:4, query, 0] = 0.0
        patterns[row, 2, query, earlier] = 1.0
        patterns[row, 3, query, earlier + 1] = 1.0
    patterns[:, :, 0, 0] = 1.0
    patterns[:, 4] = np.tril(np.ones((length, length))) / np.arange(1, length + 1)[:, None]
    return patterns


def test_each_planted_head_scores_one_on_its_own_score_and_by_hand_on_the_others(probe):
    scores = pattern_scores(planted_patterns(probe), probe)
    assert set(scores) == {*HEAD_TYPES, "entropy"} and scores["bos"].shape == (12, 5)
    length = probe.tokens.shape[1]
    repeat_share = probe.span / (length - 1)  # the repeat's queries among queries 1..length-1
    expected = {
        "previous_token": [1, 0, 0, 0, np.mean(1 / np.arange(3, length + 1))],
        "bos": [1 / (length - 1), 1, None, None, np.mean(1 / np.arange(2, length + 1))],
        "duplicate_token": [0, 0, 1, 0, None],
        "induction": [0, 0, 0, 1, None],
        "entropy": [0, 0, 0, 0, 1],
    }
    for name, values in expected.items():
        for head, value in enumerate(values):
            if value is not None:
                np.testing.assert_allclose(scores[name][:, head], value, atol=ATOL, err_msg=f"{name} head {head}")
    np.testing.assert_allclose(scores["bos"][:, 2], 1 - repeat_share, atol=ATOL)
    # even attention: 1/(query + 1) on the earlier copy, summed over the repeat's queries
    uniform = [np.mean([1 / (q + 1) for s, q, _ in repeat_queries(probe) if s == row]) for row in range(12)]
    np.testing.assert_allclose(scores["duplicate_token"][:, 4], uniform, atol=ATOL)
    np.testing.assert_allclose(scores["induction"][:, 4], uniform, atol=ATOL)


def test_scores_refuse_patterns_of_another_probe(probe):
    with pytest.raises(ValueError, match="do not match"):
        pattern_scores(np.zeros((12, 2, 30, 30)), probe)


def test_the_model_scores_are_the_pattern_scores_of_its_patterns_in_any_batch_size():
    from headstab.activations.capture import collect_activations

    model = tiny_bridge(n_layers=2, n_heads=3, d_model=24, d_head=8, n_ctx=48, d_vocab=60, seed=2)
    probe = probe_set(vocab_size=60, seed=3, n_sequences=5, length=40, bos_token=0)
    scores = probe_scores(model, probe, batch_size=2)
    assert scores["induction"].shape == (2, 3)
    patterns = collect_activations(model, probe.tokens, patterns_only=True)["hook_pattern"]
    for layer, pattern in enumerate(patterns):
        by_hand = pattern_scores(pattern, probe)
        for name, values in by_hand.items():
            np.testing.assert_allclose(scores[name][layer], values.mean(axis=0), atol=1e-6)
    once = probe_scores(model, probe, batch_size=16)
    for name in scores:
        np.testing.assert_allclose(once[name], scores[name], atol=1e-6)


def hand_scores():
    """Two refits of one layer of three heads: a previous-token head, a BOS head that is also induction-like,
    and a head of low scores."""
    table = pd.concat([score_table(_scores(), refit) for refit in (1, 2)], ignore_index=True)
    return table


def _scores():
    return {
        "previous_token": np.array([[0.9, 0.1, 0.05]]),
        "duplicate_token": np.array([[0.0, 0.1, 0.05]]),
        "induction": np.array([[0.0, 0.6, 0.05]]),
        "bos": np.array([[0.05, 0.7, 0.05]]),
        "entropy": np.array([[0.1, 0.4, 0.9]]),
    }


def test_types_are_every_score_above_its_threshold_and_the_rule_is_recorded():
    thresholds = fixed_thresholds({"previous_token": 0.4, "duplicate_token": 0.4, "induction": 0.4, "bos": 0.5})
    assert list(thresholds.columns) == THRESHOLD_COLUMNS
    types = type_heads(hand_scores(), thresholds)
    assert list(types.columns) == HEAD_TYPE_COLUMNS
    assert types["type"].tolist() == ["previous_token", "induction+bos", "none"] * 2
    assert (types["threshold_rule"] == "fixed").all()
    assert has_type(types["type"], "bos").tolist() == [False, True, False] * 2
    assert has_type(types["type"], "none").tolist() == [False, False, True] * 2
    with pytest.raises(ValueError, match="lacks"):
        fixed_thresholds({"bos": 0.5})


def test_calibrated_thresholds_are_the_quantile_over_every_step0_head():
    step0 = pd.DataFrame({name: np.linspace(0.0, 1.0, 101) for name in HEAD_TYPES})
    step0["entropy"] = 1.0
    thresholds = calibrated_thresholds(step0, 0.99).set_index("type")
    np.testing.assert_allclose(thresholds["threshold"], 0.99, atol=ATOL)
    assert (thresholds["threshold_rule"] == "step0_quantile").all() and (thresholds["n_heads"] == 101).all()
    types = type_heads(hand_scores(), calibrated_thresholds(step0 * 0.5, 0.99))  # thresholds 0.495
    assert types["type"].tolist()[:3] == ["previous_token", "induction+bos", "none"]
    with pytest.raises(ValueError, match="quantile"):
        calibrated_thresholds(step0, 1.0)
