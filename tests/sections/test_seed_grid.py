"""headstab.sections.seed_grid and headstab.plan.seed_design: init seed vs data-order seed, and the one-ulp floor."""

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol

from headstab.plan.seed_design import grid_refits, refit_name, refit_seeds
from headstab.sections.seed_grid import BOTH, FLOOR_FRACTIONS, KINDS, grid_pair_table, pair_kind, seed_grid_table
from headstab.stability import pair_stability_table
from headstab.statistics.bootstrap import draw_resamples

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


def _hand_pairs(values, refits=None):
    """grid_pair_table rows of one layer: every ordered pair of distinct refits (the 3 x 3 grid unless given) at
    values[its kind]."""
    refits = grid_refits(INITS, DATAS) if refits is None else refits
    rows = [(a, b, 0, values[pair_kind(a, b)], pair_kind(a, b)) for a in refits for b in refits if a != b]
    return pd.DataFrame(rows, columns=["anchor_seed", "pair_seed", "layer", "stability", "kind"])


def _interval_by_hand(pairs, n_boot, seed, confidence):
    """Per kind and fraction: the percentile interval of pair means weighted k_a k_b, looped over draws."""
    refits = sorted(set(pairs["anchor_seed"]) | set(pairs["pair_seed"]), key=str)
    counts = draw_resamples(n_boot, len(refits), 1, seed).refit_counts
    replicates = {name: [] for name in (*KINDS, "init_fraction", "data_fraction")}
    for k in counts:
        for kind in KINDS:
            part = pairs[pairs["kind"] == kind]
            w = np.array(
                [k[refits.index(a)] * k[refits.index(b)] for a, b in zip(part["anchor_seed"], part["pair_seed"])]
            )
            replicates[kind].append(np.sum(w * part["stability"]) / w.sum() if w.sum() > 0 else np.nan)
        u_n = 1 - replicates["shares_neither"][-1]
        replicates["init_fraction"].append((u_n - (1 - replicates["shares_init"][-1])) / u_n)
        replicates["data_fraction"].append((u_n - (1 - replicates["shares_data"][-1])) / u_n)
    alpha = (1 - confidence) / 2
    return {name: np.nanquantile(values, [alpha, 1 - alpha]) for name, values in replicates.items()}


def test_intervals_are_percentiles_of_pair_weighted_means_over_refit_draws():
    rng = np.random.default_rng(3)
    pairs = _hand_pairs({"shares_init": 0.8, "shares_data": 0.6, "shares_neither": 0.3})
    pairs = pairs.assign(stability=pairs["stability"] + rng.uniform(-0.05, 0.05, len(pairs)))
    table = seed_grid_table(pairs, n_boot=40, seed=7, confidence=0.8).set_index("statistic")
    expected = _interval_by_hand(pairs, 40, 7, 0.8)
    atol = reduction_atol(np.float64, len(pairs), magnitude=4.0)
    for name, (low, high) in expected.items():
        assert table.loc[name, ["ci_low", "ci_high"]].tolist() == pytest.approx([low, high], abs=atol)
    # 3 x 3 grid: 9 x 8 ordered pairs; 3 x 3 x 2 share the init, as many the data order
    assert table["n_pairs"].tolist() == [18, 18, 36, 72, 72, 72] and (table["n_boot"] == 40).all()


def test_a_paper_refit_in_the_grid_sorts_with_the_grid_refits():
    # Paper refit 1 is the grid's 1-1 (both seeds 1), named by an int; the draws order refits as text.
    values = {"shares_init": 0.8, "shares_data": 0.6, "shares_neither": 0.3}
    pairs = _hand_pairs(values, refits=(1, *grid_refits(INITS, DATAS)[1:]))
    pairs = pairs.assign(stability=pairs["stability"] + np.random.default_rng(4).uniform(-0.05, 0.05, len(pairs)))
    table = seed_grid_table(pairs, n_boot=40, seed=7, confidence=0.8).set_index("statistic")
    expected = _interval_by_hand(pairs, 40, 7, 0.8)
    assert table.loc["shares_init", ["ci_low", "ci_high"]].tolist() == pytest.approx(
        list(expected["shares_init"]), abs=reduction_atol(np.float64, len(pairs))
    )


def test_a_refit_never_an_anchor_is_still_drawn():
    pairs = _hand_pairs({"shares_init": 0.8, "shares_data": 0.6, "shares_neither": 0.3})
    pairs = pairs[pairs["anchor_seed"] != "3-3"]
    pairs = pairs.assign(stability=pairs["stability"] + np.random.default_rng(5).uniform(-0.05, 0.05, len(pairs)))
    table = seed_grid_table(pairs, n_boot=20, seed=0, confidence=0.9).set_index("statistic")
    expected = _interval_by_hand(pairs, 20, 0, 0.9)
    assert table.loc["shares_data", ["ci_low", "ci_high"]].tolist() == pytest.approx(
        list(expected["shares_data"]), abs=reduction_atol(np.float64, len(pairs))
    )


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered")
def test_identical_refits_leave_the_fractions_undefined():
    # Pairs sharing neither seed match perfectly: no instability to split, though others lose some.
    pairs = _hand_pairs({"shares_init": 0.5, "shares_data": 0.5, "shares_neither": 1.0})
    with np.errstate(all="ignore"):
        table = seed_grid_table(pairs, n_boot=20, seed=0, confidence=0.95).set_index("statistic")
    for name in ("init_fraction", "data_fraction", "interaction_fraction"):
        assert np.isnan(table.loc[name, ["estimate", "ci_low", "ci_high"]].to_numpy(float)).all()


def test_pair_table_is_sorted_whatever_the_row_order():
    rng = np.random.default_rng(2)
    heads = _unit(rng, N_LAYERS, N_HEADS)
    similarity, refits = _similarity(
        lambda init, data: heads + 0.1 * _unit(np.random.default_rng(init * 10 + data), N_LAYERS, N_HEADS)
    )
    stability = pair_stability_table(similarity, refits, "primary", scopes=["same_layer"])
    pairs = grid_pair_table(stability)
    pd.testing.assert_frame_equal(grid_pair_table(stability.sample(frac=1.0, random_state=0)), pairs)
    keys = list(zip(pairs["anchor_seed"], pairs["pair_seed"], pairs["layer"]))
    assert keys == sorted(keys)


def test_the_refusal_names_every_missing_kind():
    pairs = _hand_pairs({"shares_init": 0.8, "shares_data": 0.6, "shares_neither": 0.3})
    with pytest.raises(ValueError, match="^the seed grid has no pair that shares_init, shares_neither: give"):
        seed_grid_table(pairs[pairs["kind"] == "shares_data"], n_boot=10, seed=0, confidence=0.95)


def test_grid_table_is_in_layer_order_whatever_the_row_order():
    layer0 = _hand_pairs({"shares_init": 0.8, "shares_data": 0.6, "shares_neither": 0.3})
    layer1 = _hand_pairs({"shares_init": 0.5, "shares_data": 0.4, "shares_neither": 0.2}).assign(layer=1)
    table = seed_grid_table(pd.concat([layer1, layer0], ignore_index=True), n_boot=20, seed=0, confidence=0.9)
    assert table["layer"].tolist() == [0] * 6 + [1] * 6
    assert table["estimate"].iloc[[0, 6]].tolist() == pytest.approx([0.8, 0.5], abs=reduction_atol(np.float64, 18))


def test_a_cell_and_its_one_ulp_twin_share_both_and_the_twin_enters_no_other_pair():
    assert pair_kind("1-2", "1-2-ulp") == pair_kind("1-2-ulp", "1-2") == BOTH
    assert pair_kind("1-2-ulp", "1-3") is None and pair_kind("1-2-ulp", "2-2-ulp") is None
    assert pair_kind(1, "1-1-ulp") == BOTH  # a paper refit standing for its cell
    with pytest.raises(ValueError, match="same refit"):
        pair_kind("1-2-ulp", "1-2-ulp")


def _floor_similarity(n_features=32):
    """Patterns (init part + data part + the refit's own part) / sqrt 3, all orthogonal; the own part is drawn anew
    for every refit, twins too: a one-ulp change that training carries as far as a new seed would."""
    refits = grid_refits(INITS, DATAS, ulp_twins=["1-1", "2-2", "3-3"])
    basis = np.linalg.qr(np.random.default_rng(8).standard_normal((n_features, n_features)))[0]
    init_part = {i: basis[:, i - 1] for i in INITS}
    data_part = {d: basis[:, 2 + d] for d in DATAS}
    patterns = []
    for index, name in enumerate(refits):
        init, data = refit_seeds(name)
        vector = (init_part[init] + data_part[data] + basis[:, 6 + index]) / np.sqrt(3)
        patterns.append(np.broadcast_to(vector, (N_LAYERS, N_HEADS, n_features)))
    patterns = np.stack(patterns)
    return np.einsum("alhf,blgf->ablhg", patterns, patterns), refits


def test_when_the_interaction_is_all_chaos_the_floor_takes_all_of_it():
    """Shares init 1/3, shares data 1/3, neither 0, both 2/3: a third of the instability is initialisation, a third
    data order, a third interaction, and one ulp already gives that third: nothing is left to the seeds' interaction."""
    similarity, refits = _floor_similarity()
    pairs, table = _decompose(similarity, refits)
    assert set(pairs["kind"]) == {*KINDS, BOTH} and (pairs["kind"] == BOTH).sum() == 2 * 3 * N_LAYERS
    atol = reduction_atol(np.float64, 32 * N_HEADS)
    expected = {"shares_init": 1 / 3, "shares_data": 1 / 3, "shares_neither": 0.0, BOTH: 2 / 3,
                "init_fraction": 1 / 3, "data_fraction": 1 / 3, "interaction_fraction": 1 / 3,
                "floor_fraction": 1 / 3, "seed_interaction_fraction": 0.0}  # fmt: skip
    for layer in range(N_LAYERS):
        for name, value in expected.items():
            assert table.loc[(layer, name), "estimate"] == pytest.approx(value, abs=atol), name
        assert table.loc[(layer, BOTH), "n_pairs"] == 6
    low, high = table.loc[(0, "floor_fraction"), ["ci_low", "ci_high"]]
    assert low <= 1 / 3 + atol and high >= 1 / 3 - atol


def test_a_twin_is_resampled_with_its_cell():
    """The floor's interval: pairs (cell, twin) weighed by the cell's count squared, by hand over the draws."""
    values = {"shares_init": 0.8, "shares_data": 0.6, "shares_neither": 0.3, BOTH: 0.9}
    refits = grid_refits(INITS, DATAS, ulp_twins=["1-1", "3-3"])
    rows = [(a, b, 0, values[pair_kind(a, b)], pair_kind(a, b)) for a in refits for b in refits
            if a != b and pair_kind(a, b) is not None]  # fmt: skip
    pairs = pd.DataFrame(rows, columns=["anchor_seed", "pair_seed", "layer", "stability", "kind"])
    both = pairs["kind"] == BOTH
    pairs.loc[both, "stability"] = np.where(pairs.loc[both, "anchor_seed"].str.startswith("1-1"), 0.95, 0.85)
    table = seed_grid_table(pairs, n_boot=60, seed=3, confidence=0.8).set_index("statistic")
    cells = sorted(grid_refits(INITS, DATAS), key=str)
    counts = draw_resamples(60, len(cells), 1, 3).refit_counts
    k11, k33 = counts[:, cells.index("1-1")], counts[:, cells.index("3-3")]
    weights = np.stack([k11**2, k33**2], axis=1).astype(float)
    with np.errstate(invalid="ignore"):
        means = (weights * [0.95, 0.85]).sum(axis=1) / weights.sum(axis=1)
    expected = np.nanquantile(means, [0.1, 0.9])
    assert table.loc[BOTH, ["ci_low", "ci_high"]].tolist() == pytest.approx(list(expected), abs=1e-12)
    assert table.loc[BOTH, "estimate"] == pytest.approx(0.9, abs=reduction_atol(np.float64, 4))
    assert list(table.index[-3:]) == [BOTH, *FLOOR_FRACTIONS]


def test_a_grid_without_twins_has_no_floor_rows():
    pairs = _hand_pairs({"shares_init": 0.8, "shares_data": 0.6, "shares_neither": 0.3})
    table = seed_grid_table(pairs, n_boot=10, seed=0, confidence=0.9)
    assert not set(table["statistic"]) & {BOTH, *FLOOR_FRACTIONS}


def test_means_and_fractions_are_labelled_at_the_grids_cells_a_twin_counting_as_its_cell():
    from headstab.statistics.calibration import calibration_label

    values = {"shares_init": 0.8, "shares_data": 0.6, "shares_neither": 0.3, BOTH: 0.9}
    refits = grid_refits(INITS, DATAS, ulp_twins=["1-1", "3-3"])  # 9 cells, 11 refits
    rows = [(a, b, 0, values[pair_kind(a, b)], pair_kind(a, b)) for a in refits for b in refits
            if a != b and pair_kind(a, b) is not None]  # fmt: skip
    pairs = pd.DataFrame(rows, columns=["anchor_seed", "pair_seed", "layer", "stability", "kind"])
    table = seed_grid_table(pairs, n_boot=10, seed=0, confidence=0.9).set_index("statistic")
    assert table.columns[-1] == "calibration"
    means = list(KINDS) + [BOTH]
    assert (table.loc[means, "calibration"] == calibration_label("refit_bootstrap_seed_grid_means", 9)).all()
    fractions = table.drop(index=means)
    assert len(fractions) == 5
    assert (fractions["calibration"] == calibration_label("refit_bootstrap_seed_grid_fractions", 9)).all()


def _min_n(monkeypatch, method, min_n):
    """Set `method`'s min_n in the registry the section reads."""
    from dataclasses import replace

    from headstab.statistics import calibration

    monkeypatch.setitem(calibration.METHODS, method, replace(calibration.METHODS[method], min_n=min_n))


def test_the_labels_are_taken_at_the_cells_of_a_2_x_2_grid_with_a_twin(monkeypatch):
    values = {"shares_init": 0.8, "shares_data": 0.6, "shares_neither": 0.3, BOTH: 0.9}
    refits = grid_refits([1, 2], [1, 2], ulp_twins=["1-1"])  # 4 cells, 5 refits
    rows = [(a, b, 0, values[pair_kind(a, b)], pair_kind(a, b)) for a in refits for b in refits
            if a != b and pair_kind(a, b) is not None]  # fmt: skip
    pairs = pd.DataFrame(rows, columns=["anchor_seed", "pair_seed", "layer", "stability", "kind"])
    for min_n, label in ((4, "calibrated"), (5, "descriptive")):
        _min_n(monkeypatch, "refit_bootstrap_seed_grid_means", min_n)
        _min_n(monkeypatch, "refit_bootstrap_seed_grid_fractions", min_n)
        assert (seed_grid_table(pairs, n_boot=10, seed=0, confidence=0.9)["calibration"] == label).all()


def _grid_with_twins(cells, twins):
    """Pairs of one layer over `cells` and their one-ulp `twins`, at fixed values per kind."""
    values = {"shares_init": 0.8, "shares_data": 0.6, "shares_neither": 0.3, BOTH: 0.9}
    refits = [*cells, *twins]
    rows = [(a, b, 0, values[pair_kind(a, b)], pair_kind(a, b)) for a in refits for b in refits
            if a != b and pair_kind(a, b) is not None]  # fmt: skip
    return pd.DataFrame(rows, columns=["anchor_seed", "pair_seed", "layer", "stability", "kind"])


def test_means_and_fractions_take_their_own_methods_label(monkeypatch):
    pairs = _grid_with_twins(grid_refits([1, 2], [1, 2]), ["1-1-ulp"])
    _min_n(monkeypatch, "refit_bootstrap_seed_grid_means", 4)
    _min_n(monkeypatch, "refit_bootstrap_seed_grid_fractions", 5)
    table = seed_grid_table(pairs, n_boot=10, seed=0, confidence=0.9).set_index("statistic")
    means = [*KINDS, BOTH]
    assert (table.loc[means, "calibration"] == "calibrated").all()
    assert (table.drop(index=means)["calibration"] == "descriptive").all()


def test_every_twin_counts_as_its_cell_whatever_the_order_of_the_names(monkeypatch):
    # 4 cells, each with its twin: 4 units (8 would be calibrated from 5)
    twins = [f"{name}-ulp" for name in grid_refits([1, 2], [1, 2])]
    pairs = _grid_with_twins(grid_refits([1, 2], [1, 2]), twins)
    for method in ("refit_bootstrap_seed_grid_means", "refit_bootstrap_seed_grid_fractions"):
        _min_n(monkeypatch, method, 5)
    for order in (pairs, pairs.iloc[::-1]):
        assert (seed_grid_table(order, n_boot=10, seed=0, confidence=0.9)["calibration"] == "descriptive").all()


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered")
def test_a_floor_over_no_instability_is_undefined():
    # Pairs sharing neither seed match perfectly while a cell and its twin differ: no floor share to take.
    pairs = _grid_with_twins(grid_refits([1, 2], [1, 2]), ["1-1-ulp", "2-2-ulp"])
    pairs.loc[pairs["kind"] == "shares_neither", "stability"] = 1.0
    with np.errstate(all="ignore"):
        table = seed_grid_table(pairs, n_boot=20, seed=0, confidence=0.95).set_index("statistic")
    for name in FLOOR_FRACTIONS:
        assert np.isnan(table.loc[name, ["estimate", "ci_low", "ci_high"]].to_numpy(float)).all()
    assert table.loc[BOTH, "estimate"] == pytest.approx(0.9, abs=reduction_atol(np.float64, 4))


def test_a_paper_refit_and_its_grid_name_are_the_same_refit():
    with pytest.raises(ValueError, match=r"^refits 1 and '1-1' are the same refit$"):
        pair_kind(1, "1-1")
    with pytest.raises(ValueError, match=r"^refits '1-2' and '1-2' are the same refit$"):
        pair_kind("1-2", "1-2")


def test_the_pair_table_has_exactly_its_columns():
    similarity, refits = _similarity(
        lambda init, data: _unit(np.random.default_rng(init * 10 + data), N_LAYERS, N_HEADS)
    )
    pairs = grid_pair_table(pair_stability_table(similarity, refits, "primary", scopes=["same_layer"]))
    assert list(pairs.columns) == ["anchor_seed", "pair_seed", "layer", "stability", "kind"]
    assert pairs.index.tolist() == list(range(len(pairs)))


def test_a_twin_of_a_paper_refit_standing_for_its_cell_counts_as_that_refit(monkeypatch):
    # Paper refit 1 is the grid's cell 1-1: its twin 1-1-ulp is resampled with refit 1, 4 units in all.
    pairs = _grid_with_twins([1, "1-2", "2-1", "2-2"], ["1-1-ulp"])
    assert set(pairs.loc[pairs["kind"] == BOTH, "anchor_seed"]) == {1, "1-1-ulp"}
    for method in ("refit_bootstrap_seed_grid_means", "refit_bootstrap_seed_grid_fractions"):
        _min_n(monkeypatch, method, 5)
    assert (seed_grid_table(pairs, n_boot=10, seed=0, confidence=0.9)["calibration"] == "descriptive").all()
