"""Which head types did training put there? The same refits typed at step 0 and trained, per layer and type.

Both sides are typed with the same thresholds (`headstab.head_type_thresholds`: calibrated on held-out
initialisations, never on these refits). Per layer and type:
- trained, step0: the share of refits with a head of the type (weak universality), each with its exact
  (Clopper-Pearson) interval, NaN with one refit (`headstab.statistics.binomial`);
- p_value: the exact paired test (one-sided McNemar) that training adds the type: of the refits whose status
  changed, trained_only gained it and step0_only lost it; smallest_p is the least p the refits allow, 2^-n;
- q_value: Benjamini-Hochberg over the architecture's family of testable rows, those whose discordant refits
  could give p <= ALPHA (at least 5 of them; Gilbert 2005's reading of Tarone: under the null the split of the
  discordant refits, not their number, carries the evidence, so choosing rows by their number keeps the
  p-values valid); NaN elsewhere;
- trained_in: at least `min_share` of the trained refits have the type and q_value <= ALPHA (so p_value <=
  ALPHA too). With 4 refits smallest_p is 1/16 and nothing is trained in; the sentence says so.
Each row carries the type's stability above the prompt-permutation null (the universality table's
`above_null`) with its interval. `sensitivity_table` repeats the verdicts over other threshold settings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np
import pandas as pd
from scipy.stats import false_discovery_control

from headstab.head_type_thresholds import calibrated_thresholds, type_heads
from headstab.head_types import HEAD_TYPES, has_type
from headstab.statistics.binomial import paired_exact_test, share_interval, smallest_paired_p
from headstab.statistics.calibration import ALPHA, calibration_label

__all__ = [
    "SENSITIVITY_COLUMNS",
    "TRAINED_IN_COLUMNS",
    "paired_rows",
    "sensitivity_sentences",
    "sensitivity_table",
    "trained_in_sentences",
    "trained_in_table",
    "weak_universality",
]

SHARE_METHOD, PAIRED_METHOD = "refit_share_exact", "paired_exact_mcnemar"
TESTABLE = math.ceil(-math.log2(ALPHA))  # the fewest discordant refits whose smallest p, 2^-k, is <= ALPHA: 5
PAIRED_COLUMNS = ["layer", "type", "trained", "trained_ci_low", "trained_ci_high", "n_trained"]
PAIRED_COLUMNS += ["step0", "step0_ci_low", "step0_ci_high", "n_step0", "trained_only", "step0_only"]
PAIRED_COLUMNS += ["p_value", "q_value", "smallest_p"]
TRAINED_IN_COLUMNS = ["architecture", *PAIRED_COLUMNS, "above_null", "above_null_ci_low", "above_null_ci_high"]
TRAINED_IN_COLUMNS += ["trained_in", "ci_calibration", "p_calibration", "above_null_calibration"]
SENSITIVITY_COLUMNS = ["architecture", "quantile", "floor", "configured", "layer", "type", "trained", "n_trained"]
SENSITIVITY_COLUMNS += ["step0", "p_value", "q_value", "trained_in", "trained_differs", "trained_in_differs"]


def _presence(types: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """{type: bool [layer, refit] (both sorted)}: whether the refit has a head of the type in the layer."""
    hits = types[["layer", "refit"]].assign(**{name: has_type(types["type"], name) for name in HEAD_TYPES})
    present = hits.groupby(["layer", "refit"])[list(HEAD_TYPES)].any()
    return {name: present[name].unstack("refit") for name in HEAD_TYPES}


def weak_universality(types: pd.DataFrame, name: str, layer: int, confidence: float) -> tuple[float, float, float, int]:
    """(share, ci_low, ci_high, n refits) of refits with at least one head of type `name` in `layer`; the
    exact interval (NaN with one refit)."""
    present = _presence(types[types["layer"] == layer])[name].to_numpy()
    return (*share_interval(int(present.sum()), present.size, confidence), present.size)


def paired_rows(trained: pd.DataFrame, step0: pd.DataFrame, confidence: float) -> pd.DataFrame:
    """PAIRED_COLUMNS per layer and type of HEAD_TYPES: trained and step-0 shares with exact intervals, the
    discordant refits, the exact paired test and its q-value over the testable rows (module docstring).

    trained, step0: head_types.csv rows (type_heads) of the same refits and layers; raises ValueError naming
    the refits when the two sides hold different ones."""
    sides = {
        side: (sorted(set(frame["refit"])), sorted(set(frame["layer"])))
        for side, frame in (("trained", trained), ("step 0", step0))
    }
    if sides["trained"] != sides["step 0"]:
        raise ValueError(
            f"the paired test needs the same refits and layers trained and at step 0; (refits, layers) trained "
            f"{sides['trained']}, step 0 {sides['step 0']}. Rebuild head_type_scores_step0.csv from the same seeds"
        )
    rows = []
    trained_presence, step0_presence = _presence(trained), _presence(step0)
    for name in HEAD_TYPES:
        after = trained_presence[name]
        now_all, then_all = after.to_numpy(), step0_presence[name].loc[after.index, after.columns].to_numpy()
        for row, layer in enumerate(after.index):
            now, then = now_all[row], then_all[row]
            gained, lost = int((now & ~then).sum()), int((then & ~now).sum())
            shares = [*share_interval(int(now.sum()), now.size, confidence), now.size]
            shares += [*share_interval(int(then.sum()), then.size, confidence), then.size]
            p_value = paired_exact_test(gained, lost)
            rows.append((int(layer), name, *shares, gained, lost, p_value, np.nan, smallest_paired_p(now.size)))
    table = pd.DataFrame(rows, columns=PAIRED_COLUMNS).sort_values(
        ["layer", "type"], key=_type_order, ignore_index=True
    )
    testable = table["trained_only"] + table["step0_only"] >= TESTABLE
    if testable.any():
        table.loc[testable, "q_value"] = false_discovery_control(table.loc[testable, "p_value"].to_numpy())
    return table


def _verdict(rows: pd.DataFrame, min_share: float) -> pd.Series:
    """trained_in: the type in at least min_share of the trained refits and q_value <= ALPHA."""
    return (rows["trained"] >= min_share) & (rows["q_value"] <= ALPHA)


def _type_order(column: pd.Series) -> pd.Series:
    """Sort key: layers by number, types in HEAD_TYPES order."""
    return column.map(HEAD_TYPES.index) if column.name == "type" else column


def trained_in_table(
    architecture: str,
    trained: pd.DataFrame,
    step0: pd.DataFrame,
    universality: pd.DataFrame,
    *,
    min_share: float,
    confidence: float,
) -> pd.DataFrame:
    """TRAINED_IN_COLUMNS: `paired_rows` with the type's above-null stability and the verdict.

    universality: the architecture's head_type_universality.csv (its above_null rows and their calibration).
    trained_in: trained >= min_share and q_value <= ALPHA. ci_calibration, p_calibration: how the share
    intervals and the p-value are reported at this number of refits (`headstab.statistics.calibration`).
    """
    table = paired_rows(trained, step0, confidence)
    above = universality[universality["statistic"] == "above_null"].set_index(["layer", "type"])
    columns = {"estimate": "above_null", "ci_low": "above_null_ci_low", "ci_high": "above_null_ci_high"}
    columns["calibration"] = "above_null_calibration"
    gain = above[list(columns)].rename(columns=columns)
    table = table.join(gain, on=["layer", "type"])
    n = table["n_trained"].to_numpy()
    return table.assign(
        architecture=architecture,
        trained_in=_verdict(table, min_share),
        ci_calibration=[calibration_label(SHARE_METHOD, int(k)) for k in n],
        p_calibration=[calibration_label(PAIRED_METHOD, int(k)) for k in n],
    )[TRAINED_IN_COLUMNS]


def sensitivity_table(
    architecture: str,
    scores: Mapping[str, pd.DataFrame],
    *,
    quantiles: Sequence[float],
    floors: Mapping[str, float],
    configured: float,
    min_share: float,
    confidence: float,
) -> pd.DataFrame:
    """SENSITIVITY_COLUMNS: the trained share (weak universality), the paired test and the verdict per layer and
    type under every threshold setting, `quantiles` x floor on / off, and whether each differs from the configured
    setting's (quantile `configured`, floor on). scores: score_table rows of the "trained", "step0" and
    "held_out" refits of one architecture."""
    if configured not in quantiles:
        raise ValueError(
            f"config key 'head_types.quantile' {configured} is not among the sensitivity quantiles {list(quantiles)}"
        )
    tables = {}
    for quantile in quantiles:
        for floor in (True, False):
            thresholds = calibrated_thresholds(scores["held_out"], quantile, floors if floor else None, {})
            rows = paired_rows(*(type_heads(scores[side], thresholds) for side in ("trained", "step0")), confidence)
            tables[(quantile, floor)] = rows.assign(trained_in=_verdict(rows, min_share))
    reference = tables[(configured, True)]
    out = [
        rows.assign(
            architecture=architecture,
            quantile=quantile,
            floor=floor,
            configured=(quantile == configured) & floor,
            trained_differs=rows["trained"].to_numpy() != reference["trained"].to_numpy(),
            trained_in_differs=rows["trained_in"].to_numpy() != reference["trained_in"].to_numpy(),
        )
        for (quantile, floor), rows in tables.items()
    ]
    return pd.concat(out, ignore_index=True)[SENSITIVITY_COLUMNS]


def _interval(value: float, low: float, high: float, label: str, digits: int = 3) -> str:
    if not np.isfinite(value):
        return "not measured (no head of the type)"
    if not np.isfinite(low):
        return f"{value:.{digits}f}"
    note = " (descriptive)" if label == "descriptive" else ""
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]{note}"


def _q(q_value: float) -> str:
    return f", q = {q_value:.3g}" if np.isfinite(q_value) else ""


def _counts(row) -> str:
    trained, step0 = round(row.trained * row.n_trained), round(row.step0 * row.n_step0)
    return (
        f"{trained} of {row.n_trained} trained refits against {step0} of {row.n_step0} at step 0, "
        f"p = {row.p_value:.3g} (exact paired test){_q(row.q_value)}; stability above the prompt-permutation null "
        f"{_interval(row.above_null, row.above_null_ci_low, row.above_null_ci_high, row.above_null_calibration)}"
    )


def _closest(rows: pd.DataFrame) -> str:
    """Per layer, the type training changed most (smallest p, then largest gain in share, then most common), with
    its numbers."""
    parts = []
    ranked = rows.assign(gain=rows["trained"] - rows["step0"]).sort_values(
        ["p_value", "gain", "trained"], ascending=[True, False, False]
    )
    for layer, group in ranked.groupby("layer"):
        row = group.iloc[0]
        if row.trained == 0 and row.step0 == 0:
            parts.append(f"layer {layer}: no typed head in any refit")
        else:
            parts.append(f"layer {layer}: {row.type.replace('_', '-')} heads, {_counts(row)}")
    return "; ".join(parts)


def trained_in_sentences(table: pd.DataFrame, architectures: Sequence[str], facts: Mapping[str, str]) -> list[str]:
    """One sentence per architecture: the trained-in types with their refit counts and p-values; or, when none
    is, whether its refits could reach ALPHA at all, and per layer the measured numbers of the type training
    changed most. `facts` gives each architecture's training in words."""
    sentences = []
    for arch in architectures:
        rows = table[table["architecture"] == arch]
        training = f" ({facts[arch]})" if facts.get(arch) else ""
        chosen = rows[rows["trained_in"]]
        if not chosen.empty:
            parts = [
                f"{row.type.replace('_', '-')} heads in layer {row.layer}: {_counts(row)}"
                for row in chosen.itertuples()
            ]
            sentences.append(
                f"{arch}{training}: head types in the required share of trained refits and added by training at "
                f"q <= {ALPHA:g} (Benjamini-Hochberg over its layers and types): " + "; ".join(parts) + "."
            )
            continue
        if rows.empty:
            raise ValueError(f"the trained-in table has no rows of architecture {arch!r}")
        n = int(rows["n_trained"].max())
        smallest = smallest_paired_p(n)
        if smallest > ALPHA:
            opening = (
                f"with {n} refits the exact paired test cannot reach p <= {ALPHA:g} (its smallest one-sided p is "
                f"{Fraction(smallest)} = {smallest:.3g}), so no head type is called trained in"
            )
        else:
            opening = f"no head type is in the required share of trained refits of a layer with q <= {ALPHA:g}"
        sentences.append(f"{arch}{training}: {opening}. Measured: {_closest(rows)}.")
    return sentences


def sensitivity_sentences(sensitivity: pd.DataFrame, architectures: Sequence[str]) -> list[str]:
    """One sentence per architecture: of the (setting, layer, type) rows of `sensitivity_table` other than the
    configured setting's, how many change the trained-in verdict or the trained share, and the first few."""
    sentences = []
    for arch in architectures:
        rows = sensitivity[(sensitivity["architecture"] == arch) & ~sensitivity["configured"]]
        moved = rows[rows["trained_in_differs"]]
        examples = [
            f"quantile {row.quantile:g} floor {'on' if row.floor else 'off'}, layer {row.layer} "
            f"{row.type.replace('_', '-')}: {'trained in' if row.trained_in else 'not trained in'}"
            for row in moved.head(4).itertuples()
        ]
        listed = f" ({'; '.join(examples)}{'; ...' if len(moved) > 4 else ''})" if examples else ""
        sentences.append(
            f"{arch}: under the other threshold settings the trained-in verdict changes in {len(moved)} of "
            f"{len(rows)} (setting, layer, type) rows{listed}, the share of trained refits with the type in "
            f"{int(rows['trained_differs'].sum())}."
        )
    return sentences
