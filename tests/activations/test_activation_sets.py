"""Caches whose length sets store hook_pattern alone (cache.activation_sets): the same values where stored,
clear errors naming the file, the set, the hook and the fix where not."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from activations.conftest import edited_copy
from headstab.activations.errors import CacheError
from headstab.activations.reader import check_consistent_shapes, open_cache
from headstab.activations.writer import CacheOptions, write_activation_cache


@pytest.fixture(scope="module")
def primary_only_path(tmp_path_factory, model, token_sets):
    path = tmp_path_factory.mktemp("activation_sets") / "seed1.h5"
    write_activation_cache(path, model, token_sets, pad_token_id=0, options=CacheOptions(batch_size=3, activation_sets=["primary"], compression_level=1, extra_resid_hooks=("hook_resid_pre",), show_progress=False))  # fmt: skip
    return path


@pytest.fixture(scope="module")
def full_pre_path(tmp_path_factory, model, token_sets):
    path = tmp_path_factory.mktemp("activation_sets_full") / "seed1.h5"
    write_activation_cache(path, model, token_sets, pad_token_id=0, options=CacheOptions(batch_size=3, compression_level=1, extra_resid_hooks=("hook_resid_pre",), show_progress=False))  # fmt: skip
    return path


def test_the_activation_sets_store_what_a_full_cache_stores_the_others_patterns(primary_only_path, full_pre_path):
    with h5py.File(primary_only_path) as handle:
        assert sorted(handle["len5"]) == ["hook_pattern", "lengths", "pattern_offsets", "prompts", "tokens"]
        assert {"hook_z", "hook_resid_mid", "hook_resid_pre"} <= set(handle["primary"])
        assert handle["primary"].attrs["activations"] == "all" and handle["len5"].attrs["activations"] == "hook_pattern"
        assert handle.attrs["activation_sets"] == '["primary"]'
    with h5py.File(full_pre_path) as handle:  # without activation_sets: the files as before the option
        assert "activation_sets" not in handle.attrs and "activations" not in handle["len5"].attrs
    with open_cache(primary_only_path) as partial, open_cache(full_pre_path) as full:
        assert partial.stores_activations("primary") and not partial.stores_activations("len5")
        assert full.stores_activations("len5")
        np.testing.assert_array_equal(partial.hook_z("primary"), full.hook_z("primary"))
        for hook in ("hook_resid_mid", "hook_resid_pre"):
            np.testing.assert_array_equal(partial.resid("primary", hook, layer=1), full.resid("primary", hook, layer=1))
        for name in ("primary", "len5"):
            np.testing.assert_array_equal(partial.hook_pattern_lower(name), full.hook_pattern_lower(name))
        partial.verify()
    assert set(check_consistent_shapes([primary_only_path, full_pre_path])) == {"primary", "len5"}


def test_a_hook_a_set_does_not_store_names_file_set_hook_and_fix(primary_only_path):
    with open_cache(primary_only_path) as cache:
        for read, hook in ((lambda: cache.hook_z("len5", layer=0), "hook_z"),
                           (lambda: cache.resid("len5", "hook_resid_mid"), "hook_resid_mid")):  # fmt: skip
            with pytest.raises(CacheError) as info:
                read()
            message = str(info.value)
            assert str(primary_only_path) in message and f"/len5/{hook}" in message
            assert "prompt set 'len5'" in message and "['primary']" in message
            assert "add 'len5' to cache.activation_sets" in message and "--forcerun cache_activations" in message
        with pytest.raises(KeyError, match="no prompt set 'nope'"):
            cache.hook_z("nope")


def test_a_set_marked_full_without_its_activations_or_a_bad_marker_is_refused(primary_only_path, tmp_path):
    def unmark(handle):
        handle["len5"].attrs["activations"] = "all"

    with pytest.raises(CacheError, match=r"lacks the datasets /len5/hook_z"):
        open_cache(edited_copy(primary_only_path, tmp_path / "unmarked.h5", unmark))

    def bad(handle):
        handle["len5"].attrs["activations"] = "some"

    with pytest.raises(
        CacheError, match=r"/len5 with an invalid activations attribute 'some'.*--forcerun cache_activations"
    ):
        open_cache(edited_copy(primary_only_path, tmp_path / "bad.h5", bad))


def test_activation_sets_must_name_cached_sets(model, token_sets, tmp_path):
    with pytest.raises(ValueError, match=r"activation_sets names prompt sets \['len50'\].*cache.activation_sets"):
        write_activation_cache(tmp_path / "x.h5", model, token_sets, pad_token_id=0, options=CacheOptions(activation_sets=["len50"], show_progress=False))  # fmt: skip
    with pytest.raises(TypeError, match="the string 'primary'"):
        write_activation_cache(tmp_path / "x.h5", model, token_sets, pad_token_id=0, options=CacheOptions(activation_sets="primary", show_progress=False))  # fmt: skip
    assert not (tmp_path / "x.h5").exists()
