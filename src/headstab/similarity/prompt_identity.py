"""Which prompts a similarity file was computed on: the sha256 of the prompts' token ids as the caches hold them.

A prompt-group similarity file records it (attribute `prompt_tokens_sha256`), so that files computed from other
caches (the trained refits' and their step 0) can be shown to share their prompts before one is compared with the
other: two sets of the same count but other prompts would otherwise be compared prompt group by prompt group
without a word, and another count fails far from the cause.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from headstab.activations.h5util import decode_attr
from headstab.activations.reader import open_cache

__all__ = ["PROMPT_DIGEST", "cached_prompt_digest", "check_same_prompts", "prompt_tokens_digest", "recorded_digest"]

PROMPT_DIGEST = "prompt_tokens_sha256"


def prompt_tokens_digest(tokens: np.ndarray, lengths: np.ndarray) -> str:
    """sha256 of each prompt's token ids in order, each with its length: the same for any padding or integer dtype.

    tokens: int [prompt, position], right-padded; lengths: int [prompt] (BOS included when prepended).
    """
    digest = hashlib.sha256()
    for row, length in zip(np.asarray(tokens), np.asarray(lengths), strict=True):
        digest.update(np.int64(length).tobytes())
        digest.update(np.asarray(row[: int(length)], dtype="<i8").tobytes())
    return digest.hexdigest()


def cached_prompt_digest(cache_paths: Sequence[str | Path], promptset: str) -> str:
    """The digest of `promptset` in the caches, which must all hold the same prompts; ValueError naming two that
    do not."""
    digests = {}
    for path in cache_paths:
        with open_cache(path) as cache:
            digests[str(path)] = prompt_tokens_digest(cache.tokens(promptset), cache.lengths(promptset))
    first, *_ = digests
    for path, digest in digests.items():
        if digest != digests[first]:
            raise ValueError(
                f"activation caches {first} and {path} hold other token ids for prompt set '{promptset}' (other "
                f"prompts, tokenizer or cache.prepend_bos); rebuild the stale one with "
                f"`snakemake {shlex.quote(path)} --forcerun cache_activations` (cache_snapshot_activations for a "
                "snapshot's)"
            )
    return digests[first]


def recorded_digest(path: str | Path) -> str | None:
    """The prompt digest a result file records, None when it records none."""
    import h5py

    with h5py.File(path, "r") as handle:
        value = handle.attrs.get(PROMPT_DIGEST)
    return None if value is None else str(decode_attr(value))


def check_same_prompts(path: str | Path, other: str | Path, promptset: str) -> None:
    """Fail unless the result files `path` and `other` record the same prompt digest, naming both files, both
    digests and the fix."""
    digests = {str(file): recorded_digest(file) for file in (path, other)}
    (first, first_digest), (second, second_digest) = digests.items()
    for file, digest, partner in ((first, first_digest, second), (second, second_digest, first)):
        if digest is None:
            raise ValueError(
                f"{file} records no {PROMPT_DIGEST} (written by older code), so it cannot be shown to share the "
                f"prompts of prompt set '{promptset}' with {partner}; rebuild it with {_rebuild(file)}"
            )
    if first_digest != second_digest:
        raise ValueError(
            f"{first} ({PROMPT_DIGEST} {first_digest}) and {second} ({second_digest}) were computed on other prompts "
            f"of prompt set '{promptset}' (other prompts, tokenizer or cache.prepend_bos), so comparing them would "
            f"pair unrelated prompts; rebuild the one made on the old prompts, {_rebuild(first)} or "
            f"{_rebuild(second)} (if it still differs, its caches hold the old prompts: add `--forcerun "
            "cache_activations cache_snapshot_activations`)"
        )


def _rebuild(path: str) -> str:
    quoted = shlex.quote(path)
    return f"`rm -f {quoted} && snakemake {quoted}`"
