"""Prompt sets: loading the files named in the config's `prompt_sets` (paper §A.4).

A prompt file is one of
- a JSON list of strings: one set, named after its config key;
- a JSON object whose values are lists of strings: one set per member, named `{key}{member}`
  (so `len: resources/prompts/length_sweep.json` gives `len5`, `len10`, ... `len50`), in numeric
  order when every member name is an integer, in file order otherwise;
- a text file (`.txt`): one prompt per non-empty line, lines ending in \n or \r\n (never at the other breaks
  str.splitlines knows: U+2028, a vertical tab, ... stay inside their prompt).
Files must be UTF-8 (a leading byte-order mark is dropped); a JSON object with the same key twice (anywhere in the file) is refused rather
than silently keeping only the last one. A byte-order mark anywhere else, a lone surrogate (a JSON escape of half a
pair) and a member name that reads as a number but is not written with 0-9 are refused, naming the file and place.
"""

from __future__ import annotations

import codecs
import json
import re
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
        check_text(prompt, path, f"{where}[{index}]")
    return list(prompts)


BOM = "\ufeff"
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_text(text: str, path: Path, where: str) -> None:
    """Refuse what would reach the tokenizer as other text than the file shows: a byte-order mark (U+FEFF, three
    token ids of a BPE) and a lone surrogate (not text: it cannot even be encoded)."""
    if (position := text.find(BOM)) >= 0:
        raise ValueError(
            f"{path}: {where} has U+FEFF (a byte-order mark) at character {position}, left by a second mark or by "
            "files concatenated after saving each with one; remove it (only one mark, at the very start of the "
            "file, is dropped)"
        )
    if (found := _SURROGATE.search(text)) is not None:
        raise ValueError(
            f"{path}: {where} has a lone surrogate U+{ord(found.group()):04X} at character {found.start()} (a JSON "
            "\\u escape of half a surrogate pair), which is no character; write the character itself or the "
            "escapes of both halves"
        )


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


def _text_prompts(text: str, path: Path) -> list[str]:
    """The prompts of a .txt file: its non-empty lines, stripped, split at \n (a \r before it dropped) only."""
    prompts = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if "\r" in line:
            raise ValueError(
                f"{path}: line {number} has a carriage return without a line feed (old Mac line endings?), which "
                "would join its prompts into one; save the file with \\n line endings"
            )
        if line.strip():
            check_text(line.strip(), path, f"line {number}")
            prompts.append(line.strip())
    if not prompts:
        raise ValueError(f"{path}: no prompts (the file has no non-empty lines)")
    return prompts


_DECIMAL = re.compile("-?[0-9]+")


def _check_member_name(member: str, path: Path) -> None:
    """A member name becomes part of a set name: text the file shows, and a number only when written with 0-9."""
    check_text(member, path, f"member name {member!r}")
    if member.strip().removeprefix("-").isnumeric() and not _DECIMAL.fullmatch(member.strip()):
        raise ValueError(
            f"{path}: member {member!r} reads as a number but is not written with 0-9, so neither the numeric "
            "order of the sets nor a prompt length can be read from it; write it with the digits 0-9 (e.g. "
            "'2' for '\u00b2')"
        )


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
        return {name: _text_prompts(text, path)}
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
        for member in members:
            _check_member_name(member, path)
        if all(_DECIMAL.fullmatch(member.strip()) for member in members):
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
