"""headstab.sections.residual_cka: §4.7 CKA table from the caches of an architecture's refits."""

import logging

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol

from headstab.cka import pairwise_layer_cka, subsample_tokens, token_activations
from headstab.sections import residual_cka
from headstab.sections.residual_cka import (
    CKA_COLUMNS,
    INIT_COLUMNS,
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


def _serve_caches(monkeypatch, caches, init=None):
    """The section's open_cache(str(seed)) hands out the fake cache of that seed, and open_cache(f"init{seed}") its
    step-0 cache in `init`."""
    monkeypatch.setattr(
        residual_cka,
        "open_cache",
        lambda path: init[int(path[4:])] if path.startswith("init") else caches[int(path)],
    )


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
    every_token = table[table["positions"] == "all"]
    np.testing.assert_array_equal(every_token["cka"], promptset_cka(caches, "primary", **SETTINGS)["cka"])
    assert table["init_cka"].isna().all()  # no step-0 caches given


def test_kernel_label():
    assert kernel_label("rbf", False) == "RBF" and kernel_label("linear", True) == "linear, debiased"


def test_promptset_cka_passes_the_kernel_settings_and_numbers_its_rows(fake_cache, caplog):
    caches = _caches(fake_cache)
    settings = {"hook": "hook_resid_pre", "kernel": "rbf", "threshold": 0.5, "debiased": True, "max_tokens": None}
    with caplog.at_level(logging.INFO, logger="headstab.sections.residual_cka"):
        table = promptset_cka(caches, "primary", **settings)
    assert caplog.messages == ["primary: 12 of 12 tokens per refit, hook_resid_pre, positions all"]
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
    assert table.index.tolist() == list(range(24))  # 2 sets x 2 positions variants x 3 pairs x 2 layers


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
    columns = ["promptset", "positions", "layer", "cka_mean", "cka_std", "n_pairs", "ci_low", "ci_high", "n_boot"]
    assert list(out.columns) == [*columns, *INIT_COLUMNS, "calibration"] and out.index.tolist() == [0, 1, 2, 3]
    assert (out["positions"] == "all").all() and out[INIT_COLUMNS].isna().all().all()
    assert list(zip(out["promptset"], out["layer"])) == [("primary", 0), ("primary", 1), ("len5", 0), ("len5", 1)]
    for promptset, n_pairs in (("primary", 6), ("len5", 3)):
        part = table[table["promptset"] == promptset]
        got = out[out["promptset"] == promptset].reset_index(drop=True)
        means = part.groupby("layer")["cka"].mean().to_numpy()
        np.testing.assert_allclose(got["cka_mean"], means, atol=reduction_atol(np.float64, n_pairs))
        assert (got["n_pairs"] == n_pairs).all()
        interval = pair_mean_interval(part, "cka", 60, 3, 0.9)
        np.testing.assert_array_equal(got[["ci_low", "ci_high"]], interval[["ci_low", "ci_high"]])


def test_each_prompt_sets_intervals_are_labelled_at_its_number_of_refits():
    from headstab.statistics.calibration import calibration_label

    rng = np.random.default_rng(0)
    seeds = list(range(1, 13))
    table = pd.DataFrame(
        _cka_rows("primary", seeds, rng) + _cka_rows("len5", [1, 2, 3], rng),
        columns=["promptset", "seed_a", "seed_b", "layer", "cka"],
    )
    out = layer_cka_table(table, "distinct", 20, 3, 0.9).set_index(["promptset", "layer"])["calibration"]
    for promptset, n in (("primary", 12), ("len5", 3)):
        assert (out.loc[promptset] == calibration_label("pair_refit_bootstrap_residual_cka", n)).all()
    assert out.loc["len5"].eq("descriptive").all()  # 3 refits: 3 pairs, 10 distinct draws


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


def test_no_bos_leaves_out_position_0_of_every_prompt_before_the_kernel(fake_cache):
    caches = _caches(fake_cache)
    table = promptset_cka(caches, "primary", **{**SETTINGS, "max_tokens": None}, positions="no_bos")
    assert set(table["positions"]) == {"no_bos"}
    for layer in range(2):
        acts = {
            seed: np.concatenate([c._resid["hook_resid_pre"][layer][p, 1:n] for p, n in enumerate(c._lengths)])[None]
            for seed, c in caches.items()
        }
        assert acts[1].shape == (1, 12 - 3, 6)
        expected = pairwise_layer_cka(acts, kernel="linear")
        np.testing.assert_array_equal(table[table["layer"] == layer]["cka"].to_numpy(), expected["cka"].to_numpy())


def test_without_a_prepended_bos_no_bos_keeps_every_token(fake_cache):
    caches = {
        seed: fake_cache(c.path, c._lengths, resid=c._resid, prepend_bos=False)
        for seed, c in _caches(fake_cache).items()
    }
    every = promptset_cka(caches, "primary", **SETTINGS)
    no_bos = promptset_cka(caches, "primary", **SETTINGS, positions="no_bos")
    np.testing.assert_array_equal(every["cka"], no_bos["cka"])


def test_identical_bos_rows_lift_the_cka_of_unrelated_refits_and_no_bos_removes_the_lift(fake_cache):
    """Planted: two refits with independent token residuals but the same far-off BOS vector in every prompt (a
    BOS attends to itself alone). The BOS rows form one cluster both refits share, so CKA over all tokens is high;
    without them it falls to the level of unrelated random representations."""
    rng = np.random.default_rng(5)
    lengths = np.full(40, 6)
    caches = {}
    for seed in (1, 2):
        resid = rng.normal(size=(1, 40, 6, 16)).astype(np.float32)
        resid[:, :, 0] = 6.0  # the same BOS residual in every prompt, far from the tokens
        caches[seed] = fake_cache(f"seed{seed}.h5", lengths, resid={"hook_resid_pre": resid})
    settings = {**SETTINGS, "max_tokens": None}
    every = promptset_cka(caches, "primary", **settings)["cka"].item()
    no_bos = promptset_cka(caches, "primary", **settings, positions="no_bos")["cka"].item()
    # linear CKA of independent Gaussian [200, 16] matrices: about d / n = 16 / 200
    assert no_bos < 0.2 and every > 0.8


def test_init_cka_is_the_same_cka_on_each_refits_step_0_cache(monkeypatch, fake_cache):
    caches = _caches(fake_cache)
    init = {seed: fake_cache(f"init{seed}.h5", c._lengths, resid={"hook_resid_pre": 2 * c._resid["hook_resid_pre"][::-1]})
            for seed, c in caches.items()}  # fmt: skip
    _serve_caches(monkeypatch, caches, init)
    table = residual_cka_table(
        {s: str(s) for s in caches}, ["primary"], init_paths={s: f"init{s}" for s in caches}, **SETTINGS
    )
    for positions in ("all", "no_bos"):
        rows = table[table["positions"] == positions].reset_index(drop=True)
        step0 = promptset_cka(init, "primary", **SETTINGS, positions=positions)
        np.testing.assert_array_equal(rows["init_cka"], step0["cka"])
        np.testing.assert_array_equal(
            rows["cka"], promptset_cka(caches, "primary", **SETTINGS, positions=positions)["cka"]
        )


def test_step_0_caches_of_other_refits_or_tokens_are_refused(monkeypatch, fake_cache):
    caches = _caches(fake_cache)
    _serve_caches(
        monkeypatch, caches, {1: caches[1], 2: caches[2], 3: fake_cache("init3.h5", (5, 3, 3), resid=caches[3]._resid)}
    )
    with pytest.raises(ValueError, match=r"step-0 caches of refits \[1, 2\] do not match the refits \[1, 2, 3\]"):
        residual_cka_table({s: str(s) for s in caches}, ["primary"], init_paths={1: "init1", 2: "init2"}, **SETTINGS)
    with pytest.raises(
        ValueError,
        match="step-0 cache init3.h5 tokenizes prompt set .primary. unlike seed3.h5; rebuild the stale cache$",
    ):
        residual_cka_table(
            {s: str(s) for s in caches}, ["primary"], init_paths={s: f"init{s}" for s in caches}, **SETTINGS
        )


def test_layer_cka_table_gives_the_step_0_mean_and_interval_from_the_same_resamples():
    rng = np.random.default_rng(2)
    table = pd.DataFrame(
        _cka_rows("primary", [1, 2, 3, 4], rng), columns=["promptset", "seed_a", "seed_b", "layer", "cka"]
    )
    table = pd.concat([table.assign(positions=p) for p in ("all", "no_bos")], ignore_index=True)
    table["init_cka"] = rng.uniform(0.0, 0.3, len(table))
    out = layer_cka_table(table, "distinct", 60, 3, 0.9)
    assert list(zip(out["positions"], out["layer"])) == [("all", 0), ("all", 1), ("no_bos", 0), ("no_bos", 1)]
    for positions in ("all", "no_bos"):
        part = table[table["positions"] == positions]
        got = out[out["positions"] == positions].reset_index(drop=True)
        means = part.groupby("layer")["init_cka"].mean().to_numpy()
        np.testing.assert_allclose(got["init_cka_mean"], means, atol=reduction_atol(np.float64, 6))
        interval = pair_mean_interval(part, "init_cka", 60, 3, 0.9)
        np.testing.assert_array_equal(got[["init_ci_low", "init_ci_high"]], interval[["ci_low", "ci_high"]])


def _min_n(monkeypatch, method, min_n):
    """Set `method`'s min_n in the registry the section reads."""
    from dataclasses import replace

    from headstab.statistics import calibration

    monkeypatch.setitem(calibration.METHODS, method, replace(calibration.METHODS[method], min_n=min_n))


def test_the_label_is_taken_at_the_refits_of_the_prompt_set(monkeypatch):
    rng = np.random.default_rng(5)
    table = pd.DataFrame(
        _cka_rows("primary", [1, 2, 3, 4, 5], rng), columns=["promptset", "seed_a", "seed_b", "layer", "cka"]
    )
    for min_n, label in ((5, "calibrated"), (12, "descriptive")):
        _min_n(monkeypatch, "pair_refit_bootstrap_residual_cka", min_n)
        assert (layer_cka_table(table, "distinct", 20, 0, 0.9)["calibration"] == label).all()


def test_caches_that_do_not_say_they_prepended_a_bos_keep_every_token(fake_cache):
    caches = _caches(fake_cache)
    for cache in caches.values():
        del cache.attrs["prepend_bos"]  # an older cache: no prepend_bos attribute, no BOS assumed
    every = promptset_cka(caches, "primary", **SETTINGS)
    np.testing.assert_array_equal(every["cka"], promptset_cka(caches, "primary", **SETTINGS, positions="no_bos")["cka"])


def test_positions_and_mixed_bos_caches_are_refused_by_name(fake_cache):
    caches = _caches(fake_cache)
    with pytest.raises(ValueError, match=r"positions must be one of \['all', 'no_bos'\], got 'bos'"):
        promptset_cka(caches, "primary", **SETTINGS, positions="bos")
    caches[2] = fake_cache(caches[2].path, caches[2]._lengths, resid=caches[2]._resid, prepend_bos=False)
    message = r"^the caches disagree in prepend_bos \(cache.prepend_bos\); rebuild the stale caches$"
    with pytest.raises(ValueError, match=message):
        promptset_cka(caches, "primary", **SETTINGS, positions="no_bos")


def test_a_prompt_of_only_its_bos_gives_no_token_without_it(fake_cache):
    caches = _caches(fake_cache, lengths=(5, 1, 4))
    table = promptset_cka(caches, "primary", **{**SETTINGS, "max_tokens": None}, positions="no_bos")
    acts = {
        seed: np.concatenate([c._resid["hook_resid_pre"][0][p, 1:n] for p, n in enumerate(c._lengths)])[None]
        for seed, c in caches.items()
    }
    assert acts[1].shape == (1, 4 + 0 + 3, 6)
    expected = pairwise_layer_cka(acts, kernel="linear")
    np.testing.assert_array_equal(table[table["layer"] == 0]["cka"].to_numpy(), expected["cka"].to_numpy())


def test_layer_tokens_start_at_position_0_by_default(fake_cache):
    caches = _caches(fake_cache)
    keep = np.arange(12)
    tokens = residual_cka.layer_tokens(caches, "primary", 1, keep, "hook_resid_pre")
    for seed, cache in caches.items():
        expected = token_activations(cache._resid["hook_resid_pre"][1], cache._lengths, 0)[None]
        np.testing.assert_array_equal(tokens[seed], expected)


def test_without_step_0_caches_the_init_columns_are_float_nan():
    rng = np.random.default_rng(3)
    table = pd.DataFrame(
        _cka_rows("primary", [1, 2, 3], rng), columns=["promptset", "seed_a", "seed_b", "layer", "cka"]
    )
    out = layer_cka_table(table, "distinct", 20, 0, 0.9)
    assert out[INIT_COLUMNS].dtypes.eq(np.float64).all() and out[INIT_COLUMNS].isna().all().all()


def test_two_refits_of_one_layer_get_their_step_0_cka(monkeypatch, fake_cache):
    rng = np.random.default_rng(4)
    lengths = np.array([5, 3, 4])
    resid = {s: rng.normal(size=(1, 3, 5, 6)).astype(np.float32) for s in (1, 2)}  # one layer: one row per table
    caches = {s: fake_cache(f"seed{s}.h5", lengths, resid={"hook_resid_pre": r}) for s, r in resid.items()}
    init = {s: fake_cache(f"init{s}.h5", lengths, resid={"hook_resid_pre": -r}) for s, r in resid.items()}
    _serve_caches(monkeypatch, caches, init)
    table = residual_cka_table({1: "1", 2: "2"}, ["primary"], init_paths={1: "init1", 2: "init2"}, **SETTINGS)
    assert len(table) == 2  # positions all and no_bos
    np.testing.assert_array_equal(table["init_cka"], table["cka"])  # linear CKA does not see a sign flip
