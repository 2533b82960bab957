"""The headline's final training loss: its ci_low and ci_high are the min and max over the refits, a range of the
values. n counts refits. A range is no confidence interval at any n: it covers the mean with probability
1 - 2 / 2^n for a symmetric spread (0.875 at 4 refits, 0.94 at 5, 1.00 from 12 on) and it does not narrow as
refits are added, so the registry calls it descriptive everywhere; the case shows how often it holds the mean.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.harness import Case
from headstab.sections.headline import headline_table

MEAN_LOSS = 3.2


def _range(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
    finals = pd.DataFrame({"seed": np.arange(n), "final_loss": MEAN_LOSS + rng.normal(scale=0.02, size=n)})
    row = headline_table("arch", "primary", 0.95, finals=finals).iloc[0]
    return float(row["ci_low"]), float(row["ci_high"]), MEAN_LOSS


CASES = [Case("range_final_loss", "symmetric_refit_spread", "coverage", _range, quick_n=4, quick_reps=200)]
