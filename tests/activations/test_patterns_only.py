"""Patterns-only caches (training snapshots): hook_pattern alone, the same values, clear errors for the rest."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from headstab.activations.errors import CacheError
from headstab.activations.reader import check_consistent_shapes, open_cache
from headstab.activations.writer import CacheOptions, write_activation_cache


@pytest.fixture(scope="module")
def patterns_path(tmp_path_factory, model, token_sets):
    path = tmp_path_factory.mktemp("patterns") / "seed1.h5"
    write_activation_cache(path, model, token_sets, pad_token_id=0, options=CacheOptions(batch_size=3, patterns_only=True, extra_resid_hooks=("hook_resid_pre",), show_progress=False))  # fmt: skip
    return path


def test_a_patterns_only_cache_holds_the_same_patterns_and_nothing_else(patterns_path, cache_path):
    with h5py.File(patterns_path) as handle:
        assert sorted(handle["primary"]) == ["hook_pattern", "lengths", "pattern_offsets", "prompts", "tokens"]
        assert handle.attrs["extra_resid_hooks"] == "[]"  # asked for, but a patterns-only cache stores none
    with open_cache(patterns_path) as patterns, open_cache(cache_path) as full:
        assert patterns.patterns_only and not full.patterns_only and patterns.resid_hooks() == []
        for name in ("primary", "len5"):
            np.testing.assert_array_equal(patterns.hook_pattern_lower(name), full.hook_pattern_lower(name))
            np.testing.assert_array_equal(patterns.hook_pattern(name, layer=1), full.hook_pattern(name, layer=1))
    assert set(check_consistent_shapes([patterns_path, cache_path])) == {"primary", "len5"}


def test_reading_another_hook_of_a_patterns_only_cache_names_file_and_fix(patterns_path):
    with open_cache(patterns_path) as cache:
        with pytest.raises(
            CacheError, match=r"seed1.h5 holds hook_pattern only .*no /primary/hook_z.*cache_activations"
        ):
            cache.hook_z("primary", layer=0)
        with pytest.raises(CacheError, match=r"no /len5/hook_resid_mid"):
            cache.resid("len5", "hook_resid_mid")
        with pytest.raises(KeyError, match="no prompt set 'nope'"):
            cache.hook_z("nope")


@pytest.fixture(scope="module")
def residual_path(tmp_path_factory, model, token_sets):
    """A step-0 snapshot's cache: hook_pattern of every set, plus the residual hooks of primary alone."""
    path = tmp_path_factory.mktemp("residual") / "seed1.h5"
    options = CacheOptions(
        batch_size=3,
        residual_only=True,
        activation_sets=["primary"],
        extra_resid_hooks=("hook_resid_pre",),
        show_progress=False,
    )
    write_activation_cache(path, model, token_sets, pad_token_id=0, options=options)
    return path


def test_a_residual_only_cache_holds_the_patterns_and_the_residual_hooks_of_its_sets(
    residual_path, resid_pre_cache_path
):
    with h5py.File(residual_path) as handle:
        stored = ["hook_pattern", "hook_resid_mid", "hook_resid_pre", "lengths", "pattern_offsets", "prompts", "tokens"]
        assert sorted(handle["primary"]) == stored and handle["primary"].attrs["activations"] == "residual"
        assert sorted(handle["len5"]) == ["hook_pattern", "lengths", "pattern_offsets", "prompts", "tokens"]
        assert handle.attrs["residual_only"]
    with open_cache(residual_path) as residual, open_cache(resid_pre_cache_path) as full:
        assert not residual.stores_activations("primary") and residual.resid_hooks() == full.resid_hooks()
        for hook in ("hook_resid_mid", "hook_resid_pre"):
            np.testing.assert_array_equal(residual.resid("primary", hook), full.resid("primary", hook))
        np.testing.assert_array_equal(residual.hook_pattern_lower("len5"), full.hook_pattern_lower("len5"))


def test_reading_hook_z_of_a_residual_only_cache_names_file_and_fix(residual_path):
    with open_cache(residual_path) as cache:
        message = (
            r"seed1.h5 stores hook_pattern and the residual hooks of /primary .*no /primary/hook_z; .*cache_activations"
        )
        with pytest.raises(CacheError, match=message):
            cache.hook_z("primary", layer=0)
        with pytest.raises(CacheError, match=r"/len5"):
            cache.resid("len5", "hook_resid_mid")


def test_a_cache_cannot_be_patterns_only_and_residual_only():
    with pytest.raises(ValueError, match="patterns_only or residual_only, not both"):
        CacheOptions(patterns_only=True, residual_only=True)


def test_a_damaged_snapshot_cache_names_the_rule_that_writes_it(patterns_path, tmp_path):
    for where, rule in (
        ("l2_h4/snapshots/step0/caches", "cache_snapshot_activations"),
        ("l2_h4/caches", "cache_activations"),
    ):
        truncated = tmp_path / where / "seed1.h5"
        truncated.parent.mkdir(parents=True)
        truncated.write_bytes(patterns_path.read_bytes()[: patterns_path.stat().st_size // 2])
        with pytest.raises(CacheError) as error:
            open_cache(truncated)
        assert str(error.value).endswith(
            f"rebuild it with `snakemake {truncated} --forcerun {rule}` (rule {rule}; with the --configfile/--profile "
            "of the run that made it)"
        )
