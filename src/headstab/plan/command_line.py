"""Values given with `snakemake --config`: read strictly, and turned into the types the config schema asks for.

Snakemake parses a nested `--config` value with YAML's BaseLoader, so in
`--config 'run={architectures: [l4_h8], seeds: [1, 2, 3]}'` every scalar arrives as a string; it keeps the
last of a key given twice in a value and never expands an alias (the values stay shared), so `config_arg_values`
reads each value again, refusing both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from headstab.plan.spec import ConfigError
from headstab.plan.yaml_files import YamlFileError, load_yaml_value

NULL_WORDS = ("null", "Null", "NULL", "~")  # YAML's spellings of null


def _alternatives(schema: Any, root: dict[str, Any]) -> list[dict[str, Any]]:
    """`schema` with its local `$ref`s followed and its `oneOf`/`anyOf` branches flattened."""
    if not isinstance(schema, dict):
        return []
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return _alternatives(target, root)
    branches = schema.get("oneOf", []) + schema.get("anyOf", [])
    if branches:
        return [alt for branch in branches for alt in _alternatives(branch, root)]
    return [schema]


def _types(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type")
    return {kind} if isinstance(kind, str) else set(kind or ())


def _scalar_from_string(text: str, allowed: set[str]) -> Any:
    """`text` as the int, float, bool or null that `allowed` (JSON schema types, no string) asks for, else unchanged."""
    stripped = text.strip()
    if allowed & {"integer", "number"} and re.fullmatch(r"[-+]?\d+", stripped):
        return int(stripped)
    if "number" in allowed:
        try:
            return float(stripped)
        except ValueError:
            pass
    if "boolean" in allowed and stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    if "null" in allowed and stripped in NULL_WORDS:
        return None
    return text


def coerce_scalar_strings(value: Any, schema: Any, root: dict[str, Any]) -> Any:
    """Turn strings into the numbers, booleans or nulls the schema asks for, in place; returns `value`.

    Snakemake parses a nested `--config` value with YAML's BaseLoader, so in
    `--config 'run={architectures: [l4_h8], seeds: [1, 2, 3]}'` every scalar arrives as a string
    ('1', '2', '3'). A string is converted only where the schema does not allow a string; anything
    that does not convert is left for the schema to reject with its usual message.
    """
    alternatives = _alternatives(schema, root)
    if isinstance(value, dict):
        for alt in alternatives:
            if "properties" in alt or "additionalProperties" in alt:
                for key, item in value.items():
                    sub = alt.get("properties", {}).get(key, alt.get("additionalProperties"))
                    value[key] = coerce_scalar_strings(item, sub, root)
                break
    elif isinstance(value, list):
        for alt in alternatives:
            if "items" in alt:
                value[:] = [coerce_scalar_strings(item, alt["items"], root) for item in value]
                break
    elif isinstance(value, str) and alternatives:
        if all(_types(alt) for alt in alternatives):  # an untyped branch (enum, const) may want the string
            allowed = set().union(*(_types(alt) for alt in alternatives))
            if "string" not in allowed:
                return _scalar_from_string(value, allowed)
            if "null" in allowed and value.strip() in NULL_WORDS:  # `heldout_corpus: null` on the command line
                return None
    return value


def _config_arg_value(text: str, key: str) -> Any:
    """One `--config key=text` value as snakemake.cli.parse_config reads it: empty is None, then an int, a float,
    True or False, then YAML's BaseLoader, else the string."""
    if text == "":
        return None
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    if text in ("True", "False"):
        return text == "True"
    return load_yaml_value(text, key)


def config_arg_values(entries: Iterable[str]) -> dict[str, Any]:
    """{key: value} of `snakemake --config KEY=VALUE ...`, a key given again merged as Snakemake merges it.

    Raises ConfigError naming the key for a value that gives a mapping key twice (Snakemake would keep the last
    without a word) or whose aliases expand to more than MAX_EXPANDED_NODES values.
    """
    values: dict[str, Any] = {}
    for entry in entries:
        key, assigned, text = entry.partition("=")
        if not assigned:  # Snakemake refuses it before it reads any config
            continue
        try:
            merge_config(values, {key: _config_arg_value(text.strip("'\""), key)})
        except YamlFileError as error:
            raise ConfigError(str(error)) from None
    return values


def merge_config(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`config` updated in place by `overrides` as Snakemake layers configs (snakemake.utils.update_config): a
    mapping merges key by key into the mapping it replaces, any other value replaces. Returns `config`."""
    for key, value in overrides.items():
        if isinstance(value, dict):
            base = config.get(key)
            config[key] = merge_config(base if isinstance(base, dict) else {}, value)
        else:
            config[key] = value
    return config
