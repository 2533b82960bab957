"""The headline's power rows: per claim, the effect its test detects with 80% power at the run's number of
refits, as `make calibration` measured it (`headstab.statistics.calibration.DETECTABLE_EFFECTS`).

A claim about one architecture reads its refits from layer_stability_pooled.csv (`n_refits`); a claim about
its Adam/AdamW pair reads the seeds of optimizer_tests.csv (`n_pairs`, the paired design only). An effect of
inf means the test cannot reach p <= 0.05 with that many refits, whatever the effect.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from headstab.statistics.calibration import DETECTABLE_EFFECTS, detectable_effect

__all__ = ["CLAIM_UNITS", "detectable_rows"]

# claim -> (table argument of headline_table, its column of units)
CLAIM_UNITS = {
    "layer stability above its null (jackknife-t interval)": ("pooled", "n_refits"),
    "AdamW - Adam in layer stability above the null (jackknife-t test)": ("tests", "n_pairs"),
}


def detectable_rows(tables: Mapping[str, pd.DataFrame]) -> list[pd.DataFrame]:
    """[rows (statistic, layer -1, estimate: the detectable effect, interval: the test and n)] of every claim of
    CLAIM_UNITS whose table is in `tables` with at least one unit and whose power was measured; [] without any."""
    rows = []
    for claim, (argument, column) in CLAIM_UNITS.items():
        table = tables.get(argument)
        if claim not in DETECTABLE_EFFECTS or table is None or column not in table.columns or not len(table):
            continue
        n = int(table[column].max())
        if n < 1:
            continue  # an unpaired design has no seeds paired
        method, unit = DETECTABLE_EFFECTS[claim][:2]
        effect = detectable_effect(claim, n)
        reach = "; the test cannot reach p <= 0.05 there" if np.isinf(effect) else ""
        rows.append(
            {
                "statistic": f"effect detectable with 80% power: {claim}",
                "layer": -1,
                "estimate": effect,
                "interval": f"{method} at {n} refits, in {unit}{reach}",
            }
        )
    return [pd.DataFrame(rows)] if rows else []
