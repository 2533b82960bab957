"""Universal neurons across refits: on planted refits exactly the planted neurons are universal (in another layer
only across layers), the per-layer share is the hand-counted one with its chance level, and dead neurons and
missing pairs are named, not counted."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from headstab.neurons.shares import (
    NEURON_COLUMNS,
    SHARE_COLUMNS,
    SHARE_METHOD,
    neuron_rows,
    neuron_scores,
    stack_pairs,
    universal_share_table,
)
from headstab.neurons.streamed import PairStatistics
from headstab.neurons.universality import pair_universality

N_TOKENS, N_LAYERS, D_MLP = 3000, 3, 64
REFITS = ("seed1", "seed2", "seed3")
# Planted: shared signal k sits at (layer, neuron) PLANTED[refit][k]; signal 2 sits in another layer in each refit.
PLANTED = {
    "seed1": [(0, 1), (1, 5), (0, 6)],
    "seed2": [(0, 4), (1, 0), (1, 2)],
    "seed3": [(0, 7), (1, 3), (2, 6)],
}


def planted_refits() -> dict[str, np.ndarray]:
    """[token, layer, d_mlp] per refit: planted neurons copy a shared signal plus 5% noise, the rest independent."""
    rng = np.random.default_rng(0)
    shared = rng.normal(size=(N_TOKENS, 3))
    out = {}
    for refit in REFITS:
        x = rng.normal(size=(N_TOKENS, N_LAYERS, D_MLP)) + 1.0
        for k, (layer, neuron) in enumerate(PLANTED[refit]):
            x[:, layer, neuron] = shared[:, k] + 0.05 * rng.normal(size=N_TOKENS)
        out[refit] = x
    return out


@pytest.fixture(scope="module")
def pair_maxima() -> dict[str, dict]:
    """{scope: {"max"/"null": {(anchor, other): [layer, d_mlp]}}} of every ordered pair of the planted refits."""
    acts = planted_refits()
    out = {scope: {"max": {}, "null": {}} for scope in ("same_layer", "cross_layer")}
    for a, b in itertools.combinations(REFITS, 2):
        stats = PairStatistics.empty(a, b, N_LAYERS, D_MLP, "cross_layer")
        stats.update(acts[a], acts[b])
        for direction, values in pair_universality(stats, n_draws=5, seed=1).items():
            for scope in out:
                out[scope]["max"][direction] = values[f"max_{scope}"]
                out[scope]["null"][direction] = values[f"null_{scope}"]
    return out


def planted_mask(same_layer_only: bool) -> np.ndarray:
    mask = np.zeros((len(REFITS), N_LAYERS, D_MLP), dtype=bool)
    for r, refit in enumerate(REFITS):
        for k, (layer, neuron) in enumerate(PLANTED[refit]):
            mask[r, layer, neuron] = k < 2 or not same_layer_only  # signal 2 changes layer across refits
    return mask


@pytest.mark.parametrize("scope", ["same_layer", "cross_layer"])
def test_exactly_the_planted_neurons_are_universal(pair_maxima, scope):
    pairs = {key: stack_pairs(values, REFITS) for key, values in pair_maxima[scope].items()}
    scores = neuron_scores(pairs["max"], pairs["null"])
    np.testing.assert_array_equal(scores["universal"], planted_mask(same_layer_only=scope == "same_layer"))
    # the null of a planted neuron is a random map of a layer that holds its copy: the copy's largest weight
    # in a random unit vector of 64 dimensions, about 0.4; the other neurons' null is near 0
    assert scores["max"][planted_mask(True)].min() > 0.99 and scores["null"].max() < 0.5
    assert scores["null"][~planted_mask(False)].max() < 0.2
    np.testing.assert_allclose(scores["excess"], scores["max"] - scores["null"])


def test_the_layer_share_is_the_planted_share_with_a_chance_level_of_zero(pair_maxima):
    pairs = {key: stack_pairs(values, REFITS) for key, values in pair_maxima["cross_layer"].items()}
    table = universal_share_table(pairs["max"], pairs["null"], n_boot=200, seed=0, confidence=0.95)
    assert list(table.columns) == SHARE_COLUMNS
    # planted neurons of 64 per refit: layer 0: 2, 1, 1; layer 1: 1, 2, 1; layer 2: 0, 0, 1
    np.testing.assert_allclose(table["universal_share"], np.array([4, 4, 1]) / 192)
    assert (table["ci_low"] <= table["universal_share"]).all() and (table["universal_share"] <= table["ci_high"]).all()
    assert (table["ci_low"] < table["ci_high"]).all()  # the anchors differ in their planted counts
    assert (table[["null_share", "null_ci_low", "null_ci_high"]].to_numpy() == 0).all()
    assert table["n_neurons"].tolist() == [192] * 3 and table["n_dead"].tolist() == [0] * 3
    assert table["calibration"].eq("descriptive").all() and table["relative_depth"].tolist() == [1 / 3, 2 / 3, 1.0]
    assert table["layer"].tolist() == [0, 1, 2] and table["n_refits"].tolist() == [3] * 3
    assert table["n_boot"].tolist() == [200] * 3


def test_scores_and_shares_by_hand():
    """3 refits, 1 layer, 2 neurons; partner means, universal flags, excess and share computed by hand."""
    pair_max = np.full((3, 3, 1, 2), np.nan)  # [anchor, other, layer, neuron]; the diagonal is never read
    pair_max[0, 1, 0], pair_max[0, 2, 0] = (0.9, 0.2), (0.3, 0.4)  # means 0.6, 0.3
    pair_max[1, 0, 0], pair_max[1, 2, 0] = (0.6, 0.75), (0.6, 0.25)  # means 0.6, 0.5: at 0.5, not above it
    pair_max[2, 0, 0], pair_max[2, 1, 0] = (np.nan, 0.7), (np.nan, 0.5)  # refit 2's neuron 0 is dead; 0.6
    pair_null = np.where(np.isnan(pair_max), np.nan, 0.1)
    scores = neuron_scores(pair_max, pair_null)
    np.testing.assert_allclose(scores["max"][:, 0], [[0.6, 0.3], [0.6, 0.5], [np.nan, 0.6]])
    np.testing.assert_array_equal(scores["universal"][:, 0], [[True, False], [True, False], [False, True]])
    table = universal_share_table(pair_max, pair_null, n_boot=50, seed=0, confidence=0.9).iloc[0]
    assert table["universal_share"] == pytest.approx(3 / 5) and table["n_dead"] == 1 and table["n_neurons"] == 5
    assert table["mean_max"] == pytest.approx((0.6 + 0.3 + 0.6 + 0.5 + 0.6) / 5)
    assert table["excess"] == pytest.approx(table["mean_max"] - 0.1)
    assert table["null_share"] == 0.0 and table["mean_null_max"] == pytest.approx(0.1)


def two_refits_by_hand() -> tuple[np.ndarray, np.ndarray]:
    """2 refits, 1 layer, 3 neurons stacked from their two directions; anchor a's neuron 2 has a NaN null."""
    maxima = {("a", "b"): [[0.8, 0.4, 0.6]], ("b", "a"): [[0.7, 0.3, 0.9]]}
    nulls = {("a", "b"): [[0.5, 0.2, np.nan]], ("b", "a"): [[0.1, 0.5, 0.2]]}
    return stack_pairs(maxima, ["a", "b"]), stack_pairs(nulls, ["a", "b"])


def test_a_neuron_without_a_null_is_in_no_share_and_a_null_at_the_threshold_is_not_universal():
    """Each anchor's one partner is the other refit, so scores are the pair values; 5 live neurons: maxima 0.8,
    0.4 (a) and 0.7, 0.3, 0.9 (b), nulls 0.5, 0.2 and 0.1, 0.5, 0.2 (two exactly at the threshold)."""
    pair_max, pair_null = two_refits_by_hand()
    assert pair_max.shape == (2, 2, 1, 3) and np.isnan(pair_max[[0, 1], [0, 1]]).all()
    table = universal_share_table(pair_max, pair_null, n_boot=20, seed=0, confidence=0.9).iloc[0]
    assert table["n_neurons"] == 5 and table["n_dead"] == 1
    assert table["universal_share"] == pytest.approx(3 / 5) and table["null_share"] == 0.0
    assert table["mean_max"] == pytest.approx(3.1 / 5) and table["mean_null_max"] == pytest.approx(1.5 / 5)
    assert table["excess"] == pytest.approx(1.6 / 5)


def test_two_refits_give_no_interval_and_three_give_one():
    """With 2 refits every resample repeats the sample (each anchor's one partner is the other refit): NaN, not a
    zero-width interval; a third refit gives intervals that contain the estimates."""
    interval_columns = ["ci_low", "ci_high", "null_ci_low", "null_ci_high", "excess_ci_low", "excess_ci_high"]
    two = universal_share_table(*two_refits_by_hand(), n_boot=50, seed=0, confidence=0.9).iloc[0]
    assert two[interval_columns].isna().all() and two["universal_share"] == pytest.approx(3 / 5)
    rng = np.random.default_rng(3)
    values = rng.uniform(0.2, 0.9, size=(3, 3, 1, 40))
    values[np.arange(3), np.arange(3)] = np.nan
    three = universal_share_table(values, np.where(np.isnan(values), np.nan, 0.3), n_boot=200, seed=0, confidence=0.9)
    row = three.iloc[0]
    assert row[interval_columns].notna().all() and row["ci_low"] < row["ci_high"]
    assert row["ci_low"] <= row["universal_share"] <= row["ci_high"]


def test_neuron_rows_use_the_threshold_and_keep_the_null_per_neuron():
    pair_max, pair_null = two_refits_by_hand()
    rows = neuron_rows(pair_max, pair_null, ["a", "b"], threshold=0.75)
    assert list(rows.columns) == NEURON_COLUMNS
    assert rows["anchor_seed"].tolist() == ["a"] * 3 + ["b"] * 3 and rows["neuron"].tolist() == [0, 1, 2] * 2
    assert rows["layer"].tolist() == [0] * 6
    assert rows["universal"].tolist() == [True, False, False, False, False, True]
    np.testing.assert_array_equal(rows["max_correlation"], [0.8, 0.4, 0.6, 0.7, 0.3, 0.9])
    np.testing.assert_array_equal(rows["null_max_correlation"], [0.5, 0.2, np.nan, 0.1, 0.5, 0.2])
    np.testing.assert_allclose(rows["excess"], [0.3, 0.2, np.nan, 0.6, -0.2, 0.7])


def test_the_label_follows_the_number_of_refits(monkeypatch):
    """Planted: the share's interval calibrated from 4 refits on; 3 refits are descriptive, 4 calibrated."""
    from headstab.statistics import calibration

    planted = calibration.Method(SHARE_METHOD, "interval", "refits", 4, "share of universal neurons")
    monkeypatch.setitem(calibration.METHODS, SHARE_METHOD, planted)
    rng = np.random.default_rng(2)
    labels = []
    for n_refits in (3, 4):
        pair_max = rng.uniform(0.2, 0.9, size=(n_refits, n_refits, 2, 5))
        table = universal_share_table(pair_max, pair_max / 2, n_boot=10, seed=0, confidence=0.9)
        labels.append(table["calibration"].tolist())
    assert labels == [["descriptive"] * 2, ["calibrated"] * 2]


def test_a_higher_threshold_finds_fewer_universal_neurons():
    rng = np.random.default_rng(0)
    pair_max = rng.uniform(0.2, 0.9, size=(4, 4, 2, 50))
    pair_null = np.full_like(pair_max, 0.1)
    low = universal_share_table(pair_max, pair_null, threshold=0.4, n_boot=100, seed=0, confidence=0.95)
    high = universal_share_table(pair_max, pair_null, threshold=0.7, n_boot=100, seed=0, confidence=0.95)
    assert (high["universal_share"] < low["universal_share"]).all() and (high["threshold"] == 0.7).all()
    scores = neuron_scores(pair_max, pair_null, threshold=0.4)
    np.testing.assert_allclose(low["universal_share"], scores["universal"].mean(axis=(0, 2)))


def test_a_missing_pair_direction_is_named_with_the_fix():
    values = {("seed1", "seed2"): np.zeros((1, 2)), ("seed2", "seed1"): np.zeros((1, 2))}
    values[("seed1", "seed3")] = np.zeros((1, 2))
    with pytest.raises(ValueError, match=r"\('seed3', 'seed2'\)\] are missing \(3 of 6 ordered pairs\).*swapped"):
        stack_pairs(values, ["seed1", "seed2", "seed3"])
    # five missing: the first three are named, then the count and the fix
    message = (
        r"^neuron maxima of the refit pairs \[\('seed1', 'seed3'\), \('seed2', 'seed1'\), \('seed2', 'seed3'\)\] "
        r"are missing \(5 of 6 ordered pairs\); compute every pair, each in both directions "
        r"\(PairStatistics\.swapped gives the other direction\)$"
    )
    with pytest.raises(ValueError, match=message):
        stack_pairs({("seed1", "seed2"): np.zeros((1, 2))}, ["seed1", "seed2", "seed3"])
    with pytest.raises(ValueError, match=r"null maxima of shape \(2, 2, 1\) for maxima of shape \(2, 2, 1, 3\)"):
        universal_share_table(np.zeros((2, 2, 1, 3)), np.zeros((2, 2, 1)), n_boot=10, seed=0, confidence=0.9)


def test_the_interval_resamples_anchors_and_each_anchors_partners():
    """The share's replicates by a plain loop over the bootstrap's own draws: anchor a weighs k_a, its score is
    the mean over its drawn partners (a partner drawn twice counts twice)."""
    from headstab.statistics.bootstrap import draw_resamples, percentile_interval

    rng = np.random.default_rng(4)
    pair_max = rng.uniform(0.3, 0.7, size=(4, 4, 1, 6))
    pair_null = rng.uniform(0.0, 0.6, size=(4, 4, 1, 6))
    table = universal_share_table(pair_max, pair_null, n_boot=300, seed=9, confidence=0.9).iloc[0]
    draws = draw_resamples(300, 4, 1, 9)
    shares, nulls, excesses = [], [], []
    for r in range(300):
        universal = null_universal = excess = 0.0
        for a in range(4):
            partners = [b for b in range(4) for _ in range(draws.pair_counts[r, a, b])]
            score = np.mean([pair_max[a, b, 0] for b in partners], axis=0)
            null = np.mean([pair_null[a, b, 0] for b in partners], axis=0)
            universal += draws.refit_counts[r, a] * np.sum(score > 0.5)
            null_universal += draws.refit_counts[r, a] * np.sum(null > 0.5)
            excess += draws.refit_counts[r, a] * np.sum(score - null)
        shares.append(universal / (4 * 6))
        nulls.append(null_universal / (4 * 6))
        excesses.append(excess / (4 * 6))
    np.testing.assert_allclose((table["ci_low"], table["ci_high"]), percentile_interval(np.array(shares), 0.9))
    np.testing.assert_allclose((table["null_ci_low"], table["null_ci_high"]), percentile_interval(np.array(nulls), 0.9))
    # the excess is continuous, so its interval pins the draws themselves (seed 9), not only their counts
    excess_interval = percentile_interval(np.array(excesses), 0.9)
    np.testing.assert_allclose((table["excess_ci_low"], table["excess_ci_high"]), excess_interval, rtol=1e-12)
    assert excess_interval[0] < excess_interval[1]


def test_neuron_rows_are_the_scores_one_row_per_anchor_neuron(pair_maxima):
    pairs = {key: stack_pairs(values, REFITS) for key, values in pair_maxima["same_layer"].items()}
    rows = neuron_rows(pairs["max"], pairs["null"], REFITS)
    assert list(rows.columns) == NEURON_COLUMNS and len(rows) == 3 * N_LAYERS * D_MLP
    universal = rows[rows["universal"]]
    found = {(r.anchor_seed, r.layer, r.neuron) for r in universal.itertuples()}
    assert found == {(refit, *PLANTED[refit][k]) for refit in REFITS for k in range(2)}
    row = rows[(rows["anchor_seed"] == "seed2") & (rows["layer"] == 1) & (rows["neuron"] == 0)].iloc[0]
    scores = neuron_scores(pairs["max"], pairs["null"])
    assert row["max_correlation"] == scores["max"][1, 1, 0] and row["excess"] == scores["excess"][1, 1, 0]


def test_the_shares_import_no_torch():
    """An analysis job computes the tables from the stored maxima without loading torch (seconds to import)."""
    import subprocess
    import sys

    check = "import sys, headstab.neurons.shares; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "False", result.stderr[-2000:]
