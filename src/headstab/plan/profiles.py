"""The Snakemake profiles a run read (`--profile`, `$SNAKEMAKE_PROFILE`, `--workflow-profile` and the default
`profiles/default/`), found as Snakemake 9 finds them (snakemake.cli.parse_args, get_profile_dir), so that a
templated one is refused: Snakemake runs a profile with `__use_yte__: true` through YTE, which evaluates its
`?if`, `?for` and `?expression` keys as Python, before any rule file runs; the rule files can only stop the run.
The templated profiles the workflow ships (slurm/, profiles/workstation/) are its code, as the Snakefile is, and
are not refused; any other profile, in the checkout or not, is."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from headstab.plan.config import TEMPLATING_KEY
from headstab.plan.spec import ConfigError
from headstab.plan.yaml_files import YamlFileError, load_yaml_file

__all__ = ["SHIPPED_PROFILES", "profile_files", "refuse_templated_profiles"]

# The profiles the workflow ships that read settings through YTE: the workflow's code, as its Snakefile is.
SHIPPED_PROFILES = ("slurm/config.yaml", "profiles/workstation/config.yaml")

ProfileResolver = Callable[[str], "tuple[Path, Path] | None"]


def _snakemake_resolver(profile: str) -> tuple[Path, Path] | None:
    from snakemake.cli import get_profile_dir  # Snakemake's own search: the working directory, then its config dirs

    return get_profile_dir(profile)


def _profile_arguments(argv: Sequence[str]) -> argparse.Namespace:
    """The options of `argv` that choose profiles; every other option is left to Snakemake."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--profile", action="append")
    parser.add_argument("--workflow-profile")
    parser.add_argument("--snakefile", "-s")
    return parser.parse_known_args(list(argv))[0]


def profile_files(
    argv: Sequence[str],
    environ: Mapping[str, str],
    snakefile: str | Path,
    resolve: ProfileResolver = _snakemake_resolver,
) -> list[Path]:
    """The profile files a `snakemake` run with these command-line arguments and environment reads, in
    Snakemake's order: each `--profile` (else `$SNAKEMAKE_PROFILE`; `none` turns both off), then the workflow
    profile (`--workflow-profile`, else `default`, `profiles/default` or `profiles/default` beside the Snakefile,
    the first that exists; `--workflow-profile none` turns it off). Profiles that resolve to no file are left out
    (Snakemake refuses them)."""
    args = _profile_arguments(argv)
    profiles = args.profile if args.profile is not None else [environ.get("SNAKEMAKE_PROFILE")]
    profiles = [] if profiles in ([None], ["none"]) else profiles
    candidates: list[str | Path] = list(profiles)
    if args.workflow_profile != "none":
        workflow_profile = Path(args.workflow_profile) if args.workflow_profile else None
        if workflow_profile is None or not workflow_profile.is_file():
            name = workflow_profile or Path("default")
            found = [
                p for p in (name, Path("profiles") / name, Path(snakefile).parent / "profiles" / name) if p.exists()
            ]
            workflow_profile = found[0] if found else None
        if workflow_profile is not None:
            candidates.append(workflow_profile)
    files = []
    for profile in candidates:
        entry = resolve(str(profile))
        if entry is not None:
            files.append(Path(entry[1]))
    return files


def refuse_templated_profiles(files: Sequence[Path], workflow_dir: str | Path) -> None:
    """ConfigError naming the first profile file whose top level holds `__use_yte__` (or that cannot be read as
    plain YAML), with the fix; the profiles the workflow ships (SHIPPED_PROFILES under `workflow_dir`) excepted."""
    shipped = {(Path(workflow_dir) / name).resolve() for name in SHIPPED_PROFILES}
    for path in files:
        if Path(path).resolve() in shipped:
            continue
        try:
            data = load_yaml_file(path)
        except YamlFileError as error:
            raise ConfigError(f"profile {error}") from error
        if isinstance(data, dict) and TEMPLATING_KEY in data:
            raise ConfigError(
                f"profile {path}: key '{TEMPLATING_KEY}' makes Snakemake run the profile's Python expressions (YTE "
                "templating) while it reads the profile, before headstab sees it (they have run already); headstab "
                "accepts no profile that is code but the ones it ships (slurm/, profiles/workstation/): delete the "
                "key and write the settings out"
            )
