"""headstab.sections.residual_cka: §4.7 CKA table from the caches of an architecture's refits."""

import sys
import types

import numpy as np
import pytest

from headstab.cka import pairwise_layer_cka, subsample_tokens, token_activations
from headstab.sections.residual_cka import CKA_COLUMNS, kernel_label, promptset_cka, residual_cka_table

SETTINGS = {"hook": "hook_resid_pre", "kernel": "linear", "threshold": 1.0, "debiased": False, "max_tokens": 8}


def _caches(fake_cache, lengths=(5, 3, 4), seeds=(1, 2, 3)):
    rng = np.random.default_rng(0)
    lengths = np.array(lengths)
    caches = {}
    for seed in seeds:
        resid = rng.normal(size=(2, len(lengths), 5, 6)).astype(np.float32)  # [layer, prompt, pos, d_model]
        caches[seed] = fake_cache(f"seed{seed}.h5", lengths, resid={"hook_resid_pre": resid})
    return caches


def test_promptset_cka_is_pairwise_cka_of_the_same_kept_real_tokens(fake_cache):
    caches = _caches(fake_cache)
    table = promptset_cka(caches, "primary", **SETTINGS)
    assert list(table.columns) == CKA_COLUMNS and set(table["promptset"]) == {"primary"}
    assert len(table) == 3 * 2  # 3 pairs x 2 layers
    keep = subsample_tokens(12, 8)
    for layer in range(2):
        acts = {
            seed: token_activations(c._resid["hook_resid_pre"][layer], c._lengths)[keep][None]
            for seed, c in caches.items()
        }
        expected = pairwise_layer_cka(acts, kernel="linear")
        np.testing.assert_array_equal(table[table["layer"] == layer]["cka"].to_numpy(), expected["cka"].to_numpy())
    assert ("hook_resid_pre", 1) in caches[1].reads  # one layer at a time, on the configured hook


def test_refits_tokenized_differently_are_refused_naming_both_caches(fake_cache):
    caches = _caches(fake_cache)
    caches[3] = _caches(fake_cache, lengths=(5, 3, 3), seeds=(3,))[3]
    with pytest.raises(ValueError, match="caches seed1.h5 and seed3.h5 tokenize prompt set 'primary' differently"):
        promptset_cka(caches, "primary", **SETTINGS)


def test_residual_cka_table_opens_every_cache_and_stacks_prompt_sets(monkeypatch, fake_cache):
    caches = _caches(fake_cache)
    reader = types.ModuleType("headstab.activations.reader")
    reader.open_cache = lambda path: caches[int(path)]
    monkeypatch.setitem(sys.modules, "headstab.activations", types.ModuleType("headstab.activations"))
    monkeypatch.setitem(sys.modules, "headstab.activations.reader", reader)
    table = residual_cka_table({seed: str(seed) for seed in caches}, ["primary"], **SETTINGS)
    np.testing.assert_array_equal(table["cka"], promptset_cka(caches, "primary", **SETTINGS)["cka"])


def test_kernel_label():
    assert kernel_label("rbf", False) == "RBF" and kernel_label("linear", True) == "linear, debiased"
