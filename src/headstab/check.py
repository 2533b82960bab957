"""Check a configuration without Snakemake and without running any of it: `python -m headstab.check CONFIG`.

A config file is code, as a Snakefile is: Snakemake reads every `--configfile` itself before headstab sees it,
and a file with `__use_yte__: true` has its `?if`, `?for` and `?expression` keys run as Python while it is read,
under `snakemake -n` too. This command reads the files with headstab's strict loader alone (PyYAML's SafeLoader:
plain data, no templating; Snakemake is not imported) and runs the checks the workflow runs while it plans
(`check_configuration`: the strict re-reading of every file and `--config` value, the schema, the
cross-references, where each architecture's refits come from, the prompt sets), so a config from someone else
can be checked before snakemake reads it. Files layer as `snakemake --configfile A B` layers them, then the
`--config KEY=VALUE` values. Exit status 0: the workflow accepts the configuration; 2: it does not, and the
message names the file or key and the fix.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from headstab.plan import jobs
from headstab.plan.command_line import config_arg_values, merge_config
from headstab.plan.config import SCHEMA_PATH, architecture_spec, load_yaml, selected_architectures, validate_config
from headstab.plan.layout import Layout
from headstab.plan.sources import checkpoint_sources
from headstab.plan.spec import ConfigError
from headstab.plan.yaml_files import bounded_repr
from headstab.prompts.loading import load_prompt_sets
from headstab.sections import architecture_summary

__all__ = ["PromptSetError", "check_configuration", "load_configuration", "main", "prompt_sets", "refusal"]


class PromptSetError(ConfigError):
    """A prompt file cannot be read, or the config names a prompt set that no file gives."""


def refusal(error: ConfigError) -> str:
    """The line with which the workflow and this command refuse a configuration."""
    return f"Invalid {'prompt sets' if isinstance(error, PromptSetError) else 'configuration'}: {error}"


def prompt_sets(config: dict[str, Any]) -> dict[str, list[str]]:
    """{set name: prompts} of a validated config; PromptSetError when a file fails or a key names no set."""
    try:
        sets = load_prompt_sets(config["prompt_sets"])
    except (OSError, ValueError) as error:
        raise PromptSetError(str(error)) from None
    primary = config["analysis"]["promptset"]
    if primary not in sets:
        raise PromptSetError(
            f"config key 'analysis.promptset': {bounded_repr(primary)} is not a prompt set; choose from {list(sets)}"
        )
    unknown = [name for name in jobs.activation_sets(config) or () if name not in sets]
    if unknown:
        raise PromptSetError(
            f"config key 'cache.activation_sets': {bounded_repr(unknown)} are not prompt sets; choose from {list(sets)}"
        )
    return sets


def check_configuration(
    config: dict[str, Any],
    configfiles: Iterable[str | Path] = (),
    config_args: Iterable[str] = (),
    schema_path: str | Path = SCHEMA_PATH,
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Every check of `config` (as Snakemake resolved it from `configfiles` and `config_args`) made while planning.

    Re-reads each file and `--config` value strictly (a key twice, an alias bomb, `__use_yte__`), validates
    `config` (defaults filled in place) and its cross-references, and reads its prompt sets. Returns
    ({architecture: checkpoint source}, {prompt set: prompts}); raises ConfigError (PromptSetError for the prompts).
    """
    config_arg_values(config_args)
    for path in configfiles:
        load_yaml(path)
    validate_config(config, schema_path)
    names = selected_architectures(config)
    sources = checkpoint_sources(config, names)
    results = Layout(config).results
    for name in names:  # the one line of every report caption
        architecture_summary(architecture_spec(config, name), results)
    return sources, prompt_sets(config)


def load_configuration(configfiles: Sequence[str | Path], config_args: Iterable[str] = ()) -> dict[str, Any]:
    """The configuration Snakemake resolves from `--configfile configfiles --config config_args`, read strictly."""
    config: dict[str, Any] = {}
    for path in configfiles:
        merge_config(config, load_yaml(path))
    return merge_config(config, config_arg_values(config_args))


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headstab.check", description=__doc__.splitlines()[0])
    parser.add_argument("configfiles", nargs="+", metavar="CONFIG", help="config files, as given to --configfile")
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE", help="as given to snakemake")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        config = load_configuration(args.configfiles, args.config)
        sources, sets = check_configuration(config, args.configfiles, args.config)
    except ConfigError as error:
        print(refusal(error), file=sys.stderr)
        return 2
    print(
        f"{' '.join(args.configfiles)}: valid; architectures {', '.join(sources)}; prompt sets {', '.join(sets)}; "
        f"results_dir {config['results_dir']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
