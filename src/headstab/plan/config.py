"""Configuration: schema validation, defaults and the architecture registry.

The workflow (workflow/rules/common.smk), the scripts and the tests all read the configuration
through this module, so a misspelt key or an unknown architecture fails the same way everywhere:
in the first second, naming the key and the fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema

from headstab.plan.command_line import coerce_scalar_strings
from headstab.plan.hub_families import family_dimensions, remote_code
from headstab.plan.layout import check_results_dir
from headstab.plan.seed_design import grid_refits
from headstab.plan.spec import (
    ARCHITECTURE_FIELDS,
    BUILT_IN_ARCHITECTURE_DEFAULTS,
    ArchitectureSpec,
    ConfigError,
)
from headstab.plan.yaml_files import (
    MAX_EXPANDED_NODES,
    YamlFileError,
    bounded_copy,
    bounded_repr,
    bounded_text,
    expanded_values,
    load_yaml_file,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"
# A config file's top-level key that makes Snakemake evaluate the file's `?if`, `?for` and `?expression` keys and
# values as Python (YTE templating, snakemake.common.configfile) while reading it.
TEMPLATING_KEY = "__use_yte__"
# Refits of one architecture a seed range {first, last} may ask for: 200 times the paper's 50.
MAX_REFITS = 10_000


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML configuration file strictly (headstab.plan.yaml_files: no key twice), naming the file in every error."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass an existing file with --configfile")
    try:
        data = load_yaml_file(path)
    except YamlFileError as err:
        raise ConfigError(f"config file {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys, got {type(data).__name__}")
    if TEMPLATING_KEY in data:
        raise ConfigError(
            f"config file {path}: key '{TEMPLATING_KEY}' makes Snakemake run the file's Python expressions (YTE "
            "templating) while it reads the file, before headstab sees it (under snakemake they have run already); "
            "headstab accepts no config that is code: delete the key and write the values out, and check a config "
            "from others with `python -m headstab.check FILE` before giving it to snakemake"
        )
    return data


def _with_defaults(validator_class: type) -> type:
    """jsonschema validator that fills `default` values of plain `properties` while validating."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, subschema in properties.items():
                if "default" in subschema and key not in instance:
                    default = subschema["default"]
                    instance[key] = dict(default) if isinstance(default, dict) else default
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _key_path(error: jsonschema.ValidationError) -> str:
    return bounded_text(".".join(str(p) for p in error.absolute_path)) or "(top level)"


def _describe(error: jsonschema.ValidationError, schema: dict[str, Any]) -> str:
    where = _key_path(error)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(map(str, set(error.instance) - set(allowed)))
        shown = extra if len(extra) <= 6 else extra[:5]
        hints = []
        for key in shown:
            close = difflib.get_close_matches(key, allowed, n=1)
            hints.append(bounded_repr(key) + (f" (did you mean '{close[0]}'?)" if close else ""))
        if len(shown) < len(extra):
            hints.append(f"and {len(extra) - len(shown):,} more")
        return f"config key '{where}': unknown key {', '.join(hints)}; allowed keys: {', '.join(allowed)}"
    if error.validator == "oneOf" and error.context:
        # A type mismatch against the other alternatives says little; prefer the alternative that matched in type.
        best = error
        while best.validator == "oneOf" and best.context:  # and down a oneOf inside it (run.seeds: null or seeds)
            best = ([e for e in best.context if e.validator not in ("type", "const")] or list(best.context))[0]
        expected = error.schema.get("description", "") if isinstance(error.schema, dict) else ""
        hint = f"; expected {expected}" if expected else ""
        return f"config key '{where}': {bounded_repr(error.instance)} is not valid ({bounded_text(best.message)}{hint})"
    description = error.schema.get("description") if isinstance(error.schema, dict) else None
    hint = f" ({description})" if description else ""
    return f"config key '{where}': {bounded_text(error.message)}{hint}"


def validate_config(config: dict[str, Any], schema_path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """Validate `config` against the schema (filling defaults in place) and check cross-references.

    Returns the same dict. Raises ConfigError naming the first bad key and the fix.
    """
    _check_size(config)
    schema = load_yaml_file(schema_path)
    coerce_scalar_strings(config, schema, schema)
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    # jsonschema prints a bad value whole into its message: validate a copy whose values print bounded
    errors = sorted(
        validator.iter_errors(bounded_copy(config)), key=lambda e: (len(list(e.absolute_path)), str(e.absolute_path))
    )
    if errors:
        raise ConfigError(_describe(errors[0], schema))
    for _ in validator.iter_errors(config):  # valid: this pass fills the defaults into `config` itself
        pass
    _check_references(config)
    return config


def _check_size(config: dict[str, Any]) -> None:
    """ConfigError naming the key whose value, its aliases expanded, holds more than MAX_EXPANDED_NODES values.

    Snakemake reads `--config` values (and files) keeping an alias's values shared, so 400 bytes can stand for
    billions of values that validating would walk one by one.
    """
    size = expanded_values(config)
    if size <= MAX_EXPANDED_NODES:
        return
    where, value = [], config
    while isinstance(value, dict) and value:  # down to the deepest key that holds too many
        sizes = {key: expanded_values(item) for key, item in value.items()}
        key = max(sizes, key=sizes.__getitem__)
        if sizes[key] <= MAX_EXPANDED_NODES:
            break
        where.append(str(key))
        size, value = sizes[key], value[key]
    key = bounded_text(".".join(where)) or "(top level)"
    raise ConfigError(
        f"config key '{key}': its value holds {size:,} values once its aliases (*name) are "
        f"expanded, more than the {MAX_EXPANDED_NODES:,} a headstab configuration may hold "
        "(headstab.plan.yaml_files.MAX_EXPANDED_NODES); write the values out instead of nesting aliases"
    )


def _closest(name: str, valid: Iterable[str]) -> str:
    valid = sorted(valid)
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return f"{hint} Valid names: {', '.join(valid)}"


def _seeds_key(config: dict[str, Any], name: str) -> str:
    """The config key that set architecture `name`'s seeds."""
    if config["run"].get("seeds") is not None:
        return "run.seeds"
    if "seeds" in config["architectures"][name]:
        return f"architectures.{name}.seeds"
    return "architecture_defaults.seeds"


def _check_optimizer_pairs(config: dict[str, Any]) -> None:
    """analysis.optimizer_pairs names architectures of the registry."""
    architectures = config["architectures"]
    for first, second in config.get("analysis", {}).get("optimizer_pairs", {}).items():
        for member in (first, second):
            if member not in architectures:
                raise ConfigError(
                    f"config key 'analysis.optimizer_pairs': unknown architecture {bounded_repr(member)}.{_closest(member, architectures)}"
                )


def _check_tokenizers(config: dict[str, Any]) -> None:
    """A trained tokenizer's corpus exists; a local one is a directory that runs no code of its own."""
    for tok_name, tokenizer in config["tokenizers"].items():
        if tokenizer["source"] == "train" and tokenizer["corpus"] not in config["corpora"]:
            raise ConfigError(
                f"config key 'tokenizers.{tok_name}.corpus': unknown corpus {bounded_repr(tokenizer['corpus'])}."
                f"{_closest(tokenizer['corpus'], config['corpora'])}"
            )
        planted = config["corpora"].get(tokenizer.get("corpus"), {}).get("planted_repeats")
        if tokenizer["source"] == "train" and planted is not None:
            if tokenizer.get("model", "bpe") != "words":
                raise ConfigError(
                    f"config key 'tokenizers.{tok_name}.model': corpus {bounded_repr(tokenizer['corpus'])} is planted "
                    "repeats of a closed vocabulary, one token per word; set `model: words`"
                )
            if planted["words"] + 1 > tokenizer["vocab_size"]:
                raise ConfigError(
                    f"config key 'tokenizers.{tok_name}.vocab_size': {tokenizer['vocab_size']} ids cannot hold the "
                    f"{planted['words']} words of corpus {bounded_repr(tokenizer['corpus'])} and <|endoftext|>; raise "
                    f"it to {planted['words'] + 1}"
                )
            for corpus_name, corpus in config["corpora"].items():
                words = corpus.get("planted_repeats", {}).get("words", 0)
                if corpus["tokenizer"] == tok_name and words > planted["words"]:
                    raise ConfigError(
                        f"config key 'corpora.{corpus_name}.planted_repeats.words': {words} words, but tokenizer "
                        f"'{tok_name}' knows the {planted['words']} of corpus {bounded_repr(tokenizer['corpus'])} "
                        "and would read the others as <|endoftext|>; lower it or raise that corpus's words"
                    )
        if tokenizer["source"] == "train" and tokenizer.get("model", "bpe") == "bpe" and tokenizer["vocab_size"] < 260:
            raise ConfigError(
                f"config key 'tokenizers.{tok_name}.vocab_size': {tokenizer['vocab_size']} is below the 260 a byte-level "
                "BPE takes (256 bytes, <|endoftext|> and merges); raise it, or set `model: words` for a corpus of a "
                "closed vocabulary"
            )
        if tokenizer["source"] == "local" and not Path(tokenizer["path"]).is_dir():
            raise ConfigError(
                f"config key 'tokenizers.{tok_name}.path': {bounded_repr(tokenizer['path'])} is not a directory; point it at a "
                "directory saved with tokenizer.save_pretrained"
            )
        if tokenizer["source"] == "local":
            if (reason := remote_code(tokenizer["path"])) is not None:
                raise ConfigError(f"config key 'tokenizers.{tok_name}.path': {reason}")


def _check_references(config: dict[str, Any]) -> None:
    check_results_dir(config["results_dir"])
    architectures = config["architectures"]
    wanted = config["run"]["architectures"]
    if wanted != "all":
        for name in wanted:
            if name not in architectures:
                raise ConfigError(
                    f"config key 'run.architectures': unknown architecture {bounded_repr(name)}.{_closest(name, architectures)}"
                )
    act_fn = config.get("analysis", {}).get("act_fn")
    for name in selected_architectures(config):
        source = {
            **config["architecture_defaults"],
            **config["architectures"][name],
            **config.get("architecture_overrides", {}).get(name, {}),
        }.get("source")
        if act_fn is not None and source == "hub_family":
            raise ConfigError(
                f"config key 'analysis.act_fn': {act_fn} applies to our model's refits (trained here or published), "
                f"but architecture '{name}' is a hub family, which runs with its own activation; set analysis.act_fn "
                "to null or leave the family out of run.architectures"
            )
        spec = architecture_spec(config, name)
        if spec.tokenizer not in config["tokenizers"]:
            raise ConfigError(
                f"config key 'architectures.{name}.tokenizer': unknown tokenizer {bounded_repr(spec.tokenizer)}."
                f"{_closest(spec.tokenizer, config['tokenizers'])}"
            )
        if spec.corpus not in config["corpora"]:
            raise ConfigError(
                f"config key 'architectures.{name}.corpus': unknown corpus {bounded_repr(spec.corpus)}."
                f"{_closest(spec.corpus, config['corpora'])}"
            )
        if len(spec.seeds) < 2:
            raise ConfigError(
                f"config key '{_seeds_key(config, name)}': architecture '{name}' gets {len(spec.seeds)} seed "
                f"{list(spec.seeds)}, but stability compares independently seeded refits; give at least 2 seeds "
                "(e.g. [1, 2] or {first: 1, last: 2})"
            )
        corpus_tokens = config["corpora"][spec.corpus].get("n_tokens")
        if spec.n_tokens is not None and corpus_tokens is not None and spec.n_tokens > corpus_tokens * spec.epochs:
            raise ConfigError(
                f"config key 'architectures.{name}.n_tokens' (or architecture_defaults.n_tokens): {spec.n_tokens:,} "
                f"tokens is more than corpus '{spec.corpus}' holds ({corpus_tokens:,}, corpora.{spec.corpus}.n_tokens, "
                f"x{spec.epochs} epochs); lower n_tokens or raise corpora.{spec.corpus}.n_tokens"
            )
        if spec.seq_len > spec.n_ctx:
            raise ConfigError(
                f"config key 'architectures.{name}.seq_len': {spec.seq_len} exceeds n_ctx {spec.n_ctx}; "
                "lower seq_len or raise n_ctx"
            )
        tokenizer = config["tokenizers"][spec.tokenizer]
        if tokenizer["source"] == "train" and tokenizer["vocab_size"] > spec.d_vocab:
            raise ConfigError(
                f"config key 'tokenizers.{spec.tokenizer}.vocab_size': {tokenizer['vocab_size']} is larger than "
                f"d_vocab {spec.d_vocab} of architecture '{name}'; lower vocab_size or raise d_vocab"
            )
    for corpus_name, corpus in config["corpora"].items():
        if corpus["tokenizer"] not in config["tokenizers"]:
            raise ConfigError(
                f"config key 'corpora.{corpus_name}.tokenizer': unknown tokenizer {bounded_repr(corpus['tokenizer'])}."
                f"{_closest(corpus['tokenizer'], config['tokenizers'])}"
            )
        if corpus["source"] == "local" and not Path(corpus["path"]).exists():
            raise ConfigError(
                f"config key 'corpora.{corpus_name}.path': {bounded_repr(corpus['path'])} does not exist; point it at a "
                "save_to_disk directory or text/jsonl/parquet files (relative paths start at the repository root)"
            )
    _check_tokenizers(config)
    _check_optimizer_pairs(config)
    heldout = config.get("analysis", {}).get("heldout_corpus")
    if heldout is not None and heldout not in config["corpora"]:
        raise ConfigError(
            f"config key 'analysis.heldout_corpus': unknown corpus {bounded_repr(heldout)}.{_closest(heldout, config['corpora'])}"
        )
    for set_name, path in config["prompt_sets"].items():
        if not Path(path).is_file():
            raise ConfigError(f"config key 'prompt_sets.{set_name}': prompt file {bounded_repr(path)} does not exist")


def _expand_seeds(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, dict):
        if value["last"] < value["first"]:
            raise ConfigError(f"config key '{where}': last ({value['last']}) is below first ({value['first']})")
        count = value["last"] - value["first"] + 1
        if count > MAX_REFITS:
            raise ConfigError(
                f"config key '{where}': {{first: {value['first']}, last: {value['last']}}} asks for {count:,} refits, "
                f"more than the {MAX_REFITS:,} headstab plans for one architecture (each a model to train); lower last"
            )
        return tuple(range(value["first"], value["last"] + 1))
    return tuple(int(s) for s in value)


def architecture_spec(config: dict[str, Any], name: str) -> ArchitectureSpec:
    """The registry entry `name` merged over `architecture_defaults`, `architecture_overrides[name]` over both,
    with the run's seed override."""
    if name not in config["architectures"]:
        raise ConfigError(f"unknown architecture {bounded_repr(name)}.{_closest(name, config['architectures'])}")
    merged = {
        **BUILT_IN_ARCHITECTURE_DEFAULTS,
        **config["architecture_defaults"],
        **config["architectures"][name],
        **config.get("architecture_overrides", {}).get(name, {}),
    }
    if merged.get("source") == "hub_family":  # dimensions from the model's config.json, not the defaults
        merged.update(family_dimensions(config, name))
    missing = [key for key in ARCHITECTURE_FIELDS if key not in merged]
    if missing:
        raise ConfigError(
            f"config key 'architectures.{name}': missing {', '.join(missing)}; set them in the entry or in "
            "architecture_defaults"
        )
    override = config["run"].get("seeds")
    merged["seeds"] = _expand_seeds(
        override if override is not None else merged["seeds"],
        "run.seeds" if override is not None else f"architectures.{name}.seeds",
    )
    grid = config["architectures"][name].get("seed_grid")
    if grid:  # init seed x data-order seed, refits named {init}-{data} (headstab.plan.seed_design)
        if merged.get("source", "train") != "train":
            raise ConfigError(f"config key 'architectures.{name}.seed_grid': only refits trained here have a data seed")
        if merged["data_order"] != "per_seed":
            raise ConfigError(
                f"config key 'architectures.{name}.data_order': a seed_grid names each refit's data seed, so its "
                "data order cannot be shared; leave data_order at per_seed (or unset) for this architecture"
            )
        try:
            merged["seeds"] = grid_refits(grid["init_seeds"], grid["data_seeds"], grid.get("ulp_twins", ()))
        except ValueError as error:
            raise ConfigError(f"config key 'architectures.{name}.seed_grid.ulp_twins': {error}") from None
    if merged["seq_len"] is None:
        merged["seq_len"] = merged["n_ctx"]
    merged["snapshot_steps"] = tuple(sorted(int(step) for step in merged["snapshot_steps"]))
    values = {key: merged[key] for key in ARCHITECTURE_FIELDS}
    return ArchitectureSpec(name=name, **values)


def selected_architectures(config: dict[str, Any]) -> list[str]:
    """Architectures this run builds, in registry order."""
    wanted = config["run"]["architectures"]
    if wanted == "all":
        return list(config["architectures"])
    return list(wanted)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read and validate a configuration file (defaults filled in)."""
    return validate_config(load_yaml(path))
