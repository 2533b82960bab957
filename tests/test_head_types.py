"""What a head does: the probe set, each attention score on hand-built patterns, even attention, and the OV
circuit's copying score on planted circuits, against the full matrix and TransformerLens's FactoredMatrix."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers.bridges import tiny_bridge
from helpers.tolerances import reduction_atol

from headstab.head_types import (
    ATTENTION_SCORES,
    SCORE_COLUMNS,
    copying_scores,
    even_attention_scores,
    has_type,
    model_copying_scores,
    pattern_scores,
    probe_scores,
    probe_set,
    score_table,
    tokenizer_probe_set,
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
    # the vocabulary the sequences draw from, which the copying score reads
    np.testing.assert_array_equal(probe.vocabulary, np.setdiff1d(np.arange(2, 299), []))
    assert np.isin(tokens[:, 1:], probe.vocabulary).all() and probe.rows(slice(0, 2)).vocabulary is probe.vocabulary


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
    assert set(scores) == {*ATTENTION_SCORES, "entropy"} and scores["bos"].shape == (12, 5)
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
    assert set(scores) == set(SCORE_COLUMNS) and scores["induction"].shape == scores["copying"].shape == (2, 3)
    np.testing.assert_array_equal(scores["copying"], model_copying_scores(model, probe.vocabulary))
    patterns = collect_activations(model, probe.tokens, patterns_only=True)["hook_pattern"]
    for layer, pattern in enumerate(patterns):
        by_hand = pattern_scores(pattern, probe)
        for name, values in by_hand.items():
            np.testing.assert_allclose(scores[name][layer], values.mean(axis=0), atol=1e-6)
    assert (np.abs(scores["copying"]) <= 1).all()
    once = probe_scores(model, probe, batch_size=16)
    for name in scores:
        np.testing.assert_allclose(once[name], scores[name], atol=1e-6)


def test_even_attention_scores_one_over_the_keys_seen(probe):
    even = even_attention_scores(probe)
    length = probe.tokens.shape[1]
    assert even["previous_token"] == pytest.approx(np.mean(1 / np.arange(3, length + 1)), abs=ATOL)
    assert even["bos"] == pytest.approx(np.mean(1 / np.arange(2, length + 1)), abs=ATOL)
    uniform = np.mean([np.mean([1 / (q + 1) for s, q, _ in repeat_queries(probe) if s == row]) for row in range(12)])
    assert even["duplicate_token"] == pytest.approx(uniform, abs=ATOL) and even["entropy"] == pytest.approx(1.0)


class _Tokenizer:
    bos_token_id, all_special_ids = 0, [0, 1]

    def __len__(self):
        return 250


def test_the_tokenizer_probe_set_keeps_the_trained_tokens_and_leaves_specials_out():
    options = {"seed": 3, "n_sequences": 4, "length": 40}
    probe = tokenizer_probe_set(_Tokenizer(), 200, options, prepend_bos=True)  # the model has fewer rows
    assert probe.tokens.shape == (4, 40) and (probe.tokens[:, 0] == 0).all()
    np.testing.assert_array_equal(probe.vocabulary, np.arange(2, 200))
    plain = tokenizer_probe_set(_Tokenizer(), 300, options, prepend_bos=False)
    assert plain.vocabulary.max() == 249 and not np.isin(plain.tokens, [0, 1]).any()


def planted_ov(rng, n_layers=2, n_heads=3, d_model=16, d_head=4, n_tokens=40):
    """W_E, W_V, W_O, W_U with W_U = W_E^T: head h reads and writes the same d_head directions, times sign[h]."""
    W_E = rng.normal(size=(n_tokens, d_model))
    directions = np.linalg.qr(rng.normal(size=(d_model, d_model)))[0]
    W_V = np.empty((n_layers, n_heads, d_model, d_head))
    W_O = np.empty((n_layers, n_heads, d_head, d_model))
    sign = np.array([1.0, -1.0, 1.0])
    for layer in range(n_layers):
        for head in range(n_heads):
            block = directions[:, head * d_head : (head + 1) * d_head] * rng.uniform(0.5, 2.0, size=d_head)
            W_V[layer, head], W_O[layer, head] = block, sign[head] * block.T
    return W_E, W_V, W_O, W_E.T.copy()


def test_a_copying_circuit_scores_one_and_a_suppressing_one_minus_one():
    """W_E W_V W_O W_U = +-(W_E B)(W_E B)^T: positive (negative) semi-definite, every eigenvalue of one sign."""
    scores = copying_scores(*planted_ov(np.random.default_rng(0)))
    assert scores.shape == (2, 3)
    np.testing.assert_allclose(scores[:, [0, 2]], 1.0, atol=1e-12)
    np.testing.assert_allclose(scores[:, 1], -1.0, atol=1e-12)


def full_circuit_score(W_E, W_V, W_O, W_U):
    """The score from the eigenvalues of the [token, token] full OV circuit itself."""
    eigenvalues = np.linalg.eigvals(W_E @ W_V @ W_O @ W_U)
    return eigenvalues.sum(axis=-1).real / np.abs(eigenvalues).sum(axis=-1)


def test_the_small_matrix_gives_the_full_circuits_score_on_random_weights():
    rng = np.random.default_rng(1)
    W_E, W_U = rng.normal(size=(30, 12)), rng.normal(size=(12, 30))
    W_V, W_O = rng.normal(size=(2, 3, 12, 4)), rng.normal(size=(2, 3, 4, 12))
    scores = copying_scores(W_E, W_V, W_O, W_U)
    np.testing.assert_allclose(scores, full_circuit_score(W_E, W_V, W_O, W_U), atol=1e-9)
    assert len(np.unique(np.round(scores, 6))) == 6 and (np.abs(scores) < 1).all()
    # the vocabulary's rows only: dropping tokens changes the circuit
    assert not np.allclose(copying_scores(W_E[:10], W_V, W_O, W_U[:, :10]), scores)


def test_copying_agrees_with_transformer_lens_factored_matrix_eigenvalues():
    torch = pytest.importorskip("torch")
    from transformer_lens import FactoredMatrix

    rng = np.random.default_rng(2)
    W_E, W_U = rng.normal(size=(25, 10)), rng.normal(size=(10, 25))
    W_V, W_O = rng.normal(size=(1, 2, 10, 3)), rng.normal(size=(1, 2, 3, 10))
    factored = FactoredMatrix(torch.tensor(W_E @ W_V), torch.tensor(W_O @ W_U))
    eigenvalues = factored.eigenvalues.numpy()
    expected = eigenvalues.sum(axis=-1).real / np.abs(eigenvalues).sum(axis=-1)
    np.testing.assert_allclose(copying_scores(W_E, W_V, W_O, W_U), expected, atol=1e-9)


def test_a_zero_circuit_has_no_copying_score_and_wrong_shapes_are_named():
    W_E, W_V, W_O, W_U = planted_ov(np.random.default_rng(3))
    W_O[0, 1] = 0.0
    scores = copying_scores(W_E, W_V, W_O, W_U)
    assert np.isnan(scores[0, 1]) and np.isfinite(np.delete(scores.ravel(), 1)).all()
    with pytest.raises(ValueError, match="are not \\[token, d_model\\]"):
        copying_scores(W_E, W_V, W_O, W_U[:, :5])
    with pytest.raises(ValueError, match="W_V"):
        copying_scores(W_E, W_V[..., :3], W_O, W_U)


def test_a_model_head_planted_to_copy_scores_one_through_the_bridges_weights():
    """A tiny bridge whose unembedding is its embedding: head 0 of layer 1 reads and writes the same directions
    (copies), head 1 writes them negated (suppresses)."""
    import torch

    model = tiny_bridge(n_layers=2, n_heads=3, d_model=24, d_head=8, n_ctx=48, d_vocab=60, seed=2)
    state = model.state_dict()
    rng = np.random.default_rng(4)
    block = torch.tensor(np.linalg.qr(rng.normal(size=(24, 24)))[0][:, :16], dtype=torch.float32)  # [d_model, 2 x 8]
    state["unembed.weight"] = state["embed.weight"].clone()
    for head, sign in ((0, 1.0), (1, -1.0)):
        part = block[:, 8 * head : 8 * (head + 1)]
        state["blocks.1.attn.v.weight"][8 * head : 8 * (head + 1)] = part.T
        state["blocks.1.attn.o.weight"][:, 8 * head : 8 * (head + 1)] = sign * part
    model.load_state_dict(state)
    scores = model_copying_scores(model, np.arange(5, 60))
    assert scores[1, 0] == pytest.approx(1.0, abs=1e-5) and scores[1, 1] == pytest.approx(-1.0, abs=1e-5)
    assert np.abs(scores[0]).max() < 0.999  # the random heads copy and suppress at once


def test_score_table_rows_and_has_type():
    scores = {name: np.arange(6, dtype=float).reshape(2, 3) / 10 for name in SCORE_COLUMNS}
    table = score_table(scores, "7")
    assert list(table.columns) == ["refit", "layer", "head", *SCORE_COLUMNS]
    assert table["refit"].tolist() == ["7"] * 6 and table["layer"].tolist() == [0, 0, 0, 1, 1, 1]
    assert table["copying"].tolist() == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    types = pd.Series(["previous_token", "induction+bos", "none", "bos"])
    assert has_type(types, "bos").tolist() == [False, True, False, True]
    assert has_type(types, "none").tolist() == [False, False, True, False]
    assert has_type(types, "induction").tolist() == [False, True, False, False]
