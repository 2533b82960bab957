"""Training curves of the refits (beyond the paper's figures; its §3.1 trains every refit the same way):
the loss each refit logged (`train_log.csv`: step, tokens, loss, lr, seconds), and whether it had
levelled off by the end of training.

Converged here means levelled off: the loss fell by less than `plateau` (a fraction of the final loss)
over the last quarter of the logged tokens. With the paper's constant learning rate and one epoch,
a refit still going down is undertrained, not diverged.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

__all__ = ["CURVE_COLUMNS", "FINAL_COLUMNS", "PLATEAU", "final_losses", "training_curves"]

CURVE_COLUMNS = ["seed", "step", "tokens", "loss"]
FINAL_COLUMNS = ["seed", "final_loss", "last_quarter_drop", "converged", "tokens"]
PLATEAU = 0.02  # default: less than 2% lower over the last quarter of training


def training_curves(logs: Mapping[int, pd.DataFrame]) -> pd.DataFrame:
    """CURVE_COLUMNS, one row per (refit, logged step), seeds and steps ascending.

    logs: {seed: the refit's train_log.csv}. Raises ValueError naming the seed whose log is empty or
    lacks a column.
    """
    if not logs:
        raise ValueError("training curves need at least one refit's train_log.csv")
    frames = []
    for seed, log in sorted(logs.items()):
        missing = [column for column in CURVE_COLUMNS[1:] if column not in log.columns]
        if missing or log.empty:
            raise ValueError(f"train_log.csv of seed {seed} is empty or lacks {missing}; retrain that refit")
        frames.append(log[CURVE_COLUMNS[1:]].sort_values("step").assign(seed=seed))
    return pd.concat(frames, ignore_index=True)[CURVE_COLUMNS]


def final_losses(curves: pd.DataFrame, plateau: float = PLATEAU) -> pd.DataFrame:
    """FINAL_COLUMNS, one row per refit: its last logged loss, the relative drop of the loss over the last
    quarter of its logged tokens ((loss at 3/4 of the tokens - final loss) / final loss, the logged row
    nearest 3/4), and converged = drop < `plateau`."""
    rows = []
    for seed, curve in curves.groupby("seed", sort=True):
        tokens, loss = curve["tokens"].to_numpy(), curve["loss"].to_numpy()
        quarter = int(np.argmin(np.abs(tokens - 0.75 * tokens[-1])))
        drop = float((loss[quarter] - loss[-1]) / loss[-1])
        rows.append((seed, float(loss[-1]), drop, drop < plateau, int(tokens[-1])))
    return pd.DataFrame(rows, columns=FINAL_COLUMNS)
