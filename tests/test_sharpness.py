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
