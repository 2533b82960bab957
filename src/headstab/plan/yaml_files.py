"""Every YAML file headstab reads (configs, presets, the schema, resources/paper_values.yaml), read one strict way,
and the bounded repr with which every error message prints a config value.

PyYAML's `safe_load` keeps the last of two equal keys in a mapping and says nothing, so `lr` given
twice runs with whichever came second. `load_yaml_file` refuses that, naming the file, the key and
both lines. It also refuses a file whose aliases (`*name`) expand to more than MAX_EXPANDED_NODES
values: a 2 KB file of nested aliases stands for billions of values, which validating or printing
would walk one by one. `bounded_repr` keeps any value printed in an error under MAX_REPR_CHARS.
Importable at parse time (PyYAML only).
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any

import yaml

MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *base`: keys written beside it override the merged ones on purpose
# Values (mappings, lists, scalars and keys) of one file with every alias expanded: about 100 times what the
# largest shipped file (the schema) holds.
MAX_EXPANDED_NODES = 100_000
MAX_REPR_CHARS = 200
_REPR = reprlib.Repr()  # Python 3.11's Repr takes no arguments
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple, _REPR.maxset = 3, 6, 6, 6, 6
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 120, 120, 40


def bounded_text(text: str, limit: int = MAX_REPR_CHARS) -> str:
    """`text`, or its first characters and how long it was when it is longer than `limit`."""
    return text if len(text) <= limit else f"{text[: limit - 30]}... ({len(text):,} characters)"


def bounded_repr(value: Any, limit: int = MAX_REPR_CHARS) -> str:
    """repr(value) in at most about `limit` characters: deep levels, long lists and long strings elided with '...'.

    Walks little more of `value` than it prints (a dict's keys are sorted), so a list of a billion shared
    items costs nothing.
    """
    return bounded_text(_REPR.repr(value), limit)


class YamlFileError(ValueError):
    """A YAML file is unreadable, not YAML, or holds a key twice; the message starts with the file's name."""


class StrictLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader (plain data only) for a document that `load_yaml_text` has checked first."""


def _key_path(parent: str, key: Any) -> str:
    return f"{parent}.{key}" if parent else str(key)


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Values of `node` with every alias expanded; each distinct node is counted once and its size reused."""
    if id(node) in sizes:
        return sizes[id(node)]
    sizes[id(node)] = 1  # a node inside itself (`&a [*a]`) counts once, not forever
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(item, sizes) for item in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(key, sizes) + _expanded_size(value, sizes) for key, value in node.value)
    sizes[id(node)] = size
    return size


def _refuse_duplicate_keys(loader: StrictLoader, node: yaml.Node, where: str, seen: set[int]) -> None:
    """YamlFileError at the first mapping that gives a key twice; every node is visited once (aliases share)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _refuse_duplicate_keys(loader, item, f"{where}[{index}]", seen)
    elif isinstance(node, yaml.MappingNode):
        lines: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                _refuse_duplicate_keys(loader, value_node, where, seen)
                continue
            key = loader.construct_object(key_node)  # `lr`, "lr" and 'lr' are the same key
            line = key_node.start_mark.line + 1
            if key in lines:
                raise YamlFileError(
                    f"{loader.name}: key '{bounded_text(_key_path(where, key))}' is given twice, on line {lines[key]} and line "
                    f"{line}; YAML would keep only the second value without a word: delete one of them"
                )
            lines[key] = line
            _refuse_duplicate_keys(loader, value_node, _key_path(where, key), seen)


def load_yaml_text(text: str, source: str) -> Any:
    """The data of one YAML document `text`, read from `source` (named in every error).

    Raises YamlFileError for invalid YAML, for a mapping with the same key twice and for aliases that
    expand to more than MAX_EXPANDED_NODES values.
    """
    loader = StrictLoader(text)
    loader.name = source  # what PyYAML's error marks print: `in "<source>", line 3, column 1`
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, {})
        if size > MAX_EXPANDED_NODES:
            raise YamlFileError(
                f"{source}: its aliases (*name) expand to {size:,} values, more than the {MAX_EXPANDED_NODES:,} a "
                "headstab YAML file may hold (headstab.plan.yaml_files.MAX_EXPANDED_NODES); write the values out "
                "instead of nesting aliases"
            )
        _refuse_duplicate_keys(loader, node, "", set())
        return loader.construct_document(node)
    except yaml.YAMLError as error:
        raise YamlFileError(f"{source} is not valid YAML: {error}") from error
    except RecursionError as error:
        raise YamlFileError(f"{source} nests mappings or lists too deeply to read; flatten it") from error
    finally:
        loader.dispose()


def load_yaml_file(path: str | Path) -> Any:
    """`load_yaml_text` of the UTF-8 file `path`; YamlFileError naming it when it cannot be read."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise YamlFileError(f"{path} cannot be read ({error}); give a readable UTF-8 YAML file") from error
    return load_yaml_text(text, str(path))
