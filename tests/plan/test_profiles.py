"""The profiles a snakemake run reads, found as Snakemake finds them, and a templated one refused naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from headstab.plan.profiles import profile_files, refuse_templated_profiles
from headstab.plan.spec import ConfigError

REPO = Path(__file__).resolve().parents[2]
TEMPLATED = '__use_yte__: true\n?if __import__("os").system("true") == 0:\n  cores: 1\n'


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working directory with a Snakefile, a named profile and a profile file given by path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Snakefile").write_text("")
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "config.yaml").write_text("cores: 2\n")
    (tmp_path / "mine.yaml").write_text("cores: 3\n")
    return tmp_path


def test_each_profile_given_is_found_in_order_as_snakemake_finds_it(workdir):
    found = profile_files(["-n", "--profile", "cluster", "--profile=mine.yaml", "--cores", "1"], {}, "Snakefile")
    assert [path.resolve() for path in found] == [workdir / "cluster/config.yaml", workdir / "mine.yaml"]


def test_the_environment_variable_counts_only_without_a_profile_option_and_none_turns_both_off(workdir):
    assert profile_files([], {"SNAKEMAKE_PROFILE": "cluster"}, "Snakefile") == [Path("cluster/config.yaml")]
    assert profile_files(["--profile", "mine.yaml"], {"SNAKEMAKE_PROFILE": "cluster"}, "Snakefile") == [
        Path("mine.yaml")
    ]
    assert profile_files(["--profile", "none"], {"SNAKEMAKE_PROFILE": "cluster"}, "Snakefile") == []
    assert profile_files([], {}, "Snakefile") == []


def test_the_default_workflow_profile_is_read_beside_the_snakefile_unless_turned_off(workdir, tmp_path_factory):
    workflow = tmp_path_factory.mktemp("workflow")
    (workflow / "profiles" / "default").mkdir(parents=True)
    (workflow / "profiles" / "default" / "config.yaml").write_text("cores: 1\n")
    snakefile = workflow / "Snakefile"
    assert profile_files([], {}, snakefile) == [workflow / "profiles/default/config.yaml"]
    assert profile_files(["--workflow-profile", "none"], {}, snakefile) == []
    # the working directory's profiles/default comes first, as in snakemake.cli.parse_args
    (workdir / "profiles" / "default").mkdir(parents=True)
    (workdir / "profiles" / "default" / "config.yaml").write_text("cores: 1\n")
    assert [p.resolve() for p in profile_files([], {}, snakefile)] == [workdir / "profiles/default/config.yaml"]
    assert profile_files(["--workflow-profile", "mine.yaml"], {}, snakefile) == [Path("mine.yaml")]


def test_a_templated_profile_is_refused_naming_it_and_a_plain_one_passes(workdir):
    refuse_templated_profiles([workdir / "cluster/config.yaml", workdir / "mine.yaml"], REPO)
    (workdir / "mine.yaml").write_text(TEMPLATED)
    found = profile_files(["--profile", "cluster", "--profile", "mine.yaml"], {}, "Snakefile")
    with pytest.raises(ConfigError, match=r"profile mine\.yaml: key '__use_yte__' makes Snakemake run"):
        refuse_templated_profiles(found, REPO)
    (workdir / "cluster" / "config.yaml").write_text("cores: [1\n")
    with pytest.raises(ConfigError, match=r"profile .*cluster/config\.yaml"):
        refuse_templated_profiles(found, REPO)


def test_the_shipped_profiles_pass_templated_and_a_templated_profile_inside_the_checkout_does_not(tmp_path):
    """The shipped profiles read settings from environment variables through YTE; a profile someone drops into
    the checkout is not the workflow's code."""
    files = [REPO / "slurm" / "config.yaml", REPO / "profiles" / "workstation" / "config.yaml"]
    assert all("__use_yte__: true" in path.read_text() for path in files)
    refuse_templated_profiles(files, REPO)
    with pytest.raises(ConfigError, match=r"slurm/config\.yaml: key '__use_yte__'"):
        refuse_templated_profiles(files, REPO / "src")
    checkout = tmp_path / "checkout"
    (checkout / "slurm").mkdir(parents=True)
    (checkout / "slurm" / "config.yaml").write_text(TEMPLATED)
    (checkout / "theirs").mkdir()
    (checkout / "theirs" / "config.yaml").write_text(TEMPLATED)
    refuse_templated_profiles([checkout / "slurm" / "config.yaml"], checkout)
    with pytest.raises(ConfigError, match=r"theirs/config\.yaml: key '__use_yte__'"):
        refuse_templated_profiles([checkout / "theirs" / "config.yaml"], checkout)
