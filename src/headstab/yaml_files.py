"""Every YAML file headstab reads (configs, presets, the schema, resources/paper_values.yaml), read one strict way.

PyYAML's `safe_load` keeps the last of two equal keys in a mapping and says nothing, so `lr` given
twice runs with whichever came second. `load_yaml_file` refuses that, naming the file, the key and
both lines. Importable at parse time (PyYAML only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *base`: keys written beside it override the merged ones on purpose


class YamlFileError(ValueError):
    """A YAML file is unreadable, not YAML, or holds a key twice; the message starts with the file's name."""


class StrictLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader (plain data only) for a document that `load_yaml_text` has checked first."""


def _key_path(parent: str, key: Any) -> str:
    return f"{parent}.{key}" if parent else str(key)


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
                    f"{loader.name}: key '{_key_path(where, key)}' is given twice, on line {lines[key]} and line "
                    f"{line}; YAML would keep only the second value without a word: delete one of them"
                )
            lines[key] = line
            _refuse_duplicate_keys(loader, value_node, _key_path(where, key), seen)


def load_yaml_text(text: str, source: str) -> Any:
    """The data of one YAML document `text`, read from `source` (named in every error).

    Raises YamlFileError for invalid YAML and for a mapping with the same key twice.
    """
    loader = StrictLoader(text)
    loader.name = source  # what PyYAML's error marks print: `in "<source>", line 3, column 1`
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(loader, node, "", set())
        return loader.construct_document(node)
    except yaml.YAMLError as error:
        raise YamlFileError(f"{source} is not valid YAML: {error}") from error
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
