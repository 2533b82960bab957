"""headstab.sections.residual_cka: §4.7 CKA table from the caches of an architecture's refits."""

import logging
import sys
import types

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol

from headstab.cka import pairwise_layer_cka, subsample_tokens, token_activations
from headstab.sections.residual_cka import (
    CKA_COLUMNS,
    kernel_label,
    layer_cka_table,
    promptset_cka,
    residual_cka_table,
)
from headstab.statistics.resampling import pair_mean_interval

SETTINGS = {"hook": "hook_resid_pre", "kernel": "linear", "threshold": 1.0, "debiased": False, "max_tokens": 8}


def _caches(fake_cache, lengths=(5, 3, 4), seeds=(1, 2, 3)):
    rng = np.random.default_rng(0)
    lengths = np.array(lengths)
    caches = {}
    for seed in seeds:
        resid = rng.normal(size=(2, len(lengths), 5, 6)).astype(np.float32)  # [layer, prompt, pos, d_model]
        caches[seed] = fake_cache(f"seed{seed}.h5", lengths, resid={"hook_resid_pre": resid})
    return caches


def _serve_caches(monkeypatch, caches):
    """headstab.activations.reader.open_cache(str(seed)) hands out the fake cache of that seed."""
    reader = types.ModuleType("headstab.activations.reader")
    reader.open_cache = lambda path: caches[int(path)]
    monkeypatch.setitem(sys.modules, "headstab.activations", types.ModuleType("headstab.activations"))
    monkeypatch.setitem(sys.modules, "headstab.activations.reader", reader)


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


def test_refits_tokenized_differently_are_refused_naming_both_caches_and_why(fake_cache):
    caches = _caches(fake_cache)
    caches[3] = _caches(fake_cache, lengths=(5, 3, 3), seeds=(3,))[3]
    with pytest.raises(ValueError) as error:
        promptset_cka(caches, "primary", **SETTINGS)
    assert "caches seed1.h5 and seed3.h5 tokenize prompt set 'primary' differently" in str(error.value)
    assert str(error.value).endswith("differently; CKA needs the same tokens in every refit (rebuild the stale cache)")


def test_residual_cka_table_opens_every_cache_and_stacks_prompt_sets(monkeypatch, fake_cache):
    caches = _caches(fake_cache)
    _serve_caches(monkeypatch, caches)
    table = residual_cka_table({seed: str(seed) for seed in caches}, ["primary"], **SETTINGS)
    np.testing.assert_array_equal(table["cka"], promptset_cka(caches, "primary", **SETTINGS)["cka"])


def test_kernel_label():
    assert kernel_label("rbf", False) == "RBF" and kernel_label("linear", True) == "linear, debiased"


def test_promptset_cka_passes_the_kernel_settings_and_numbers_its_rows(fake_cache, caplog):
    caches = _caches(fake_cache)
    settings = {"hook": "hook_resid_pre", "kernel": "rbf", "threshold": 0.5, "debiased": True, "max_tokens": None}
    with caplog.at_level(logging.INFO, logger="headstab.sections.residual_cka"):
        table = promptset_cka(caches, "primary", **settings)
    assert caplog.messages == ["primary: 12 of 12 tokens per refit, hook_resid_pre"]
    assert table.index.tolist() == list(range(6))
    for layer in range(2):
        acts = {
            seed: token_activations(c._resid["hook_resid_pre"][layer], c._lengths)[None] for seed, c in caches.items()
        }
        expected = pairwise_layer_cka(acts, kernel="rbf", threshold=0.5, debiased=True)
        np.testing.assert_array_equal(table[table["layer"] == layer]["cka"].to_numpy(), expected["cka"].to_numpy())


def test_residual_cka_table_numbers_the_stacked_rows(monkeypatch, fake_cache):
    caches = _caches(fake_cache)
    _serve_caches(monkeypatch, caches)
    table = residual_cka_table({seed: str(seed) for seed in caches}, ["primary", "primary"], **SETTINGS)
    assert table.index.tolist() == list(range(12))


def _cka_rows(promptset, seeds, rng):
    """One CKA value per distinct refit pair and layer (2 layers)."""
    pairs = [(a, b) for i, a in enumerate(seeds) for b in seeds[i + 1 :]]
    return [(promptset, a, b, layer, rng.uniform(0.3, 0.9)) for a, b in pairs for layer in (0, 1)]


def test_layer_cka_table_summarises_each_prompt_set_in_table_order():
    rng = np.random.default_rng(0)
    table = pd.DataFrame(
        _cka_rows("primary", [1, 2, 3, 4], rng) + _cka_rows("len5", [1, 2, 3], rng),
        columns=["promptset", "seed_a", "seed_b", "layer", "cka"],
    )
    out = layer_cka_table(table, "distinct", 60, 3, 0.9)
    columns = ["promptset", "layer", "cka_mean", "cka_std", "n_pairs", "ci_low", "ci_high", "n_boot"]
    assert list(out.columns) == columns and out.index.tolist() == [0, 1, 2, 3]
    assert list(zip(out["promptset"], out["layer"])) == [("primary", 0), ("primary", 1), ("len5", 0), ("len5", 1)]
    for promptset, n_pairs in (("primary", 6), ("len5", 3)):
        part = table[table["promptset"] == promptset]
        got = out[out["promptset"] == promptset].reset_index(drop=True)
        means = part.groupby("layer")["cka"].mean().to_numpy()
        np.testing.assert_allclose(got["cka_mean"], means, atol=reduction_atol(np.float64, n_pairs))
        assert (got["n_pairs"] == n_pairs).all()
        interval = pair_mean_interval(part, "cka", 60, 3, 0.9)
        np.testing.assert_array_equal(got[["ci_low", "ci_high"]], interval[["ci_low", "ci_high"]])


def test_layer_cka_table_with_self_pairs_maps_each_prompt_sets_interval_by_its_refit_count():
    rng = np.random.default_rng(1)
    table = pd.DataFrame(
        _cka_rows("primary", [1, 2, 3, 4], rng) + _cka_rows("len5", [1, 2, 3], rng),
        columns=["promptset", "seed_a", "seed_b", "layer", "cka"],
    )
    distinct = layer_cka_table(table, "distinct", 60, 3, 0.9)
    ordered = layer_cka_table(table, "ordered_with_self", 60, 3, 0.9)
    # With N refits, N self-pairs of CKA 1 join the N(N-1) ordered pairs: m -> (N - 1) / N m + 1 / N.
    n = np.where(distinct["promptset"] == "primary", 4, 3)
    for column in ("cka_mean", "ci_low", "ci_high"):
        expected = (n - 1) / n * distinct[column] + 1 / n
        np.testing.assert_allclose(ordered[column], expected, atol=reduction_atol(np.float64, 16))
    assert ordered["n_pairs"].tolist() == [16, 16, 9, 9]
