"""Activation caches: one HDF5 file per trained refit, written once and read by every analysis.

capture (prompts to token ids, one forward pass to the stored hooks), packing (lower-triangle
layout of the patterns), writer (the HDF5 file), reader (the validated reader), errors (what can
go wrong with a file and the command that rebuilds it). Contract: docs/caches.md.
"""

from headstab.activations.capture import RESID_HOOKS, check_prompt_lengths, tokenize_prompts
from headstab.activations.reader import (
    CacheChecksumError,
    CacheError,
    CacheReader,
    check_consistent_shapes,
    open_cache,
    rebuild_command,
)
from headstab.activations.writer import CacheOptions, cache_activations, write_activation_cache

__all__ = [
    "RESID_HOOKS",
    "CacheChecksumError",
    "CacheError",
    "CacheOptions",
    "CacheReader",
    "cache_activations",
    "check_consistent_shapes",
    "check_prompt_lengths",
    "open_cache",
    "rebuild_command",
    "tokenize_prompts",
    "write_activation_cache",
]
