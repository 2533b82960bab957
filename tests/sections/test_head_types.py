"""Weak and strong universality of head types: by hand (the chance level and the chance-corrected strong
universality too), exact intervals for shares of refits, NaN intervals where one refit contributes, and the
other intervals equal to the refit-resampled means of rows."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol

from headstab.sections.head_types import (
    STATISTIC_METHODS,
    TYPES,
    UNIVERSALITY_COLUMNS,
    UNIVERSALITY_STATISTICS,
    universality_table,
)
from headstab.statistics.binomial import share_interval
from headstab.statistics.calibration import calibration_label
from headstab.statistics.refit_weights import refit_interval

SEEDS = [1, 2, 3]
ATOL = reduction_atol(np.float64, 64)


def hand_case():
    """One layer of three heads in refits 1-3. The previous-token head is head 0 of refit 1 and head 1 of
    refit 2; refit 3 has none. Best matches: refit 1's head 0 finds refit 2's head 1 (agrees) and refit 3's
    head 0 (does not); refit 2's head 1 finds refit 1's head 0 (agrees), refit 3's head 2 (does not).
    One-to-one: refit 1's head 0 takes refit 2's head 2 and refit 2's head 1 takes refit 1's head 2 (mutual
    partners, as the symmetric assignment gives them): no previous-token head keeps a previous-token partner."""
    labels = {1: ["previous_token", "none", "bos"], 2: ["none", "previous_token", "bos"], 3: ["none", "none", "bos"]}
    types = pd.DataFrame(
        [(refit, 0, head, label) for refit, heads in labels.items() for head, label in enumerate(heads)],
        columns=["refit", "layer", "head", "type"],
    ).assign(threshold_rule="fixed")
    best = {(1, 2): [1, 0, 2], (1, 3): [0, 1, 2], (2, 1): [0, 0, 2], (2, 3): [0, 2, 2], (3, 1): [0, 1, 2]}
    best[(3, 2)] = [0, 1, 2]
    assigned = {key: [0, 1, 2] for key in best} | {(1, 2): [2, 0, 1], (2, 1): [1, 2, 0]}
    # similarity to the best match: 0.9 / 0.8 for refit 1's head 0 (to refits 2 / 3), 0.95 / 0.85 for refit 2's head 1
    similarity = {(1, 2, 0): 0.9, (1, 3, 0): 0.8, (2, 1, 1): 0.95, (2, 3, 1): 0.85}
    pairs = pd.DataFrame(
        [
            (a, b, 0, head, best[(a, b)][head], similarity.get((a, b, head), 0.5), assigned[(a, b)][head])
            for a, b in itertools.permutations(SEEDS, 2)
            for head in range(3)
        ],
        columns=["anchor_seed", "pair_seed", "layer", "head", "best_head", "similarity", "assigned_head"],
    )
    # as read from pair_stability.csv, whose cross-layer rows leave assigned_head empty: float columns
    pairs = pairs.assign(assigned_similarity=pairs["similarity"] - 0.1).astype({"assigned_head": float})
    stability = {1: [0.9, 0.3, 0.8], 2: [0.7, 0.95, 0.8], 3: [0.2, 0.4, 0.8]}
    heads = pd.DataFrame(
        [(refit, 0, head, value) for refit, values in stability.items() for head, value in enumerate(values)],
        columns=["anchor_seed", "layer", "head", "stability"],
    )
    heads = heads.assign(above_null=heads["stability"] - 0.5, one_to_one_above_null=0.0)
    return types, pairs, heads


def test_weak_and_strong_universality_by_hand():
    table = universality_table(*hand_case(), SEEDS, n_boot=200, seed=0, confidence=0.9)
    assert list(table.columns) == UNIVERSALITY_COLUMNS
    assert len(table) == len(TYPES) * len(UNIVERSALITY_STATISTICS)
    value = table.set_index(["type", "statistic"])["estimate"]
    n = table.set_index(["type", "statistic"])["n"]
    # previous-token anchors (1, head 0) and (2, head 1), each paired with the two other refits; the pair refit's
    # share of previous-token heads is 1/3 (refits 1, 2) or 0 (refit 3), so a random partner agrees 1/6 of the time
    expected = {
        ("previous_token", "weak_universality"): 2 / 3,
        ("previous_token", "head_share"): 2 / 9,
        ("previous_token", "strong_universality_best_match"): 2 / 4,
        ("previous_token", "strong_universality_one_to_one"): 0.0,
        ("previous_token", "strong_universality_chance"): 1 / 6,
        ("previous_token", "strong_universality_best_match_corrected"): (1 / 2 - 1 / 6) / (1 - 1 / 6),
        ("previous_token", "strong_universality_one_to_one_corrected"): (0 - 1 / 6) / (1 - 1 / 6),
        ("previous_token", "stability"): (0.9 + 0.8 + 0.95 + 0.85) / 4,
        ("previous_token", "stability_one_to_one"): (0.8 + 0.7 + 0.85 + 0.75) / 4,
        ("previous_token", "above_null"): (0.4 + 0.45) / 2,
        ("bos", "weak_universality"): 1.0,
        ("bos", "strong_universality_best_match"): 1.0,  # every BOS head's best match is the other BOS head
        ("bos", "strong_universality_chance"): 1 / 3,
        ("bos", "strong_universality_best_match_corrected"): 1.0,
        ("bos", "stability"): 0.5,
        ("none", "weak_universality"): 1.0,
        ("none", "head_share"): 4 / 9,
    }
    for key, number in expected.items():
        np.testing.assert_allclose(value[key], number, atol=ATOL, err_msg=str(key))
    assert n[("previous_token", "strong_universality_best_match")] == 4 and n[("previous_token", "stability")] == 4
    assert n[("previous_token", "strong_universality_chance")] == 4 and n[("previous_token", "above_null")] == 2
    assert n[("previous_token", "strong_universality_best_match_corrected")] == 4  # anchors, not counts - chance
    assert n[("previous_token", "stability_one_to_one")] == 4
    assert n[("previous_token", "weak_universality")] == 3 and n[("previous_token", "head_share")] == 3
    assert np.isnan(value[("induction", "strong_universality_best_match")]) and value[("induction", "head_share")] == 0
    assert (table["relative_depth"] == 1.0).all() and (table["threshold_rule"] == "fixed").all()


def test_weak_universality_has_the_exact_interval_and_every_row_its_calibration_label():
    table = universality_table(*hand_case(), SEEDS, n_boot=200, seed=0, confidence=0.9).set_index(["type", "statistic"])
    row = table.loc[("previous_token", "weak_universality")]
    assert (row["estimate"], row["ci_low"], row["ci_high"]) == pytest.approx(share_interval(2, 3, 0.9), abs=1e-12)
    row = table.loc[("bos", "weak_universality")]
    assert row["ci_high"] == 1.0 and row["ci_low"] == pytest.approx(0.05 ** (1 / 3), abs=1e-12)  # not [1, 1]
    for (name, statistic), label in table["calibration"].items():
        assert label == calibration_label(STATISTIC_METHODS[statistic], 3), (name, statistic)


def test_a_type_every_partner_has_has_no_chance_corrected_strong_universality():
    types, pairs, heads = hand_case()
    table = universality_table(types.assign(type="bos"), pairs, heads, SEEDS, n_boot=100, seed=0, confidence=0.9)
    value = table.set_index(["type", "statistic"])["estimate"]
    assert (
        value[("bos", "strong_universality_best_match")] == 1.0 and value[("bos", "strong_universality_chance")] == 1.0
    )
    assert np.isnan(value[("bos", "strong_universality_best_match_corrected")])
    assert np.isnan(value[("bos", "strong_universality_one_to_one_corrected")])


def test_intervals_are_nan_where_one_refit_contributes():
    """Only refit 1 has a previous-token head: no spread over refits behind the strong and stability rows."""
    types, pairs, heads = hand_case()
    types = types.assign(type=np.where((types["refit"] == 1) & (types["head"] == 0), "previous_token", "none"))
    table = universality_table(types, pairs, heads, SEEDS, n_boot=200, seed=0, confidence=0.9)
    rows = table[table["type"] == "previous_token"].set_index("statistic")
    one_refit = [s for s in UNIVERSALITY_STATISTICS if s.startswith("strong") or "stability" in s or "null" in s]
    for statistic in one_refit:
        assert np.isfinite(rows.loc[statistic, "estimate"]), statistic
        assert np.isnan(rows.loc[statistic, "ci_low"]) and np.isnan(rows.loc[statistic, "ci_high"]), statistic
    for statistic in ("weak_universality", "head_share"):  # every refit contributes to these
        assert rows.loc[statistic, "ci_high"] > rows.loc[statistic, "ci_low"], statistic


def random_case(rng, n_refits=5, n_layers=2, n_heads=4):
    seeds = list(range(10, 10 + n_refits))
    labels = rng.choice(["previous_token", "none", "induction+bos"], size=(n_refits, n_layers, n_heads))
    grid = np.indices((n_refits, n_layers, n_heads)).reshape(3, -1).T
    types = pd.DataFrame(
        {"refit": np.asarray(seeds)[grid[:, 0]], "layer": grid[:, 1], "head": grid[:, 2], "type": labels.ravel()}
    ).assign(threshold_rule="step0_quantile")
    rows = [
        (seeds[a], seeds[b], layer, head, rng.integers(n_heads), rng.random(), rng.integers(n_heads))
        for a, b in itertools.permutations(range(n_refits), 2)
        for layer in range(n_layers)
        for head in range(n_heads)
    ]
    columns = ["anchor_seed", "pair_seed", "layer", "head", "best_head", "similarity", "assigned_head"]
    pairs = pd.DataFrame(rows, columns=columns).assign(assigned_similarity=lambda f: f["similarity"] ** 2)
    heads = types[["refit", "layer", "head"]].rename(columns={"refit": "anchor_seed"})
    heads = heads.assign(above_null=rng.random(len(heads)))
    return seeds, labels, types, pairs, heads.assign(one_to_one_above_null=rng.random(len(heads)))


@pytest.mark.parametrize(
    "statistic", ["strong_universality_best_match", "stability_one_to_one", "above_null", "head_share"]
)
def test_intervals_equal_the_refit_resampled_mean_over_rows(statistic):
    """The ratio of sums over refits (pairs) is the refit-weighted mean of the rows it pools."""
    seeds, labels, types, pairs, heads = random_case(np.random.default_rng(1))
    table = universality_table(types, pairs, heads, seeds, n_boot=300, seed=4, confidence=0.9)
    index = {s: i for i, s in enumerate(seeds)}
    kind = "induction"
    for layer in range(2):
        has = np.char.find(labels.astype(str), kind) >= 0  # [refit, layer, head]
        rows = pairs[pairs["layer"] == layer]
        a, b = rows["anchor_seed"].map(index).to_numpy(), rows["pair_seed"].map(index).to_numpy()
        anchor = has[a, layer, rows["head"].to_numpy()]
        weights = None
        if statistic == "strong_universality_best_match":
            x = has[b, layer, rows["best_head"].to_numpy()][anchor].astype(float)
            refits = np.stack([a, b], axis=1)[anchor]
        elif statistic == "stability_one_to_one":
            x, refits = rows["assigned_similarity"].to_numpy()[anchor], np.stack([a, b], axis=1)[anchor]
        elif statistic == "above_null":
            rows = heads[heads["layer"] == layer]
            a = rows["anchor_seed"].map(index).to_numpy()
            chosen = has[a, layer, rows["head"].to_numpy()]
            x, refits = rows["above_null"].to_numpy()[chosen], a[chosen]
        else:
            x, refits = has[:, layer].mean(axis=1), np.arange(len(seeds))
        expected = refit_interval("mean", x, weights, refits, len(seeds), 300, 4, 0.9)
        row = table[(table["layer"] == layer) & (table["type"] == kind) & (table["statistic"] == statistic)].iloc[0]
        np.testing.assert_allclose([row["estimate"], row["ci_low"], row["ci_high"]], expected, atol=ATOL)


def test_types_of_other_refits_are_refused():
    types, pairs, heads = hand_case()
    with pytest.raises(ValueError, match="Rebuild both"):
        universality_table(types, pairs, heads, [1, 2, 4], n_boot=10, seed=0, confidence=0.9)


def test_at_twelve_refits_each_interval_carries_its_methods_measured_label():
    """docs/statistics.md: exact shares and strong universality calibrated from 4 refits, the head share from 12,
    stability per type from 50, above-null per type never."""
    seeds, _, types, pairs, heads = random_case(np.random.default_rng(2), n_refits=12, n_layers=1)
    table = universality_table(types, pairs, heads, seeds, n_boot=50, seed=0, confidence=0.9)
    labels = table.groupby("statistic")["calibration"].unique().map(lambda found: found.tolist())
    calibrated = {"weak_universality", "head_share", *(s for s in UNIVERSALITY_STATISTICS if s.startswith("strong"))}
    for statistic in UNIVERSALITY_STATISTICS:
        expected = "calibrated" if statistic in calibrated else "descriptive"
        assert labels[statistic] == [expected], statistic


def test_two_contributing_refits_give_an_interval_and_one_or_two_refits_run():
    types, pairs, heads = hand_case()
    table = universality_table(types, pairs, heads, SEEDS, n_boot=200, seed=0, confidence=0.9)
    rows = table[table["type"] == "previous_token"].set_index("statistic")  # anchors in refits 1 and 2 only
    for statistic in ("strong_universality_best_match", "stability", "above_null"):
        assert rows.loc[statistic, "ci_low"] <= rows.loc[statistic, "estimate"] <= rows.loc[statistic, "ci_high"]
    two = [1, 2]
    kept = (types["refit"].isin(two), pairs["anchor_seed"].isin(two) & pairs["pair_seed"].isin(two))
    table = universality_table(types[kept[0]], pairs[kept[1]], heads[heads["anchor_seed"].isin(two)], two,
                               n_boot=100, seed=0, confidence=0.9).set_index(["type", "statistic"])  # fmt: skip
    assert np.isfinite(table.loc[("bos", "stability"), ["ci_low", "ci_high"]].to_numpy(float)).all()
    one = universality_table(types[types["refit"] == 1], pairs.iloc[:0], heads[heads["anchor_seed"] == 1], [1],
                             n_boot=100, seed=0, confidence=0.9)  # fmt: skip
    assert (
        one[["ci_low", "ci_high"]].isna().all().all() and (one["n"][one["statistic"] == "weak_universality"] == 1).all()
    )
    assert one.set_index(["type", "statistic"]).loc[("bos", "head_share"), "estimate"] == pytest.approx(1 / 3)


def test_relative_depth_counts_layers_from_one():
    seeds, _, types, pairs, heads = random_case(np.random.default_rng(3), n_layers=4)
    table = universality_table(types, pairs, heads, seeds, n_boot=20, seed=0, confidence=0.9)
    assert dict(zip(table["layer"], table["relative_depth"])) == {0: 0.25, 1: 0.5, 2: 0.75, 3: 1.0}
