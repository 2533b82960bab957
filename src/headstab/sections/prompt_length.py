"""Layer stability by prompt length (paper §4.4.2, Fig. 5 / B.4).

The length sweep's prompt sets are named `len{N}` (N words per prompt); their rows of
`layer_stability.csv` for one anchor, side by side, with the anchor's bootstrap interval and the
prompt-permutation null (`headstab.statistics.interval_tables`) when the table has them: how much of the
length effect is the metric's own dependence on prompt length.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pandas as pd

from headstab.table_rows import select_rows

LENGTH_COLUMNS = ["prompt_length", "layer", "mean", "std", "anchor_seed"]
# Carried over from layer_stability.csv when present (tables written before them lack them).
CHANCE_COLUMNS = ["ci_low", "ci_high", "null", "null_ci_low", "null_ci_high"]


def prompt_length_of(promptset: str) -> int | None:
    """`len20` -> 20; other prompt-set names -> None."""
    match = re.fullmatch(r"len(\d+)", promptset)
    return int(match.group(1)) if match else None


def prompt_length_table(
    layer_stability: pd.DataFrame | Mapping[str, pd.DataFrame],
    anchor_seed: int | None = None,
    scope: str | None = "same_layer",
) -> pd.DataFrame:
    """Layer-wise stability of the `len{N}` prompt sets (§4.4.2, Fig. 5/B.4).

    layer_stability: a table with a promptset column, or a mapping promptset -> table.
    anchor_seed: the anchor to report; None takes the first (smallest) seed, the paper's
    single-anchor view.
    Returns LENGTH_COLUMNS, then the CHANCE_COLUMNS the input has, sorted by length and layer (0-based).
    """
    if isinstance(layer_stability, Mapping):
        layer_stability = pd.concat(
            [t.assign(promptset=name) for name, t in layer_stability.items()], ignore_index=True
        )
    lengths = layer_stability["promptset"].map(prompt_length_of)
    table = layer_stability[lengths.notna()].assign(prompt_length=lengths[lengths.notna()])
    if table.empty:
        raise ValueError(
            "no len{N} prompt sets in layer stability (found "
            f"{sorted(layer_stability['promptset'].unique())}); enable the length_sweep prompt set"
        )
    table = select_rows(table, "layer stability of the len{N} prompt sets", scope=scope)
    if anchor_seed is None:
        anchor_seed = int(table["anchor_seed"].min())
    table = select_rows(table, "layer stability of the len{N} prompt sets", anchor_seed=anchor_seed)
    columns = LENGTH_COLUMNS + [column for column in CHANCE_COLUMNS if column in table.columns]
    out = table[columns].astype({"prompt_length": int, "layer": int})
    return out.sort_values(["prompt_length", "layer"]).reset_index(drop=True)
