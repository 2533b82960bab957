"""Planted-repeat documents: determinism, the planted copies and their share, the vocabulary, errors."""

from __future__ import annotations

import numpy as np
import pytest

from headstab.data.planted import PLANTED_WORDS, generate_planted_documents, planted_tokens, planted_words

SPAN, GAP = (8, 32), (0, 32)


def copied_tokens(tokens: np.ndarray) -> int:
    """Tokens i whose bigram (i - 1, i) occurred before: with a vocabulary too large for chance repeats, these
    are exactly the planted copies but the first token of each."""
    seen, count = set(), 0
    for bigram in zip(tokens[:-1].tolist(), tokens[1:].tolist(), strict=True):
        count += bigram in seen
        seen.add(bigram)
    return count


def test_documents_are_deterministic_and_a_longer_corpus_extends_a_shorter_one():
    short = list(generate_planted_documents(0, 3, 31, 127, SPAN, GAP, 0.5))
    assert short == list(generate_planted_documents(0, 5, 31, 127, SPAN, GAP, 0.5))[:3]
    assert short != list(generate_planted_documents(1, 3, 31, 127, SPAN, GAP, 0.5))


def test_a_document_is_document_words_words_of_the_vocabulary():
    documents = list(generate_planted_documents(0, 20, 31, 127, SPAN, GAP, 0.5))
    assert all(len(document.split(" ")) == 127 for document in documents)
    assert {word for document in documents for word in document.split(" ")} == set(PLANTED_WORDS[:31])


def test_every_planted_copy_repeats_a_span_and_about_repeat_fraction_of_tokens_are_copies():
    rng = np.random.default_rng(0)
    # copies but each span's first token, mean 19 per unit; a unit has mean 20 / fraction words, or at 0.5 no
    # filler: a span, its gap and its copy, 20 + 16 + 20 words
    for fraction, expected in ((0.25, 19 / 80), (0.5, 19 / 56)):
        share = copied_tokens(planted_tokens(rng, 200_000, 10**12, fraction, SPAN, GAP)) / 200_000
        # >= 2,500 units whose span length has s.d. 7.2: the share's relative s.d. is under 1%
        assert abs(share - expected) < 0.03 * expected, (fraction, share)


def test_no_repeats_leaves_no_copies_and_spans_longer_than_the_document_fit_none():
    rng = np.random.default_rng(1)
    assert copied_tokens(planted_tokens(rng, 5000, 10**12, 0.0, SPAN, GAP)) == 0
    assert copied_tokens(planted_tokens(rng, 40, 10**12, 0.5, (30, 30), (0, 0))) == 0


def test_words_and_fractions_outside_their_range_fail_naming_the_key():
    with pytest.raises(ValueError, match=r"planted_repeats.words must be 1-70, got 71"):
        planted_words(71)
    with pytest.raises(ValueError, match=r"planted_repeats.repeat_fraction must be in \[0, 0.5\]"):
        planted_tokens(np.random.default_rng(0), 10, 5, 0.6, SPAN, GAP)
    with pytest.raises(ValueError, match=r"span \[9, 8\]"):
        planted_tokens(np.random.default_rng(0), 10, 5, 0.5, (9, 8), GAP)
