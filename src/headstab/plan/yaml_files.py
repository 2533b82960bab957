"""Every YAML file headstab reads (configs, presets, the schema, resources/paper_values.yaml), read one strict way,
and the bounded repr with which every error message prints a config value.

PyYAML's `safe_load` keeps the last of two equal keys in a mapping and says nothing, so `lr` given
twice runs with whichever came second. `load_yaml_file` refuses that, naming the file, the key and
both lines. It also refuses a file whose aliases (`*name`) expand to more than MAX_EXPANDED_NODES
values: a 2 KB file of nested aliases stands for billions of values, which validating or printing
would walk one by one. `load_yaml_value` reads a `snakemake --config` value the way Snakemake does
(YAML's BaseLoader) with the same two checks. `bounded_repr` keeps any value printed in an error under
MAX_REPR_CHARS, and `expanded_values` and `bounded_copy` keep a configuration from Snakemake (which shares, and
so never expands, the values of aliases) from being walked or printed value by value.
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
_MAX_INT_BITS = 4000 * 3  # Python refuses to print an int of more than 4,300 digits (about 14,000 bits)


def _repr_int(value: int, level: int) -> str:
    if value.bit_length() > _MAX_INT_BITS:
        return f"<an integer of {value.bit_length():,} bits>"
    return reprlib.Repr.repr_int(_REPR, value, level)


_REPR.repr_int = _repr_int


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


class StrictBaseLoader(yaml.BaseLoader):
    """YAML's BaseLoader (every scalar a string), as Snakemake reads a `--config` value, for `load_yaml_value`."""


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
        lines: dict[Any, yaml.Mark] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                _refuse_duplicate_keys(loader, value_node, where, seen)
                continue
            key = loader.construct_object(key_node)  # `lr`, "lr" and 'lr' are the same key
            mark = key_node.start_mark
            if key in lines:
                first = lines[key]
                places = (
                    f"on line {first.line + 1} and line {mark.line + 1}"
                    if first.line != mark.line
                    else f"on line {mark.line + 1}, at columns {first.column + 1} and {mark.column + 1}"
                )
                raise YamlFileError(
                    f"{loader.name}: key '{bounded_text(_key_path(where, key))}' is given twice, {places}; YAML would "
                    "keep only the second value without a word: delete one of them"
                )
            lines[key] = mark
            _refuse_duplicate_keys(loader, value_node, _key_path(where, key), seen)


def _check_document(loader: yaml.BaseLoader, node: yaml.Node, where: str, what: str = "YAML file") -> None:
    """YamlFileError when the aliases of `node` expand past MAX_EXPANDED_NODES or a mapping gives a key twice."""
    size = _expanded_size(node, {})
    if size > MAX_EXPANDED_NODES:
        raise YamlFileError(
            f"{loader.name}: its aliases (*name) expand to {size:,} values, more than the {MAX_EXPANDED_NODES:,} a "
            f"headstab {what} may hold (headstab.plan.yaml_files.MAX_EXPANDED_NODES); write the values out "
            "instead of nesting aliases"
        )
    _refuse_duplicate_keys(loader, node, where, set())


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
        _check_document(loader, node, "")
        try:
            return loader.construct_document(node)
        except ValueError as error:  # an integer of more than 4,300 digits
            raise YamlFileError(f"{source} holds a value Python cannot read ({error}); shorten it") from error
    except yaml.YAMLError as error:
        raise YamlFileError(f"{source} is not valid YAML: {error}") from error
    except RecursionError as error:
        raise YamlFileError(f"{source} nests mappings or lists too deeply to read; flatten it") from error
    finally:
        loader.dispose()


def load_yaml_value(text: str, key: str) -> Any:
    """`snakemake --config key=text`'s value as Snakemake reads it (YAML's BaseLoader: every scalar a string), or
    `text` itself where that is no YAML (Snakemake then keeps the string).

    Raises YamlFileError, naming `key`, for a mapping with the same key twice and for aliases that expand to more
    than MAX_EXPANDED_NODES values.
    """
    loader = StrictBaseLoader(text)
    loader.name = f"--config {bounded_text(key)}=..."
    try:
        node = loader.get_single_node()
        if node is None:
            return text
        _check_document(loader, node, key, "--config value")
        return loader.construct_document(node)
    except (yaml.YAMLError, RecursionError):  # Snakemake's BaseLoader fails the same way and keeps the string
        return text
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


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [item for pair in value.items() for item in pair]
    return list(value) if isinstance(value, list) else []


def expanded_values(data: Any) -> int:
    """Values (mappings, lists, scalars and keys) of `data` with every shared list or mapping counted wherever it
    appears: what walking it item by item visits. Each distinct container is walked once, without recursion."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        value, walked = stack.pop()
        if not isinstance(value, (dict, list)):
            continue
        if walked:
            sizes[id(value)] = 1 + sum(sizes.get(id(child), 1) for child in _children(value))
        elif id(value) not in sizes:
            sizes[id(value)] = 1  # a list inside itself counts once, not forever
            stack.append((value, True))
            stack.extend((child, False) for child in _children(value))
    return sizes.get(id(data), 1)


class BoundedStr(str):
    """A str whose repr is `bounded_repr`'s (what jsonschema prints into its messages)."""

    def __repr__(self) -> str:
        return bounded_repr(self)


class BoundedList(list):
    """A list whose repr is `bounded_repr`'s."""

    def __repr__(self) -> str:
        return bounded_repr(self)


class BoundedDict(dict):
    """A dict whose repr is `bounded_repr`'s."""

    def __repr__(self) -> str:
        return bounded_repr(self)


# reprlib finds a type's printer by its name: the bounded copies print as what they copy, level by level.
_REPR.repr_BoundedStr, _REPR.repr_BoundedList, _REPR.repr_BoundedDict = _REPR.repr_str, _REPR.repr_list, _REPR.repr_dict


def bounded_copy(data: Any, copies: dict[int, Any] | None = None) -> Any:
    """`data` with every str, list and dict replaced by its Bounded* subclass, shared values shared in the copy.

    A validator's message that prints a value (jsonschema's `f"{instance!r} is not ..."`) then holds at most
    about MAX_REPR_CHARS characters of it, however large the value is.
    """
    copies = {} if copies is None else copies
    if isinstance(data, str):
        return BoundedStr(data)
    if not isinstance(data, (dict, list)):
        return data
    if id(data) in copies:
        return copies[id(data)]
    if isinstance(data, dict):
        copy: Any = BoundedDict()
        copies[id(data)] = copy
        copy.update((bounded_copy(key, copies), bounded_copy(value, copies)) for key, value in data.items())
    else:
        copy = BoundedList()
        copies[id(data)] = copy
        copy.extend(bounded_copy(item, copies) for item in data)
    return copy
