"""How sharp an attention head is: the entropy of its causal pattern rows.

A row's entropy is normalised by the log of its number of keys (query i sees i + 1 keys), so a head
that spreads evenly over every visible key scores 1 and a head that puts all its attention on one key
scores 0, whatever the row's length. Query 0 sees one key and has no entropy to normalise; it is left out.
The cosine of two patterns falls as they sharpen, whatever the heads compute (docs/statistics.md), so
stability is read beside this number.
"""

from __future__ import annotations

import numpy as np

__all__ = ["normalised_row_entropy"]


def normalised_row_entropy(pattern: np.ndarray, length: int | None = None) -> np.ndarray:
    """Mean normalised entropy of the rows of causal attention patterns.

    pattern: [..., query_pos, key_pos], each row a distribution over keys 0..query (zero above the
    diagonal); only the leading `length` x `length` block (default: all) is read, padding never enters.
    Returns float64 [...]: the mean over queries 1..length-1 of -sum_k p log p / log(query + 1);
    NaN for patterns of fewer than two tokens.
    """
    pattern = np.asarray(pattern, dtype=np.float64)
    length = pattern.shape[-1] if length is None else int(length)
    if length < 2:
        return np.full(pattern.shape[:-2], np.nan)
    rows = pattern[..., 1:length, :length]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(rows > 0, rows * np.log(rows), 0.0)
    entropy = -terms.sum(axis=-1)  # [..., query]
    return (entropy / np.log(np.arange(2, length + 1))).mean(axis=-1)
