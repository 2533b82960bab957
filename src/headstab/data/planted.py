"""Seeded planted-repeat documents: uniform random words of a small vocabulary, with spans copied later.

The corpus of the induction control (config/demo_circuits.yaml). Every word is one token of the word-level
tokenizer trained on it (`tokenizers.<name>.model: words`), so a document of n words is n tokens and a copied
span is a repeated token sequence: the one thing a next-token predictor can learn from it beyond the unigram
rate is to copy, which induction heads do. Units of (filler, span of L ~ U[span] words, gap ~ U[gap] words,
the span again) follow each other from a random offset, so the copy's offset varies from unit to unit; the
filler before a unit has mean length max(0, L / repeat_fraction - 2L - gap), so about `repeat_fraction` of
the words are second copies, up to mean(L) / mean(2L + gap) where a unit leaves no room for filler: 0.36 at
spans of 8-32 and gaps of 0-32 (`repeat_fraction` 0.5 there means spans and gaps back to back). Document k
depends only on (seed, k), so a longer corpus extends a shorter one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

__all__ = ["PLANTED_WORDS", "generate_planted_documents", "plant_repeats", "planted_tokens", "planted_words"]

# Consonant-vowel syllables: short, distinct, and no word is a prefix of another.
PLANTED_WORDS = tuple(consonant + vowel for consonant in "bdfgklmnprstvz" for vowel in "aeiou")


def planted_words(n_words: int) -> list[str]:
    """The first `n_words` words of the planted vocabulary."""
    if not 1 <= n_words <= len(PLANTED_WORDS):
        raise ValueError(f"planted_repeats.words must be 1-{len(PLANTED_WORDS)}, got {n_words}")
    return list(PLANTED_WORDS[:n_words])


def planted_tokens(
    rng: np.random.Generator,
    length: int,
    n_words: int,
    repeat_fraction: float,
    span: tuple[int, int],
    gap: tuple[int, int],
) -> np.ndarray:
    """`length` word indices ~ U{0..n_words-1} with planted repeats (module docstring), int64 [length]."""
    if not 1 <= span[0] <= span[1] or not 0 <= gap[0] <= gap[1]:
        raise ValueError(f"planted_repeats: span {list(span)} and gap {list(gap)} must be [low, high], low <= high")
    if not 0.0 <= repeat_fraction < 0.5 + 1e-12:
        raise ValueError(
            f"planted_repeats.repeat_fraction must be in [0, 0.5] (copies of as many words), got {repeat_fraction}"
        )
    words = rng.integers(0, n_words, size=length)
    plant_repeats(rng, words, repeat_fraction, span, gap)
    return words


def plant_repeats(
    rng: np.random.Generator, tokens: np.ndarray, repeat_fraction: float, span: tuple[int, int], gap: tuple[int, int]
) -> np.ndarray:
    """Copy spans of `tokens` later into it, in place (the units of the module docstring), and return the mask
    [len(tokens)] of copied tokens whose previous token is a copy too (predictable by induction). Draws nothing
    when `repeat_fraction` <= 0."""
    mask = np.zeros(len(tokens), dtype=bool)
    if repeat_fraction <= 0:
        return mask
    position = int(rng.integers(0, span[1]))
    while True:
        size = int(rng.integers(span[0], span[1] + 1))
        between = int(rng.integers(gap[0], gap[1] + 1))
        mean_filler = max(0.0, size / repeat_fraction - 2 * size - between)
        position += int(rng.integers(0, int(2 * mean_filler) + 1))
        copy = position + size + between
        if copy + size > len(tokens):
            return mask
        tokens[copy : copy + size] = tokens[position : position + size]
        mask[copy + 1 : copy + size] = True
        position = copy + size


def generate_planted_documents(
    seed: int,
    n_documents: int,
    words: int,
    document_words: int,
    span: Sequence[int],
    gap: Sequence[int],
    repeat_fraction: float,
) -> Iterator[str]:
    """`n_documents` documents of `document_words` space-separated words of `planted_words(words)`."""
    if n_documents < 0:
        raise ValueError(f"n_documents must be >= 0, got {n_documents}")
    vocabulary = np.array(planted_words(words))
    for index in range(n_documents):
        rng = np.random.default_rng([seed, index])
        tokens = planted_tokens(rng, document_words, words, repeat_fraction, (span[0], span[1]), (gap[0], gap[1]))
        yield " ".join(vocabulary[tokens])
