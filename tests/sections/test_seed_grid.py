"""headstab.sections.seed_grid and headstab.seed_design: init seed vs data-order seed (issue 14 part 1)."""

import numpy as np
import pandas as pd
import pytest
from tolerances import reduction_atol

from headstab.sections.seed_grid import grid_pair_table, pair_kind, seed_grid_table
from headstab.seed_design import grid_refits, refit_name, refit_seeds
from headstab.stability import pair_stability_table

INITS, DATAS = (1, 2, 3), (1, 2, 3)
N_LAYERS, N_HEADS, N_FEATURES = 2, 4, 16


def test_grid_refits_are_named_init_then_data():
    assert grid_refits([1, 2], [5, 6]) == ("1-5", "1-6", "2-5", "2-6")


def test_a_paper_refit_is_its_seed_for_both():
    assert refit_seeds(7) == refit_seeds("7") == (7, 7)
    assert refit_seeds("1-2") == (1, 2)
    assert refit_name("7") == 7 and refit_name("1-2") == "1-2"


def test_a_malformed_refit_name_is_refused():
    with pytest.raises(ValueError, match="neither a seed"):
        refit_seeds("1-2-3")


def test_pair_kinds():
    assert pair_kind("1-2", "1-3") == "shares_init"
    assert pair_kind("1-2", "3-2") == "shares_data"
    assert pair_kind("1-2", "3-1") == "shares_neither"
    with pytest.raises(ValueError, match="same refit"):
        pair_kind("1-2", "1-2")


def _similarity(pattern_of):
    """S [refit_a, refit_b, layer, head_a, head_b] of unit 'patterns' pattern_of(init, data) [layer, head, feature]."""
    refits = grid_refits(INITS, DATAS)
    patterns = np.stack([pattern_of(*refit_seeds(name)) for name in refits])  # [refit, layer, head, feature]
    return np.einsum("alhf,blgf->ablhg", patterns, patterns), refits


def _unit(rng, *shape):
    x = rng.standard_normal((*shape, N_FEATURES))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _decompose(similarity, refits):
    pairs = grid_pair_table(pair_stability_table(similarity, refits, "primary", scopes=["same_layer"]))
    table = seed_grid_table(pairs, n_boot=200, seed=0, confidence=0.95)
    return pairs, table.set_index(["layer", "statistic"])


def test_without_a_data_effect_shares_init_pairs_are_identical_and_the_data_fraction_is_zero():
    """Heads depend on the init seed alone: refits differing only in data order match perfectly, and changing
    the data order on top of the init adds nothing."""
    heads = {init: _unit(np.random.default_rng(init), N_LAYERS, N_HEADS) for init in INITS}
    pairs, table = _decompose(*_similarity(lambda init, data: heads[init]))
    atol = reduction_atol(np.float64, N_FEATURES * N_HEADS)
    for layer in range(N_LAYERS):
        same_init = pairs[(pairs["layer"] == layer) & (pairs["kind"] == "shares_init")]["stability"]
        np.testing.assert_allclose(same_init, 1.0, atol=atol)
        assert table.loc[(layer, "shares_init"), "estimate"] == pytest.approx(same_init.mean(), abs=atol)
        assert table.loc[(layer, "shares_data"), "estimate"] == pytest.approx(
            table.loc[(layer, "shares_neither"), "estimate"], abs=atol
        )
        assert table.loc[(layer, "data_fraction"), "estimate"] == pytest.approx(0.0, abs=atol)
        assert table.loc[(layer, "init_fraction"), "estimate"] == pytest.approx(1.0, abs=atol)
        # a resample unbalances the grid (init pairs weigh differently per kind), so only the interval spans 0
        low, high = table.loc[(layer, "data_fraction"), ["ci_low", "ci_high"]]
        assert low < 0 < high


def test_without_an_init_effect_the_init_fraction_is_zero():
    heads = {data: _unit(np.random.default_rng(10 + data), N_LAYERS, N_HEADS) for data in DATAS}
    _, table = _decompose(*_similarity(lambda init, data: heads[data]))
    atol = reduction_atol(np.float64, N_FEATURES * N_HEADS)
    for layer in range(N_LAYERS):
        assert table.loc[(layer, "init_fraction"), "estimate"] == pytest.approx(0.0, abs=atol)
        assert table.loc[(layer, "shares_data"), "estimate"] == pytest.approx(1.0, abs=atol)


def test_additive_effects_split_between_init_and_data():
    """Pattern = (init part + data part) normalised, the two orthogonal and of equal size: each seed carries half."""
    rng = np.random.default_rng(5)
    basis = np.linalg.qr(rng.standard_normal((N_FEATURES, N_FEATURES)))[0]
    init_part = {i: basis[:, i - 1] for i in INITS}
    data_part = {d: basis[:, 3 + d] for d in DATAS}

    def pattern(init, data):
        vector = (init_part[init] + data_part[data]) / np.sqrt(2)
        return np.broadcast_to(vector, (N_LAYERS, N_HEADS, N_FEATURES))

    _, table = _decompose(*_similarity(pattern))
    atol = reduction_atol(np.float64, N_FEATURES * N_HEADS)
    assert table.loc[(0, "shares_init"), "estimate"] == pytest.approx(0.5, abs=atol)
    assert table.loc[(0, "shares_neither"), "estimate"] == pytest.approx(0.0, abs=atol)
    assert table.loc[(0, "init_fraction"), "estimate"] == pytest.approx(0.5, abs=atol)
    assert table.loc[(0, "data_fraction"), "estimate"] == pytest.approx(0.5, abs=atol)
    assert table.loc[(0, "interaction_fraction"), "estimate"] == pytest.approx(0.0, abs=atol)


def test_a_grid_with_one_data_seed_is_refused():
    pairs = pd.DataFrame(
        {
            "anchor_seed": ["1-1", "2-1"],
            "pair_seed": ["2-1", "1-1"],
            "layer": 0,
            "stability": 0.5,
            "kind": "shares_data",
        }
    )
    with pytest.raises(ValueError, match="at least 2 init seeds and 2 data seeds"):
        seed_grid_table(pairs, n_boot=10, seed=0, confidence=0.95)
