"""Normalised row entropy of causal patterns: 1 for even attention, 0 for one key, by hand in between."""

from __future__ import annotations

import numpy as np
from helpers.tolerances import reduction_atol

from headstab.sharpness import normalised_row_entropy


def _uniform_causal(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


def test_even_attention_scores_one_and_attention_to_one_key_scores_zero():
    assert np.isclose(normalised_row_entropy(_uniform_causal(7)), 1.0, atol=reduction_atol(np.float64, 7))
    previous_token = np.eye(6, k=-1)
    previous_token[0, 0] = 1.0
    assert normalised_row_entropy(previous_token) == 0.0


def test_a_row_worked_by_hand():
    pattern = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.25, 0.25]])
    # row 1: ln 2 / ln 2 = 1; row 2: (0.5 ln 2 + 0.5 ln 4) / ln 3 = 1.5 ln 2 / ln 3
    expected = (1.0 + 1.5 * np.log(2) / np.log(3)) / 2
    assert np.isclose(normalised_row_entropy(pattern), expected, atol=reduction_atol(np.float64, 3))


def test_padding_beyond_length_is_never_read_and_leading_axes_are_kept():
    padded = np.zeros((2, 3, 5, 5))
    padded[..., :3, :3] = _uniform_causal(3)
    padded[..., 3:, :] = 1.0  # garbage in the padding rows and columns
    out = normalised_row_entropy(padded, length=3)
    assert out.shape == (2, 3) and np.allclose(out, 1.0, atol=reduction_atol(np.float64, 3))


def test_fewer_than_two_tokens_have_no_entropy():
    assert np.isnan(normalised_row_entropy(np.ones((4, 1, 1)))).all()
    assert np.isnan(normalised_row_entropy(_uniform_causal(4), length=1))


def _random_causal(rng, n_rows, length, scale=2.0):
    scores = np.where(np.tri(length, dtype=bool), rng.normal(scale=scale, size=(n_rows, length, length)), -np.inf)
    pattern = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return pattern / pattern.sum(axis=-1, keepdims=True)


def _packed(patterns):
    """[row, entry] packed lower triangles of a list of [row, T, T] patterns, and the offsets."""
    from headstab.activations.packing import lower_triangle_offsets

    lengths = np.array([p.shape[-1] for p in patterns])
    block = np.concatenate([p[:, *np.tril_indices(p.shape[-1])] for p in patterns], axis=1).astype(np.float32)
    return np.ascontiguousarray(block), lengths, lower_triangle_offsets(lengths)


def test_packed_row_entropy_equals_the_entropy_of_each_unpacked_prompt():
    from headstab.sharpness import packed_row_entropy

    rng = np.random.default_rng(0)
    patterns = [_random_causal(rng, 3, length) for length in (4, 1, 7, 2)]
    block, lengths, offsets = _packed(patterns)
    out = packed_row_entropy(block, lengths, offsets)
    assert out.shape == (3, 4) and np.isnan(out[:, 1]).all()
    np.testing.assert_array_equal(packed_row_entropy(block, lengths, offsets, rows_per_chunk=2), out)  # chunks
    for p in (0, 2, 3):
        expected = normalised_row_entropy(patterns[p].astype(np.float32))
        np.testing.assert_allclose(out[:, p], expected, atol=reduction_atol(np.float32, 7, magnitude=np.log(7)))


def test_position_template_averages_every_prompt_that_reaches_an_entry_by_hand():
    from headstab.sharpness import content_remainder, lone_template_entries, position_template

    short = np.array([[[1.0, 0.0], [0.25, 0.75]]])
    long = np.array([[[1.0, 0.0, 0.0], [0.75, 0.25, 0.0], [0.2, 0.3, 0.5]]])
    block, lengths, offsets = _packed([short, long])
    template, support = position_template(block, lengths, offsets)
    assert support.tolist() == [2, 2, 2, 1, 1, 1]
    np.testing.assert_allclose(template[0], [1.0, 0.5, 0.5, 0.2, 0.3, 0.5], atol=reduction_atol(np.float32, 2))
    remainder = content_remainder(block, lengths, offsets)
    np.testing.assert_allclose(remainder[0, :3], [0.0, -0.25, 0.25], atol=reduction_atol(np.float32, 2))
    np.testing.assert_allclose(remainder[0, 3:6], [0.0, 0.25, -0.25], atol=reduction_atol(np.float32, 2))
    assert np.all(remainder[0, 6:] == 0.0)  # the rows only the long prompt reaches are exactly zero
    assert lone_template_entries(lengths) == 3
    assert lone_template_entries(np.array([3, 5, 5])) == 0 and lone_template_entries(np.array([4, 6, 3])) == 11


def test_a_head_that_attends_by_position_alone_has_no_content_left():
    from headstab.sharpness import content_remainder

    rng = np.random.default_rng(1)
    positional = _random_causal(rng, 1, 9)[0]  # one fixed pattern, every prompt's first T rows
    patterns = [np.stack([positional[:t, :t], _random_causal(rng, 1, t)[0]]) for t in (5, 9, 7, 9, 6)]
    block, lengths, offsets = _packed(patterns)
    remainder = content_remainder(block, lengths, offsets)
    assert np.abs(remainder[0]).max() <= reduction_atol(np.float32, len(lengths))
    assert np.abs(remainder[1]).max() > 0.1  # a head with content keeps it
