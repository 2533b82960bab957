"""Held-out text as a token budget: the first `budget` tokens of a stream of documents (the MLP-neuron statistics'
text, `neurons.heldout`; docs/beyond_the_paper.md).

Each document is tokenized on its own and followed by the tokenizer's EOS token, as the training shards are
(`headstab.data.shards`): the models saw independent documents separated that way, and a blank line would make two
unrelated web pages read as one. Empty documents add nothing (no EOS of their own). The stream is cut after exactly
`budget` tokens, inside the document that crosses it; the documents after it are never read, so a streamed hub
split is consumed only as far as the budget needs. A source with fewer tokens gives all of them, and `n_tokens`
says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headstab.data import CorpusError


@dataclass(frozen=True)
class HeldoutText:
    """tokens: [token] int64, the budget's worth or fewer when the source ran out; n_documents: documents with
    tokens in it, the last one possibly cut."""

    tokens: np.ndarray
    n_documents: int

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.size)


def first_tokens(
    documents: Iterable[str], encode: Callable[[str], Sequence[int]], eos_id: int, budget: int
) -> HeldoutText:
    """The first `budget` tokens of `documents`, each document as `encode(text)` + [eos_id].

    encode: text -> token ids without special tokens (a tokenizer's, one document at a time).
    """
    if budget < 1:
        raise ValueError(f"a held-out token budget must be at least 1 token, got {budget}")
    pieces: list[np.ndarray] = []
    n_tokens = n_documents = 0
    for text in documents:
        ids = list(encode(text))
        if not ids:
            continue
        piece = np.asarray([*ids, eos_id], dtype=np.int64)[: budget - n_tokens]
        pieces.append(piece)
        n_tokens += piece.size
        n_documents += 1
        if n_tokens == budget:
            break
    tokens = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
    return HeldoutText(tokens, n_documents)


def column_texts(rows: Iterable[Mapping[str, Any]], column: str, where: str) -> Iterator[str]:
    """The text of each row's `column`, read lazily; a row without it fails naming `where` (the dataset and the
    config key that names the column) and the row's columns."""
    for row in rows:
        if column not in row:
            raise CorpusError(f"{where}: the rows have no column {column!r}, only {sorted(row)}; fix the text_column")
        yield row[column]
