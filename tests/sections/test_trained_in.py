"""Trained-in head types: the same refits at step 0 and trained, exact share intervals, the exact paired test and
its verdict, the sentences (p and n, never an interval read as a difference), and the threshold sensitivity."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headstab.head_types import CRITERIA, HEAD_TYPES, SCORE_COLUMNS
from headstab.sections.trained_in import (
    SENSITIVITY_COLUMNS,
    TRAINED_IN_COLUMNS,
    paired_rows,
    sensitivity_sentences,
    sensitivity_table,
    trained_in_sentences,
    trained_in_table,
    weak_universality,
)
from headstab.statistics.calibration import calibration_label

N_LAYERS, N_HEADS = 2, 4
CP_LOW = {4: 0.025 ** (1 / 4), 6: 0.025 ** (1 / 6), 8: 0.025 ** (1 / 8)}  # Clopper-Pearson lower end at n of n


def typed(previous_token_refits: set[int], n_refits: int = 8, layer: int = 0, other: str = "none") -> pd.DataFrame:
    """Heads of refits 1..n_refits: head 0 of `layer` a previous-token head in the given refits, head 1 of layer 1
    of type `other` in every refit, the rest untyped."""
    rows = [
        (refit, lay, head, "previous_token" if (refit in previous_token_refits and lay == layer and head == 0)
         else other if (lay, head) == (1, 1) else "none")
        for refit in range(1, n_refits + 1)
        for lay in range(N_LAYERS)
        for head in range(N_HEADS)
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["refit", "layer", "head", "type"])


def universality(above_null: float, label: str = "descriptive") -> pd.DataFrame:
    rows = [
        (layer, name, statistic, value if name == "previous_token" else np.nan, value - 0.01, value + 0.01, label)
        for layer in range(N_LAYERS)
        for name in HEAD_TYPES
        for statistic, value in (("stability", 0.9), ("above_null", above_null))
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["layer", "type", "statistic", "estimate", "ci_low", "ci_high", "calibration"])


def table(trained: set[int], step0: set[int], n_refits: int = 8, **kwargs) -> pd.DataFrame:
    options = {"min_share": 0.75, "confidence": 0.95} | kwargs
    result = trained_in_table("arch", typed(trained, n_refits), typed(step0, n_refits), universality(0.05), **options)
    assert list(result.columns) == TRAINED_IN_COLUMNS and (result["architecture"] == "arch").all()
    return result.set_index(["layer", "type"])


def test_weak_universality_is_the_share_of_refits_with_an_exact_interval():
    share, low, high, n = weak_universality(typed({1, 2, 3, 4, 5, 6}), "previous_token", 0, 0.95)
    from scipy.stats import beta

    assert (share, n) == (6 / 8, 8)
    assert (low, high) == pytest.approx((beta.ppf(0.025, 6, 3), beta.ppf(0.975, 7, 2)), abs=1e-10)
    assert weak_universality(typed({1, 2}), "previous_token", 1, 0.95)[:3] == pytest.approx((0.0, 0.0, 1 - CP_LOW[8]))
    assert weak_universality(typed(set(range(1, 9))), "previous_token", 0, 0.95)[:3] == pytest.approx((1, CP_LOW[8], 1))
    one = weak_universality(typed({1}, n_refits=1), "previous_token", 0, 0.95)
    assert one[0] == 1.0 and np.isnan(one[1]) and np.isnan(one[2]) and one[3] == 1


def test_six_of_six_against_none_is_trained_in_at_one_in_64():
    result = table(set(range(1, 7)), set(), n_refits=6)
    row = result.loc[(0, "previous_token")]
    assert len(result) == N_LAYERS * len(HEAD_TYPES)
    assert (row["trained"], row["step0"], row["n_trained"], row["n_step0"]) == (1.0, 0.0, 6, 6)
    assert (row["trained_only"], row["step0_only"]) == (6, 0)
    assert row["p_value"] == 1 / 64 and row["smallest_p"] == 1 / 64 and row["trained_in"]
    assert row["q_value"] == 1 / 64  # the only row whose discordant refits could reach 0.05
    assert result.drop(index=(0, "previous_token"))["q_value"].isna().all()
    assert row[["trained_ci_low", "trained_ci_high"]].tolist() == pytest.approx([CP_LOW[6], 1.0])
    assert row[["step0_ci_low", "step0_ci_high"]].tolist() == pytest.approx([0.0, 1 - CP_LOW[6]])
    assert row[["above_null", "above_null_ci_low", "above_null_ci_high"]].tolist() == pytest.approx([0.05, 0.04, 0.06])
    assert row["above_null_calibration"] == "descriptive"
    assert result["trained_in"].sum() == 1 and not result.loc[(1, "previous_token"), "trained_in"]
    assert result.loc[(1, "previous_token"), "p_value"] == 1.0  # no refit changed


def test_four_of_four_against_none_cannot_be_trained_in():
    row = table({1, 2, 3, 4}, set(), n_refits=4).loc[(0, "previous_token")]
    assert (row["trained"], row["step0"]) == (1.0, 0.0)
    assert row["p_value"] == 0.0625 and row["smallest_p"] == 0.0625 and not row["trained_in"]
    assert np.isnan(row["q_value"])  # 4 discordant refits cannot reach 0.05: not in the family
    assert row["trained_ci_low"] == pytest.approx(0.3976, abs=1e-4)  # exact, not [1.00, 1.00]
    assert row["ci_calibration"] == calibration_label("refit_share_exact", 4)
    assert row["p_calibration"] == calibration_label("paired_exact_mcnemar", 4)


def test_the_test_is_paired_losses_count_against_gains():
    # trained: refits 1-7; step 0: refits 5-8. Gained 1-4, lost 8: p = P(X >= 4 | 5) = 6/32
    row = table(set(range(1, 8)), {5, 6, 7, 8}).loc[(0, "previous_token")]
    assert (row["trained_only"], row["step0_only"]) == (4, 1)
    assert row["p_value"] == pytest.approx(6 / 32, abs=1e-15) and not row["trained_in"]
    # an unpaired reading of 7/8 against 4/8 would use all 8 refits; the paired test uses the 5 that changed


def test_below_the_share_or_above_alpha_is_not_trained_in():
    assert not table({1, 2, 3, 4, 5}, set())["trained_in"].any()  # p = 1/32 but 5 of 8 < 0.75
    assert table({1, 2, 3, 4, 5}, set(), min_share=0.6)["trained_in"].any()
    assert table({1, 2, 3, 4, 5, 6}, set())["trained_in"].any()  # 6 of 8 = 0.75, p = 1/64
    assert not table(set(range(1, 9)), {1, 2, 3, 4, 5})["trained_in"].any()  # 3 gained: p = 1/8


def two_types(previous_token: set[int], bos: set[int], n_refits: int = 8) -> pd.DataFrame:
    """Refits 1..n: head 0 of layer 0 previous-token in the given refits, head 1 of layer 1 BOS in the others."""
    rows = [
        (refit, layer, head, "previous_token" if (layer, head) == (0, 0) and refit in previous_token
         else "bos" if (layer, head) == (1, 1) and refit in bos else "none")
        for refit in range(1, n_refits + 1) for layer in range(N_LAYERS) for head in range(N_HEADS)
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["refit", "layer", "head", "type"])


def test_the_q_value_is_benjamini_hochberg_over_the_testable_rows():
    """Previous-token gained in refits 1-5 (p = 1/32); BOS gained in 1-3 and lost in 4-6 (p = 42/64). Both rows can
    reach 0.05, so q(previous-token) = 2 x 1/32 = 0.0625: p <= 0.05 but not trained in."""
    trained, step0 = two_types({1, 2, 3, 4, 5, 6, 7}, {1, 2, 3}), two_types({6, 7}, {4, 5, 6})
    result = trained_in_table("arch", trained, step0, universality(0.05), min_share=0.75, confidence=0.95)
    rows = result.set_index(["layer", "type"])
    assert rows.loc[(0, "previous_token"), "p_value"] == 1 / 32 and rows.loc[(1, "bos"), "p_value"] == 42 / 64
    assert rows.loc[(0, "previous_token"), "q_value"] == pytest.approx(1 / 16, abs=1e-15)
    assert rows.loc[(1, "bos"), "q_value"] == pytest.approx(42 / 64, abs=1e-15)
    assert not rows.loc[(0, "previous_token"), "trained_in"] and rows["q_value"].notna().sum() == 2
    alone = trained_in_table("arch", two_types(set(range(1, 8)), set()), two_types({6, 7}, set()), universality(0.05),
                             min_share=0.75, confidence=0.95).set_index(["layer", "type"])  # fmt: skip
    assert alone.loc[(0, "previous_token"), "q_value"] == 1 / 32 and alone.loc[(0, "previous_token"), "trained_in"]


def test_the_sides_must_hold_the_same_refits():
    with pytest.raises(ValueError, match=r"trained \(\[1, 2, 3, 4\], \[0, 1\]\), step 0 \(\[1, 2, 3\], \[0, 1\]\)"):
        paired_rows(typed({1}, 4), typed({1}, 3), 0.95)
    step0 = typed({1}, 4)
    with pytest.raises(ValueError, match=r"same refits and layers.*step 0 \(\[1, 2, 3, 4\], \[0\]\)"):
        paired_rows(typed({1}, 4), step0[step0["layer"] == 0], 0.95)


def test_rows_come_in_layer_then_type_order():
    rows = paired_rows(typed({1}, 4, other="bos"), typed(set(), 4), 0.95)
    assert rows["layer"].tolist() == [0] * 4 + [1] * 4 and rows["type"].tolist() == list(HEAD_TYPES) * 2
    assert rows.index.tolist() == list(range(8))
    assert rows.set_index(["layer", "type"]).loc[(1, "bos"), "trained"] == 1.0


def test_the_trained_in_sentence_reads_counts_p_and_q():
    trained_in = trained_in_table("arch", typed(set(range(1, 7)), 6, other="bos"), typed(set(), 6), universality(0.05),
                                  min_share=0.75, confidence=0.95)  # fmt: skip
    other = trained_in_table("later", typed({1}, 6), typed(set(), 6), universality(0.05), min_share=0.75,
                             confidence=0.95)  # fmt: skip
    sentences = trained_in_sentences(pd.concat([trained_in, other]), ["arch", "later"], {"arch": "640 steps"})
    assert sentences[0] == (
        "arch (640 steps): head types in the required share of trained refits and added by training at q <= 0.05 "
        "(Benjamini-Hochberg over its layers and types): previous-token heads in layer 0: 6 of 6 trained refits "
        "against 0 of 6 at step 0, p = 0.0156 (exact paired test), q = 0.0156; stability above the "
        "prompt-permutation null 0.050 [0.040, 0.060] (descriptive); bos heads in layer 1: 6 of 6 trained refits "
        "against 0 of 6 at step 0, p = 0.0156 (exact paired test), q = 0.0156; stability above the "
        "prompt-permutation null not measured (no head of the type)."
    )
    assert sentences[1].startswith("later: no head type is in the required share")  # the next architecture too


def test_with_four_refits_the_sentence_says_no_type_can_reach_five_percent():
    four = trained_in_table("small", typed({1, 2, 3, 4}, 4), typed(set(), 4), universality(0.002),
                            min_share=0.75, confidence=0.95)  # fmt: skip
    (sentence,) = trained_in_sentences(four, ["small"], {})
    assert sentence == (
        "small: with 4 refits the exact paired test cannot reach p <= 0.05 (its smallest one-sided p is 1/16 = "
        "0.0625), so no head type is called trained in. Measured: layer 0: previous-token heads, 4 of 4 trained "
        "refits against 0 of 4 at step 0, p = 0.0625 (exact paired test); stability above the prompt-permutation "
        "null 0.002 [-0.008, 0.012] (descriptive); layer 1: no typed head in any refit."
    )
    for cause in ("positional", "clearly", "put there"):
        assert cause not in sentence
    with pytest.raises(ValueError, match="no rows of architecture 'other'"):
        trained_in_sentences(four, ["other"], {})


def test_with_enough_refits_and_no_type_the_sentence_prints_the_measured_values():
    rows = trained_in_table("big", typed({1, 2, 3}, 8, other="bos"), typed({1}, 8, other="bos"),
                            universality(0.01, "calibrated"), min_share=0.75, confidence=0.95)  # fmt: skip
    (sentence,) = trained_in_sentences(rows, ["big"], {})
    # layer 1: BOS in every refit at both steps (p = 1, no gain): printed with its numbers
    assert sentence == (
        "big: no head type is in the required share of trained refits of a layer with q <= 0.05. Measured: layer 0: "
        "previous-token heads, 3 of 8 trained refits against 1 of 8 at step 0, p = 0.25 (exact paired test); "
        "stability above the prompt-permutation null 0.010 [0.000, 0.020]; layer 1: bos heads, 8 of 8 trained "
        "refits against 8 of 8 at step 0, p = 1 (exact paired test); stability above the prompt-permutation null "
        "not measured (no head of the type)."
    )


def test_the_sentence_picks_per_layer_the_smallest_p_then_the_largest_gain_in_layer_order():
    """Layer 1 has the smaller p (induction in 5 of 8, below the share) but comes second; in layer 0 every p is 1:
    previous-token lost in 3 refits (2 of 8 left, gain -3/8), BOS kept in 1 (gain 0) is the one printed."""
    trained = two_types({1, 2, 3, 4, 5, 6, 7}, set())
    step0 = two_types(set(), set())
    trained.loc[(trained["layer"] == 0) & (trained["head"] == 0), "type"] = "none"
    step0.loc[(step0["layer"] == 0) & (step0["head"] == 0) & (step0["refit"] <= 5), "type"] = "previous_token"
    trained.loc[(trained["layer"] == 0) & (trained["head"] == 0) & (trained["refit"] <= 2), "type"] = "previous_token"
    for frame in (trained, step0):
        frame.loc[(frame["layer"] == 0) & (frame["head"] == 2) & (frame["refit"] == 1), "type"] = "bos"
        frame.loc[(frame["layer"] == 1) & (frame["head"] == 0) & (frame["refit"] <= 5), "type"] = "induction"
    step0.loc[(step0["layer"] == 1) & (step0["head"] == 0), "type"] = "none"
    rows = trained_in_table("x", trained, step0, universality(0.0), min_share=0.75, confidence=0.95)
    (sentence,) = trained_in_sentences(rows, ["x"], {})
    assert sentence.index(
        "layer 0: bos heads, 1 of 8 trained refits against 1 of 8 at step 0, p = 1 "
    ) < sentence.index(
        "; layer 1: induction heads, 5 of 8 trained refits against 0 of 8 at step 0, p = 0.0312 (exact paired test), q = 0.0312;"
    )


def test_a_q_value_of_exactly_alpha_is_trained_in():
    """2 layers x 4 types, 5 refits: five rows gained in every refit (p = 1/32), three lost in every refit (p = 1).
    Benjamini-Hochberg over the 8 testable rows gives the gains q = 1/32 x 8/5 = 0.05 exactly."""
    gains = [(0, "previous_token"), (0, "duplicate_token"), (0, "induction"), (0, "bos"), (1, "previous_token")]
    rows_trained, rows_step0 = [], []
    for refit in range(1, 6):
        for layer in range(2):
            for head, name in enumerate(HEAD_TYPES):
                gained = (layer, name) in gains
                rows_trained.append((refit, layer, head, name if gained else "none"))
                rows_step0.append((refit, layer, head, "none" if gained else name))
    columns = ["refit", "layer", "head", "type"]
    result = trained_in_table("q", pd.DataFrame(rows_trained, columns=columns), pd.DataFrame(rows_step0, columns=columns),
                              universality(0.0), min_share=0.75, confidence=0.95).set_index(["layer", "type"])  # fmt: skip
    assert result["q_value"].notna().all() and (result.loc[gains, "q_value"] == 0.05).all()
    assert result.loc[gains, "trained_in"].all() and result["trained_in"].sum() == 5


def scores(values: dict[tuple[int, int], float], refits: range) -> pd.DataFrame:
    """score_table rows of `refits` x 2 layers x 2 heads, every score 0 but previous_token[(layer, head)]."""
    rows = []
    for refit in refits:
        for layer in range(2):
            for head in range(2):
                row = dict.fromkeys(SCORE_COLUMNS, 0.0) | {"previous_token": values.get((layer, head), 0.0)}
                rows.append({"refit": refit, "layer": layer, "head": head, **row})
    return pd.DataFrame(rows)


FLOORS = dict.fromkeys(CRITERIA, 0.1)


def test_the_sensitivity_table_shows_which_verdicts_move_with_the_floor():
    """Held-out maxima 0.01-0.05; the trained refits' head (0, 0) scores 0.06, above every quantile of the draws
    but below the floor 0.1: trained in only without the floor."""
    held_out = pd.concat(
        [scores({(0, 1): 0.01 * (k % 5 + 1), (1, 1): 0.01}, range(100 + k, 101 + k)) for k in range(20)]
    )
    trained, step0 = scores({(0, 0): 0.06}, range(1, 7)), scores({}, range(1, 7))
    sides = {"trained": trained, "step0": step0, "held_out": held_out}
    result = sensitivity_table("arch", sides, quantiles=(0.95, 0.99), floors=FLOORS, configured=0.99,
                               min_share=0.75, confidence=0.95)  # fmt: skip
    assert list(result.columns) == SENSITIVITY_COLUMNS and len(result) == 4 * 2 * len(HEAD_TYPES)
    assert result.index.tolist() == list(range(len(result)))
    target = result[(result["layer"] == 0) & (result["type"] == "previous_token")].set_index(["quantile", "floor"])
    assert target.loc[(0.99, True), "configured"] and target["configured"].sum() == 1
    assert not target.loc[(0.99, True), "trained_in"] and target.loc[(0.99, False), "trained_in"]
    assert target.loc[(0.95, False), "p_value"] == 1 / 64 and target.loc[(0.95, False), "trained_in_differs"]
    assert target.loc[(0.95, False), "trained_differs"] and not target.loc[(0.95, True), "trained_differs"]
    others = result[~((result["layer"] == 0) & (result["type"] == "previous_token"))]
    assert not others["trained_in_differs"].any()
    (sentence,) = sensitivity_sentences(result, ["arch"])
    assert sentence.startswith("arch: under the other threshold settings the trained-in verdict changes in 2 of 24 ")
    assert "quantile 0.99 floor off, layer 0 previous-token: trained in" in sentence
    assert sentence.endswith("the share of trained refits with the type in 2.")
    with pytest.raises(ValueError, match=r"'head_types.quantile' 0.9 is not among .*\[0.95, 0.99\]"):
        sensitivity_table("arch", sides, quantiles=[0.95, 0.99], floors=FLOORS, configured=0.9, min_share=0.75,
                          confidence=0.95)  # fmt: skip


def sensitivity_rows(moved: int, kept: int, floor: bool) -> pd.DataFrame:
    rows = [("a", 0.95, floor, False, layer, "bos", 1.0, 6, 0.0, 1 / 64, 1 / 64, not floor, layer % 2 == 0, True)
            for layer in range(moved)]  # fmt: skip
    rows += [("a", 0.95, True, False, 9, "bos", 1.0, 6, 0.0, 1.0, np.nan, False, False, False)] * kept
    rows += [("a", 0.99, True, True, 0, "bos", 1.0, 6, 0.0, 1.0, np.nan, True, False, False)]  # the configured
    return pd.DataFrame(rows, columns=SENSITIVITY_COLUMNS)


def test_the_sensitivity_sentence_lists_at_most_four_changes():
    (five,) = sensitivity_sentences(sensitivity_rows(5, 1, floor=True), ["a"])
    assert five == (
        "a: under the other threshold settings the trained-in verdict changes in 5 of 6 (setting, layer, type) rows "
        "(quantile 0.95 floor on, layer 0 bos: not trained in; quantile 0.95 floor on, layer 1 bos: not trained in; "
        "quantile 0.95 floor on, layer 2 bos: not trained in; quantile 0.95 floor on, layer 3 bos: not trained in; "
        "...), the share of trained refits with the type in 3."
    )
    (four,) = sensitivity_sentences(sensitivity_rows(4, 0, floor=False), ["a"])
    assert four.endswith(
        "quantile 0.95 floor off, layer 3 bos: trained in), the share of trained refits with the type in 2."
    )
    (none,) = sensitivity_sentences(sensitivity_rows(0, 2, floor=True), ["a"])
    assert none == (
        "a: under the other threshold settings the trained-in verdict changes in 0 of 2 (setting, layer, type) rows, "
        "the share of trained refits with the type in 0."
    )
