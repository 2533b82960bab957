"""What goes wrong with an activation cache, and the command that fixes it (contract: docs/caches.md)."""

from __future__ import annotations

import shlex
from pathlib import Path

from headstab.plan.layout import writer_rule

__all__ = [
    "CacheChecksumError",
    "CacheError",
    "activation_sets_message",
    "cache_rule",
    "forcerun_hint",
    "fix_hint",
    "is_filter_failure",
    "rebuild_command",
]


class CacheError(ValueError):
    """A cache file is missing, unreadable, incomplete, foreign or inconsistent; the message says how to rebuild it."""


class CacheChecksumError(CacheError):
    """A dataset of a cache fails its fletcher32 checksum: the file is corrupt."""


def rebuild_command(path: str | Path) -> str:
    """The shell command that rebuilds the cache at `path` (run with the run's --configfile/--profile): its block's
    cache job again, not only publish_cache, whose hard link would bring back the same file."""
    return f"snakemake {shlex.quote(str(path))} --forcerun {cache_rule(path)}"


# A published cache is a hard link to its block's file: its content is the block's cache job's.
_COMPUTED_BY = {"publish_cache": "cache_activations", "publish_snapshot_cache": "cache_snapshot_activations"}


def cache_rule(path: str | Path) -> str:
    """The rule that computes the cache `path`: cache_snapshot_activations for a snapshot's, else cache_activations."""
    rule = writer_rule(path) or "cache_activations"
    return _COMPUTED_BY.get(rule, rule)


def fix_hint(path: str | Path) -> str:
    return (
        f"rebuild it with `{rebuild_command(path)}` (rule {cache_rule(path)}; with the --configfile/--profile of "
        "the run that made it)"
    )


def forcerun_hint(path: str | Path, hook: str) -> str:
    return (
        f"set analysis.cka_hook: {hook} in the config and rebuild the caches with "
        f"`snakemake {shlex.quote(str(path))} --forcerun {cache_rule(path)}` (with the --configfile/--profile of "
        "the run that made it)"
    )


def activation_sets_message(path: str | Path, promptset: str, hook: str, stored: object) -> str:
    """Why /{promptset}/{hook} is missing from a cache whose prompt set stores hook_pattern alone, and the fix."""
    return (
        f"activation cache {path} stores hook_pattern only for prompt set '{promptset}', so no /{promptset}/{hook} "
        f"(hook_z and the residual hooks are stored for the prompt sets {stored} only: config key "
        f"cache.activation_sets); add '{promptset}' to cache.activation_sets in the config and rebuild the caches "
        f"with `snakemake {shlex.quote(str(path))} --forcerun {cache_rule(path)}` (with the --configfile/--profile "
        "of the run that made it)"
    )


def is_filter_failure(error: OSError) -> bool:
    """Whether an h5py read error is a failed filter: HDF5 reports a fletcher32 mismatch as "filter returned failure"."""
    text = str(error).lower()
    return "filter" in text or "checksum" in text
