"""The headline's power rows: the detectable effect of each claim at the run's refits, from the registry."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from headstab.sections import headline_power
from headstab.sections.headline import headline_table
from headstab.statistics import calibration

ABOVE = "layer stability above its null (jackknife-t interval)"
ADAMW = "AdamW - Adam in layer stability above the null (jackknife-t test)"
EFFECTS = {
    ABOVE: ("jackknife_pooled", "stability", {4: 0.04, 5: 0.03, 50: 0.005}),
    ADAMW: ("jackknife_paired_p", "stability", {4: math.inf, 50: 0.01}),
}


@pytest.fixture
def measured(monkeypatch):
    monkeypatch.setattr(calibration, "DETECTABLE_EFFECTS", EFFECTS)
    monkeypatch.setattr(headline_power, "DETECTABLE_EFFECTS", EFFECTS)


def test_detectable_effect_is_the_one_measured_at_the_largest_n_not_above_the_runs(measured):
    claim = ABOVE
    assert calibration.detectable_effect(claim, 4) == 0.04 and calibration.detectable_effect(claim, 12) == 0.03
    assert calibration.detectable_effect(claim, 50) == 0.005 and calibration.detectable_effect(claim, 500) == 0.005
    assert math.isnan(calibration.detectable_effect(claim, 3))
    with pytest.raises(KeyError, match="no power measured for claim 'nope'"):
        calibration.detectable_effect("nope", 5)


def test_one_row_per_measured_claim_at_the_refits_of_its_table(measured):
    pooled = pd.DataFrame({"layer": [0, 1], "n_refits": [12, 12]})
    tests = pd.DataFrame({"statistic": ["layer_stability", "perplexity"], "n_pairs": [4, 4]})
    (rows,) = headline_power.detectable_rows({"pooled": pooled, "tests": tests})
    assert rows["statistic"].tolist() == [f"effect detectable with 80% power: {claim}" for claim in (ABOVE, ADAMW)]
    assert rows["estimate"].tolist() == [0.03, math.inf] and rows["layer"].tolist() == [-1, -1]
    assert rows["interval"].tolist() == [
        "jackknife_pooled at 12 refits, in stability",
        "jackknife_paired_p at 4 refits, in stability; the test cannot reach p <= 0.05 there",
    ]
    unpaired = tests.assign(n_pairs=0)  # an unpaired design pairs no seeds
    (rows,) = headline_power.detectable_rows({"pooled": pooled, "tests": unpaired})
    assert len(rows) == 1
    assert headline_power.detectable_rows({"pooled": pooled.drop(columns="n_refits")}) == []
    assert headline_power.detectable_rows({"pooled": pooled.iloc[:0]}) == []


def test_the_headline_closes_with_the_power_rows(measured):
    pooled = pd.DataFrame({"promptset": "primary", "scope": "same_layer", "layer": [0], "stability": [0.5],
                           "ci_low": [0.4], "ci_high": [0.6], "null": [0.3], "init": [0.2], "n_refits": [50]})  # fmt: skip
    table = headline_table("l2_h8", "primary", 0.95, pooled=pooled)
    assert table["statistic"].tolist()[-1] == f"effect detectable with 80% power: {ABOVE}"
    assert table["estimate"].iloc[-1] == 0.005 and table["paper_source"].iloc[-1] == ""


def test_a_claim_without_its_table_or_units_leaves_the_next_claims_row(measured):
    tests = pd.DataFrame({"statistic": ["layer_stability"], "n_pairs": [50]})
    (rows,) = headline_power.detectable_rows({"tests": tests})  # no pooled table: the paired claim still reads
    assert rows["interval"].tolist() == ["jackknife_paired_p at 50 refits, in stability"]
    no_refits = pd.DataFrame({"layer": [0], "n_refits": [0]})
    (rows,) = headline_power.detectable_rows({"pooled": no_refits, "tests": tests})
    assert rows["estimate"].tolist() == [0.01]


def test_one_refit_gets_its_row_with_no_effect_measured(measured):
    (rows,) = headline_power.detectable_rows({"pooled": pd.DataFrame({"layer": [0], "n_refits": [1]})})
    assert rows["interval"].tolist() == ["jackknife_pooled at 1 refits, in stability"]
    assert math.isnan(rows["estimate"].iloc[0])  # nothing measured at or below 1 refit
