"""Prompt sets: loading the files named in the config's `prompt_sets` (paper §A.4).

A prompt file is one of
- a JSON list of strings: one set, named after its config key;
- a JSON object whose values are lists of strings: one set per member, named `{key}{member}`
  (so `len: resources/prompts/length_sweep.json` gives `len5`, `len10`, ... `len50`), in numeric
  order when every member name is an integer, in file order otherwise;
- a text file (`.txt`): one prompt per non-empty line.
Files must be UTF-8 (a leading byte-order mark is dropped); a JSON object with the same key twice (anywhere in the file) is refused rather
than silently keeping only the last one.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["check_prompts", "load_prompt_file", "load_prompt_sets"]


def check_prompts(prompts: object, path: Path, where: str) -> list[str]:
    """Validate one list of prompts; `where` names the place in the file for error messages."""
    if not isinstance(prompts, list):
        raise ValueError(f"{path}: {where} must be a list of prompt strings; got {type(prompts).__name__}")
    if not prompts:
        raise ValueError(f"{path}: {where} is an empty list; give at least one prompt")
    for index, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise ValueError(f"{path}: {where}[{index}] must be a string; got {type(prompt).__name__} {prompt!r}")
        if not prompt.strip():
            raise ValueError(f"{path}: {where}[{index}] is an empty prompt; remove it or fill it in")
    return list(prompts)


def _reject_duplicate_keys(path: Path) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """An `object_pairs_hook` that builds each JSON object but fails on a repeated key."""

    def build(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                raise ValueError(
                    f"{path}: the JSON object key {key!r} appears more than once, so one of its values "
                    "would be silently dropped; merge the lists or rename one of the keys"
                )
            obj[key] = value
        return obj

    return build


def _read_utf8(path: Path) -> str:
    """The file's text without a leading byte-order mark (an editor's, not the first prompt's); a file that
    is not UTF-8 fails naming the file and the bad byte's offset."""
    data = path.read_bytes()
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as error:
        offset = bom + error.start
        raise ValueError(
            f"{path}: not valid UTF-8 (byte 0x{data[offset]:02x} at byte offset {offset}: "
            f"{error.reason}); prompt files must be UTF-8, so re-save the file as UTF-8"
        ) from error


def load_prompt_file(name: str, path: str | Path) -> dict[str, list[str]]:
    """Prompt sets of one file, named from `name` as described in the module docstring.

    Returns {set name: [prompt, ...]}.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"prompt file for set {name!r} not found: {path}; fix the path under `prompt_sets` in the config"
        )
    text = _read_utf8(path)
    if path.suffix.lower() == ".txt":
        prompts = [line.strip() for line in text.splitlines() if line.strip()]
        if not prompts:
            raise ValueError(f"{path}: no prompts (the file has no non-empty lines)")
        return {name: prompts}
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicate_keys(path))
    except (json.JSONDecodeError, RecursionError) as error:
        where = (
            f"{error.msg} at line {error.lineno}, column {error.colno}"
            if isinstance(error, json.JSONDecodeError)
            else "nested deeper than the JSON parser goes"
        )
        raise ValueError(
            f"{path}: invalid JSON ({where}); "
            "a prompt file is a JSON list of strings, a JSON object of such lists, or a .txt file"
        ) from error
    if isinstance(data, list):
        return {name: check_prompts(data, path, "the top-level list")}
    if isinstance(data, dict):
        if not data:
            raise ValueError(f"{path}: the JSON object has no members; give at least one list of prompts")
        members = list(data)
        if all(member.strip().lstrip("-").isdigit() for member in members):
            members.sort(key=int)
        return {f"{name}{member}": check_prompts(data[member], path, f"member {member!r}") for member in members}
    raise ValueError(
        f"{path}: top-level JSON must be a list of prompt strings or an object of such lists; got {type(data).__name__}"
    )


def load_prompt_sets(sets: Mapping[str, str | Path]) -> dict[str, list[str]]:
    """All prompt sets named in the config's `prompt_sets` (config key -> file).

    Returns {set name: [prompt, ...]} in config order. Two files that would produce the same set
    name fail, naming both files.
    """
    loaded: dict[str, list[str]] = {}
    origin: dict[str, Path] = {}
    for name, path in sets.items():
        for set_name, prompts in load_prompt_file(name, path).items():
            if set_name in loaded:
                raise ValueError(
                    f"prompt set name {set_name!r} is produced by both {origin[set_name]} and {path}; "
                    "rename one of the `prompt_sets` keys in the config"
                )
            loaded[set_name] = prompts
            origin[set_name] = Path(path)
    return loaded


# --- importer for the authors' prompt pickles ---------------------------------------------------
