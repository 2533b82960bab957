"""Paths a file of the workflow records (a cache's checkpoint, a similarity file's caches, a corpus meta's tokenizer)
are written relative to Snakemake's working directory at the time: read back from a results directory moved,
copied or traced from elsewhere, each is moved onto the results directory of the file that records it."""

from __future__ import annotations

import inspect
import re
from functools import cache
from pathlib import Path, PurePath

# _FILES is layout.py's one list of where each kind of file lies: reading it keeps the depths in step with Layout
from headstab.plan.layout import _FILES, Layout, parse_path

__all__ = ["rebased", "results_root"]

_ROOT = "results_root"


def _anchor(path: str | PurePath) -> tuple[str, int] | None:
    """(the directory where the layout pattern `path` matches starts, e.g. "caches"; the number of path components
    the match spans); None when the workflow does not write `path`."""
    text = "/" + PurePath(path).as_posix().lstrip("/")
    for pattern, _, _ in _FILES:
        if match := re.search(pattern, text):
            matched = text[match.start() :]
            return matched.split("/")[1], matched.count("/")
    return None


def _layout_paths(value: str) -> list[str]:
    """Every path Layout builds with each of its arguments `value` (a digit, as steps and shards must be), under
    results directory _ROOT."""
    layout = Layout(
        {"results_dir": _ROOT, "tokenizers": {value: {"source": "hub"}}, "corpora": {value: {"n_shards": 1}}}
    )
    paths: list[str] = []
    for name, method in inspect.getmembers(layout, callable):
        if name.startswith("_") or name == "parse":
            continue
        built = method(*[value] * len(inspect.signature(method).parameters))
        paths += [item for item in (built if isinstance(built, list) else [built]) if isinstance(item, str)]
    return paths


@cache
def _depths() -> dict[tuple[str, str], int]:
    """(anchor directory, table scope) -> directories between the results directory and the anchor (0 for data/, 1
    for an architecture's caches/, 2 for compare/<arch>/tables/), measured on Layout's paths (a file in a directory
    Layout names, such as checkpoints/seed1/training/, shares its anchor's depth); an anchor met at two depths has
    none."""
    measured: dict[tuple[str, str], set[int]] = {}
    for path in _layout_paths("0") + _layout_paths("1"):
        if (anchor := _anchor(path)) is not None and (parsed := parse_path(path)) is not None:
            directory, spanned = anchor
            if spanned == 1:  # the match is the file's name alone (a report page): no directory to measure from
                continue
            measured.setdefault((directory, parsed.scope), set()).add(len(PurePath(path).parts) - 1 - spanned)
    return {key: depths.pop() for key, depths in measured.items() if len(depths) == 1}  # one depth, or none known


def results_root(path: str | PurePath) -> PurePath | None:
    """The results directory `path` lies in, from its place in the layout (e.g. a/b for a/b/l2_h4/caches/seed1.h5,
    . for l2_h4/caches/seed1.h5); None for a file the workflow does not write or a path too short to tell."""
    anchor, parsed = _anchor(path), parse_path(path)
    if anchor is None or parsed is None or (depth := _depths().get((anchor[0], parsed.scope))) is None:
        return None
    parents = PurePath(path).parents
    up = anchor[1] + depth - 1  # the match's components and the directories above it, the file's name counted once
    return parents[up] if up < len(parents) else None


def rebased(recorded: str | PurePath, holder: str | PurePath) -> Path:
    """`recorded`, a path that the file `holder` records, moved onto the results directory `holder` lies in now:
    new_root / (recorded relative to old_root). As recorded when either root is not found (a file outside any
    results layout: a hub tokenizer's directory) or both are the same."""
    old = results_root(recorded)
    new = results_root(holder) or results_root(Path(holder).absolute())  # traced from inside the results directory
    if old is None or new is None or old == new:
        return Path(recorded)
    return Path(new) / PurePath(recorded).relative_to(old)
