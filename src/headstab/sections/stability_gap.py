"""Stability gap and depth of the extreme layers across architectures (paper §4.6, Fig. 7-8).

Per architecture and anchor: ΔS = S(l_max) - S(l_min) between its most and least stable layer, and
their relative depths r = l / L (l counted from 1, as the paper does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from headstab.table_rows import select_rows

GAP_COLUMNS = ["anchor_seed", "s_max", "s_min", "delta_s", "l_max", "l_min", "r_max", "r_min"]
SUMMARY_COLUMNS = ["architecture", "n_layers", "n_heads", "optimizer", "attention_only", *GAP_COLUMNS]


def stability_gap_table(
    layer_stability: pd.DataFrame,
    n_layers: int,
    promptset: str | None = "primary",
    scope: str | None = "same_layer",
) -> pd.DataFrame:
    """Stability gap and position of the extreme layers per anchor (§4.6, Fig. 7-8).

    layer_stability: columns (promptset, scope,) anchor_seed, layer (0-based), mean.
    Returns GAP_COLUMNS: s_max, s_min, delta_s = S_lmax - S_lmin, l_max, l_min (1-based, as the
    paper counts), r_max = l_max / L, r_min = l_min / L. Ties go to the shallowest layer.
    """
    table = select_rows(layer_stability, "layer stability", promptset=promptset, scope=scope)
    rows = []
    for anchor, group in table.groupby("anchor_seed", sort=True):
        layers = group["layer"].to_numpy(int)
        if sorted(layers) != list(range(n_layers)):
            raise ValueError(f"anchor {anchor} has layers {sorted(layers)} but the architecture has {n_layers}")
        means = group.set_index("layer")["mean"].sort_index().to_numpy(float)
        i_max, i_min = int(np.argmax(means)), int(np.argmin(means))
        l_max, l_min = i_max + 1, i_min + 1
        rows.append(
            (
                anchor,
                means[i_max],
                means[i_min],
                means[i_max] - means[i_min],
                l_max,
                l_min,
                l_max / n_layers,
                l_min / n_layers,
            )
        )
    return pd.DataFrame(rows, columns=GAP_COLUMNS)


def stability_gap_summary(
    layer_stability: Mapping[str, pd.DataFrame], facts: Mapping[str, Mapping[str, Any]], promptset: str
) -> pd.DataFrame:
    """SUMMARY_COLUMNS of every architecture: layer_stability maps architecture -> its table, facts
    architecture -> `headstab.sections.architecture_facts`."""
    frames = [
        stability_gap_table(table, facts[arch]["n_layers"], promptset=promptset).assign(
            architecture=arch, **facts[arch]
        )
        for arch, table in layer_stability.items()
    ]
    return pd.concat(frames, ignore_index=True)[SUMMARY_COLUMNS]
