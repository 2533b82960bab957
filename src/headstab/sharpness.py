"""How sharp an attention head is: the entropy of its causal pattern rows.

A row's entropy is normalised by the log of its number of keys (query i sees i + 1 keys), so a head
that spreads evenly over every visible key scores 1 and a head that puts all its attention on one key
scores 0, whatever the row's length. Query 0 sees one key and has no entropy to normalise; it is left out.
The cosine of two patterns falls as they sharpen, whatever the heads compute (docs/statistics.md), so
stability is read beside this number.

The content variant of stability compares what is left of a pattern once its position-only template is
taken away. A head's template at query position i is its mean attention row i over the prompts that
reach position i: a causal row depends on tokens 0..i only, so under "attends by position alone" every
prompt long enough sees the same row, whatever its length. A prompt's template is the first T rows of it.
The templates of the content variant leave out the prompt p and its null partner q: a template holding them
would take part of their own content out of their remainders and push p's and q's remainders apart (a null
below zero). The two sides of the null take their templates from disjoint halves of the other prompts: one
template for both would give the two remainders its estimation error in common (a null above zero).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "content_remainders",
    "content_share",
    "empty_template_entries",
    "normalised_row_entropy",
    "packed_row_entropy",
    "position_template",
    "template_halves",
]


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


def _row_starts(lengths: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each query row of each prompt starts in a packed block, and its query index: int64 [row] each."""
    lengths = np.asarray(lengths, dtype=np.int64)
    query = np.concatenate([np.arange(length) for length in lengths]) if lengths.size else np.zeros(0, np.int64)
    prompt_start = np.repeat(np.asarray(offsets[:-1], dtype=np.int64), lengths)
    return prompt_start + query * (query + 1) // 2, query


def packed_row_entropy(
    block: np.ndarray, lengths: np.ndarray, offsets: np.ndarray, rows_per_chunk: int = 64
) -> np.ndarray:
    """`normalised_row_entropy` of every prompt's pattern, from packed lower triangles.

    block: [row, entry] packed causal patterns (`headstab.activations.packing`; prompt p's entries at
    offsets[p]:offsets[p + 1]). Returns float64 [row, prompt]; NaN for prompts of fewer than two tokens.
    Works through rows_per_chunk rows at a time, so its temporaries stay small beside the block.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    starts, query = _row_starts(lengths, offsets)
    out = np.full((len(block), lengths.size), np.nan)
    if starts.size == 0:
        return out
    prompt_starts = np.r_[0, np.cumsum(lengths)[:-1]]
    keys = np.log(np.maximum(query, 1) + 1.0)  # query 0 sees one key: its entropy is 0, divided by anything
    for first in range(0, len(block), rows_per_chunk):
        values = np.asarray(block[first : first + rows_per_chunk], dtype=np.float32)
        positive = values > 0
        terms = np.where(positive, values * np.log(np.where(positive, values, 1.0)), 0.0)
        entropy = -np.add.reduceat(terms, starts, axis=1, dtype=np.float64) / keys
        entropy[:, query == 0] = 0.0
        per_prompt = np.add.reduceat(entropy, prompt_starts, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[first : first + rows_per_chunk] = np.where(lengths >= 2, per_prompt / (lengths - 1), np.nan)
    return out


def _template_sums(
    block: np.ndarray, widths: np.ndarray, offsets: np.ndarray, prompts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sum over `prompts` reaching each lower-triangle entry of the longest prompt of all, and their number:
    (float64 [row, max(widths)], int64 [same entries])."""
    longest = int(widths.max(initial=0))
    total = np.zeros((len(block), longest))
    for prompt in prompts:
        total[:, : widths[prompt]] += block[:, offsets[prompt] : offsets[prompt] + widths[prompt]]
    support = (np.arange(longest)[None, :] < widths[prompts][:, None]).sum(axis=0)
    return total, support


def position_template(block: np.ndarray, lengths: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's position-only template over every prompt: at every lower-triangle entry of the longest
    prompt, the mean over the prompts that reach it.

    block: [row, entry] packed causal patterns. Returns (float64 [row, n_lower_entries(max length)] template,
    int64 [same entries] number of prompts averaged). A prompt of length T packs the first T rows of the
    longest prompt's triangle, so its template is the template's leading n_lower_entries(T) entries.
    """
    widths = np.asarray(lengths, dtype=np.int64) * (np.asarray(lengths, dtype=np.int64) + 1) // 2
    total, support = _template_sums(block, widths, offsets, np.arange(widths.size))
    return total / np.maximum(support, 1), support


def template_halves(lengths: np.ndarray) -> np.ndarray:
    """bool [prompt]: True for the prompts of the candidate half. In order of length (index on ties) the prompts
    alternate between the anchor half (False) and the candidate half, so both halves reach nearly every row."""
    lengths = np.asarray(lengths, dtype=np.int64)
    half = np.zeros(lengths.size, dtype=bool)
    half[np.lexsort((np.arange(lengths.size), lengths))[1::2]] = True
    return half


def _leave_out(sums, members, block, widths, offsets, left_out, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The template of `sums` over the first `width` entries without the prompts `left_out` that are `members`
    of its half: (float64 [row, width] mean, bool [width] whether any prompt is left to average)."""
    total, count = sums[0][:, :width].copy(), sums[1][:width].copy()
    for prompt in left_out:
        if members[prompt]:
            reach = int(min(widths[prompt], width))
            total[:, :reach] -= block[:, offsets[prompt] : offsets[prompt] + reach]
            count[:reach] -= 1
    return total / np.maximum(count, 1), count > 0


def content_remainders(
    block: np.ndarray, lengths: np.ndarray, offsets: np.ndarray, partners: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each prompt's pattern, and its null partner's, less a position template without either prompt.

    block: [row, entry] packed causal patterns; partners: int64 [prompt] the null's partner q of each prompt p
    (`headstab.similarity.prompt_groups.null_partners`). The prompts split into two halves (`template_halves`);
    A_pq is the mean, at each entry, over the anchor half's prompts but p and q that reach it, B_pq the same over
    the candidate half. Returns float32 (own, partner), both [row, entry] in block's layout: own holds
    pattern_p - A_pq at prompt p's entries; partner holds pattern_q - B_pq at p's first n_lower_entries(min(T_p,
    T_q)) entries (the rows the null compares), zero beyond. Disjoint halves keep the two remainders of the null
    free of a shared template error. An entry without a prompt to average has a remainder of exactly zero.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    widths = lengths * (lengths + 1) // 2
    candidate_half = template_halves(lengths)
    halves = [~candidate_half, candidate_half]
    sums = [_template_sums(block, widths, offsets, np.flatnonzero(members)) for members in halves]
    own, partner = np.zeros(block.shape, dtype=np.float32), np.zeros(block.shape, dtype=np.float32)
    for p, q in enumerate(np.asarray(partners, dtype=np.int64)):
        width, shared = int(widths[p]), int(min(widths[p], widths[q]))
        template, reached = _leave_out(sums[0], halves[0], block, widths, offsets, (p, q), width)
        pattern = block[:, offsets[p] : offsets[p] + width]
        own[:, offsets[p] : offsets[p] + width] = np.where(reached, pattern - template, 0.0)
        template, reached = _leave_out(sums[1], halves[1], block, widths, offsets, (p, q), shared)
        other = block[:, offsets[q] : offsets[q] + shared]
        partner[:, offsets[p] : offsets[p] + shared] = np.where(reached, other - template, 0.0)
    return own, partner


def content_share(block: np.ndarray, remainder: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """||remainder|| / ||pattern|| of every row on every prompt: float64 [row, prompt] (NaN where the pattern
    is all zero). remainder: `content_remainders`'s own, in block's layout."""
    starts = np.asarray(offsets[:-1], dtype=np.int64)  # every prompt has a token (BOS), so no segment is empty
    pattern_sq = np.add.reduceat(np.square(block, dtype=np.float64), starts, axis=1)
    remainder_sq = np.add.reduceat(np.square(remainder, dtype=np.float64), starts, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pattern_sq > 0, np.sqrt(remainder_sq / pattern_sq), np.nan)


def empty_template_entries(lengths: np.ndarray, partners: np.ndarray) -> int:
    """How many packed entries of a prompt set have no anchor-half template (`content_remainders`): a prompt p's
    entries beyond every other anchor-half prompt but its partner, whose remainder is zero."""
    lengths = np.asarray(lengths, dtype=np.int64)
    widths = lengths * (lengths + 1) // 2
    anchor_half = ~template_halves(lengths)
    empty = 0
    for p, q in enumerate(np.asarray(partners, dtype=np.int64)):
        others = anchor_half.copy()
        others[[p, q]] = False
        empty += int(widths[p] - min(widths[p], widths[others].max(initial=0)))
    return empty
