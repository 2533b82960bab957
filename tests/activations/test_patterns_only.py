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
            f"rebuild it with `rm -f {truncated} && snakemake {truncated}` (rule {rule}; with the --configfile/--profile "
            "of the run that made it)"
        )
