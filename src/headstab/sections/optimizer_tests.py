"""Adam vs AdamW (paper §4.5) as tests: the paired design first, the unpaired tests beside it.

Refit s of the two members of an optimizer pair (an architecture and its `_wd` AdamW member) start from the same
weights and see the same data order (`headstab.plan.spec.paired_by_seed`), so the comparison is paired by seed:

- per-seed differences: d_s = psi_s(AdamW) - psi_s(Adam), psi_s the jackknife pseudo-value of the
  pooled layer statistic (`headstab.statistics.hypothesis.pair_pseudo_values`); the d_s average to the
  pooled difference, and their spread carries the variance of a mean over pairs of refits (a refit's
  mean over its own pairs would understate it and make the test anti-conservative);
- the test: a jackknife-t test of the d_s and the prompt groups together (`headstab.statistics.jackknife`;
  the same prompts in both members, left out of both at once), since how the members answer the prompts
  differs and a test over seeds alone, prompts fixed (the sign-flip test, kept beside it), rejects a true
  "no difference" far too often once the seeds are many; a paired multi-bootstrap interval (the same resampled
  seeds, pairs and prompt groups for both members, MultiBERTs' paired_seeds) and the jackknife-t interval;
- perplexity parity as a paired TOST (one-sample t-tests of the per-seed differences).

The unpaired tests (independent multi-bootstraps, the jackknife-t test of each member's pseudo-values with
Welch's degrees of freedom, Welch TOST; the permutation test of the refits' optimizer labels beside them) are
the secondary `unpaired_*` columns; they are primary for optimizer pairs that are not paired (refits trained
elsewhere, or other seeds). Each layer statistic is tested raw, above its
prompt-permutation null, and in the content variant (raw and above its own null). Per layer, the
partial correlation of head stability with the optimizer given head entropy says whether a difference
survives sharpness.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd

from headstab.statistics.bootstrap import draw_resamples, percentile_interval, stability_replicates
from headstab.statistics.calibration import calibration_label
from headstab.statistics.hypothesis import (
    benjamini_hochberg,
    pair_pseudo_values,
    paired_tost,
    permutation_test,
    sign_flip_test,
    tost,
)
from headstab.statistics.jackknife import jackknife_parts, jackknife_t_interval, leave_one_group_out
from headstab.statistics.resampling import partial_correlation

log = logging.getLogger(__name__)

__all__ = ["OPTIMIZER_TEST_COLUMNS", "TESTED_STATISTICS", "optimizer_tests", "pairing_problem"]

# row statistic -> (prompt-group tensor, tensor subtracted or None)
TESTED_STATISTICS = {
    "layer_stability": ("observed", None),
    "layer_above_null": ("observed", "null"),
    "layer_stability_content": ("content_observed", None),
    "layer_content_above_null": ("content_observed", "content_null"),
}
# label column -> method by design (layer rows, perplexity row); the labels are taken at the design's seeds.
LABELS = {
    "ci_calibration": {
        "paired": ("multibootstrap_paired_difference", "tost_paired"),
        "unpaired": ("multibootstrap_unpaired_difference", "tost_welch"),
    },
    "p_calibration": {
        "paired": ("jackknife_paired_p", "tost_paired"),
        "unpaired": ("jackknife_unpaired_p", "tost_welch"),
    },
    "unpaired_ci_calibration": dict.fromkeys(
        ("paired", "unpaired"), ("multibootstrap_unpaired_difference", "tost_welch")
    ),
    "unpaired_p_calibration": dict.fromkeys(("paired", "unpaired"), ("jackknife_unpaired_p", "tost_welch")),
    "jackknife_calibration": {
        "paired": ("jackknife_paired_difference", None),
        "unpaired": ("jackknife_unpaired_difference", None),
    },
    "partial_r_calibration": dict.fromkeys(("paired", "unpaired"), ("partial_r_optimizer", None)),
    "sign_flip_calibration": {"paired": ("sign_flip_paired", None), "unpaired": (None, None)},
    "permutation_calibration": dict.fromkeys(("paired", "unpaired"), ("permutation_unpaired", None)),
}
LABEL_COLUMNS = list(LABELS)
OPTIMIZER_TEST_COLUMNS = [
    "statistic",
    "layer",
    "adam",
    "adamw",
    "difference",
    "ci_low",
    "ci_high",
    "confidence",
    "test",
    "p_value",
    "q_value",
    "equivalent",
    "margin",
    "design",
    "n_adam",
    "n_adamw",
    "n_pairs",
    "n_resamples",
    "unpaired_ci_low",
    "unpaired_ci_high",
    "unpaired_test",
    "unpaired_p_value",
    "unpaired_q_value",
    "unpaired_equivalent",
    "sign_flip_p_value",
    "permutation_p_value",
    "jackknife",
    "jackknife_ci_low",
    "jackknife_ci_high",
    "unpaired_jackknife_ci_low",
    "unpaired_jackknife_ci_high",
    "entropy_adam",
    "entropy_adamw",
    "optimizer_r",
    "optimizer_partial_r",
    "optimizer_partial_r_ci_low",
    "optimizer_partial_r_ci_high",
    *LABEL_COLUMNS,
]


def pairing_problem(adam, adamw) -> str | None:
    """Why the two members' prompt groups cannot be compared seed by seed, or None when they can."""
    if list(adam.seeds) != list(adamw.seeds):
        return f"the members have other refits (seeds {list(adam.seeds)} and {list(adamw.seeds)})"
    if len(adam.seeds) < 3:
        return f"per-seed pseudo-values need at least 3 refits; the members have {len(adam.seeds)}"
    if not (np.array_equal(adam.group_sizes, adamw.group_sizes) and np.array_equal(adam.lengths, adamw.lengths)):
        return "the members' prompt groups differ (other token lengths or group sizes)"
    return None


class _Member:
    """One member's replicates, per prompt-group tensor, under one set of resamples (computed on demand)."""

    def __init__(self, grouped, resamples):
        self.grouped, self.resamples, self._cache, self._loo = grouped, resamples, {}, {}

    def kind(self, name: str) -> dict[str, np.ndarray]:
        if name not in self._cache:
            values = getattr(self.grouped, name)
            self._cache[name] = stability_replicates(self.resamples, values, self.grouped.group_sizes)
        return self._cache[name]

    def statistic(self, statistic: str) -> dict[str, np.ndarray]:
        """layer_estimate [layer], layer [boot, layer], head_estimate [anchor, layer, head], pair_best."""
        if statistic not in self._cache:
            main, subtracted = TESTED_STATISTICS[statistic]
            out = {key: self.kind(main)[key] for key in ("layer_estimate", "layer", "head_estimate", "pair_best")}
            if subtracted is not None:
                out = {key: value - self.kind(subtracted)[key] for key, value in out.items()}
            self._cache[statistic] = out
        return self._cache[statistic]

    def leave_one_group_out(self, statistic: str) -> np.ndarray:
        """[group, seed_a, seed_b, layer, head] best matches of the statistic without each prompt group."""
        names = [name for name in TESTED_STATISTICS[statistic] if name is not None]
        for name in names:
            if name not in self._loo:
                self._loo[name] = leave_one_group_out(getattr(self.grouped, name), self.grouped.group_sizes)
        return self._loo[names[0]] - (self._loo[names[1]] if len(names) > 1 else 0.0)


def _partial_columns(adam, adamw, heads: Sequence[np.ndarray], paired: bool, n_boot: int, seed: int, confidence):
    """Per layer: r and partial r (given head entropy) of head values with the optimizer (AdamW = 1), heads
    of both members' anchors as units; the interval resamples seeds (the same ones in both when paired)."""
    n_layers = heads[0].shape[1]
    nan = np.full(n_layers, np.nan)
    if adam.entropy is None or adamw.entropy is None:
        return {"optimizer_r": nan, "optimizer_partial_r": nan, "low": nan, "high": nan}
    n_a, n_w, n_heads = heads[0].shape[0], heads[1].shape[0], heads[0].shape[2]
    rng = np.random.default_rng(seed)
    draw_a = rng.integers(n_a, size=(n_boot, n_a))
    draw_w = draw_a if paired else rng.integers(n_w, size=(n_boot, n_w))
    counts = np.concatenate([_bincount_rows(draw_a, n_a), _bincount_rows(draw_w, n_w)], axis=1)
    weights = np.repeat(counts, n_heads, axis=1)  # [boot, anchor * head] over both members
    optimizer = np.repeat([0.0] * n_a + [1.0] * n_w, n_heads)
    columns = {key: np.empty(n_layers) for key in ("optimizer_r", "optimizer_partial_r", "low", "high")}
    for layer in range(n_layers):
        values = np.concatenate([heads[0][:, layer].ravel(), heads[1][:, layer].ravel()])
        entropy = np.concatenate([adam.entropy[:, layer].ravel(), adamw.entropy[:, layer].ravel()])
        columns["optimizer_r"][layer] = np.corrcoef(optimizer, values)[0, 1] if np.ptp(values) > 0 else np.nan
        columns["optimizer_partial_r"][layer] = partial_correlation(optimizer, values, entropy)
        replicates = partial_correlation(optimizer, values, entropy, weights)
        if np.isfinite(replicates).any():
            columns["low"][layer], columns["high"][layer] = percentile_interval(replicates, confidence)
        else:
            columns["low"][layer] = columns["high"][layer] = np.nan
    return columns


def _jackknife_columns(statistic: str, members, unpaired_adamw, paired: bool, confidence: float) -> dict:
    """The jackknife-t intervals and tests of AdamW - Adam (`headstab.statistics.jackknife`): refits by their
    pseudo-values (paired: the per-seed differences, N - 1 degrees of freedom; unpaired: each member's, Welch's
    degrees) and prompt groups left out of both members at once (NaN when the members' groups differ or a member
    has < 3 refits); p_value, unpaired_p_value: their two-sided t tests of no difference."""
    n_layers = len(members[0].statistic(statistic)["layer_estimate"])
    names = ("jackknife", "jackknife_ci_low", "jackknife_ci_high", "p_value")
    columns = {name: np.full(n_layers, np.nan) for name in (*names, *(f"unpaired_{n}" for n in names[1:]))}
    sizes = [member.grouped.group_sizes for member in (members[0], unpaired_adamw)]
    seeds = [len(member.grouped.seeds) for member in (members[0], unpaired_adamw)]
    if not np.array_equal(sizes[0], sizes[1]) or len(sizes[0]) < 2 or min(seeds) < 3:
        return columns
    parts = [
        jackknife_parts(member.statistic(statistic)["pair_best"], member.leave_one_group_out(statistic), "pooled")
        for member in (members[0], unpaired_adamw)
    ]
    difference, groups = parts[1]["estimate"] - parts[0]["estimate"], parts[1]["groups"] - parts[0]["groups"]
    variances = [part["refit_var"] for part in parts]
    with np.errstate(divide="ignore", invalid="ignore"):  # no spread in either member: NaN degrees, zero width
        df = sum(variances) ** 2 / sum(v**2 / (n - 1) for v, n in zip(variances, seeds, strict=True))
    unpaired = jackknife_t_interval(difference, sum(variances), df, groups, confidence)
    primary = unpaired
    if paired:
        pseudo = [pair_pseudo_values(m.statistic(statistic)["pair_best"].mean(axis=-1)) for m in members]
        d = pseudo[1] - pseudo[0]
        primary = jackknife_t_interval(difference, d.var(axis=0, ddof=1) / len(d), len(d) - 1, groups, confidence)
    keys = ("estimate", "ci_low", "ci_high", "p_value")
    columns.update({name: primary[key] for name, key in zip(names, keys, strict=True)})
    columns.update({f"unpaired_{name}": unpaired[key] for name, key in zip(names[1:], keys[1:], strict=True)})
    return columns


def _bincount_rows(draws: np.ndarray, n: int) -> np.ndarray:
    return np.stack([np.bincount(row, minlength=n) for row in draws]).astype(np.float64)


def _layer_rows(statistic, members, unpaired_adamw, paired, options) -> pd.DataFrame:
    """The rows of one layer statistic (see `optimizer_tests`)."""
    adam, adamw = members[0].statistic(statistic), members[1].statistic(statistic)
    confidence, n_layers = options["confidence"], len(adam["layer_estimate"])
    other = unpaired_adamw.statistic(statistic)
    unpaired_low, unpaired_high = percentile_interval(other["layer"] - adam["layer"], confidence)
    # Refits as units: each member's pseudo-values (its per-anchor means share their partners, so are not units).
    permuted, flipped = np.full(n_layers, np.nan), np.full(n_layers, np.nan)
    if min(len(adam["pair_best"]), len(other["pair_best"])) >= 3:
        units = [pair_pseudo_values(member["pair_best"].mean(axis=-1)) for member in (adam, other)]
        permuted = permutation_test(units[0], units[1], options["permutations"], options["seed"])["p_value"]
    row = {
        "statistic": statistic,
        "layer": np.arange(n_layers),
        "adam": adam["layer_estimate"],
        "adamw": adamw["layer_estimate"],
        "difference": adamw["layer_estimate"] - adam["layer_estimate"],
        "confidence": confidence,
        "unpaired_ci_low": unpaired_low,
        "unpaired_ci_high": unpaired_high,
        "unpaired_test": "jackknife_welch",
        "test": "jackknife_t" if paired else "jackknife_welch",
        **_jackknife_columns(statistic, members, unpaired_adamw, paired, confidence),
    }
    if paired:
        low, high = percentile_interval(adamw["layer"] - adam["layer"], confidence)
        pseudo = [pair_pseudo_values(member["pair_best"].mean(axis=-1)) for member in (adam, adamw)]
        flipped = sign_flip_test(pseudo[1] - pseudo[0], options["permutations"], options["seed"])["p_value"]
        row.update(ci_low=low, ci_high=high)
    else:
        row.update(ci_low=unpaired_low, ci_high=unpaired_high)
    row.update(sign_flip_p_value=flipped, permutation_p_value=permuted)
    heads = [adam["head_estimate"], (adamw if paired else other)["head_estimate"]]
    partial = _partial_columns(
        members[0].grouped, members[1].grouped, heads, paired, options["n_boot"], options["seed"], confidence
    )
    row.update(
        optimizer_r=partial["optimizer_r"],
        optimizer_partial_r=partial["optimizer_partial_r"],
        optimizer_partial_r_ci_low=partial["low"],
        optimizer_partial_r_ci_high=partial["high"],
    )
    return pd.DataFrame(row)


def _perplexity_row(ppl_adam: pd.Series, ppl_adamw: pd.Series, paired: bool, margin_share: float, confidence):
    """The perplexity row: paired TOST over the seeds both members have (primary when paired), Welch TOST."""
    alpha = 1.0 - confidence
    margin = margin_share * float(ppl_adam.mean())
    welch = tost(ppl_adam.to_numpy(), ppl_adamw.to_numpy(), margin, alpha=alpha)
    common = ppl_adam.index.intersection(ppl_adamw.index)
    primary = welch
    if paired:
        primary = paired_tost(ppl_adam.loc[common].to_numpy(), ppl_adamw.loc[common].to_numpy(), margin, alpha=alpha)
    return {
        "statistic": "perplexity",
        "layer": -1,
        "adam": float(ppl_adam.mean()),
        "adamw": float(ppl_adamw.mean()),
        "difference": primary["difference"],
        "ci_low": primary["ci_low"],
        "ci_high": primary["ci_high"],
        "confidence": 1.0 - 2 * alpha,
        "test": "paired_tost" if paired else "tost",
        "p_value": primary["p_value"],
        "equivalent": bool(primary["equivalent"]),
        "margin": margin,
        "n_pairs": len(common) if paired else 0,
        "n_adam": len(ppl_adam),
        "n_adamw": len(ppl_adamw),
        "n_resamples": 0,
        "unpaired_ci_low": welch["ci_low"],
        "unpaired_ci_high": welch["ci_high"],
        "unpaired_test": "tost",
        "unpaired_p_value": welch["p_value"],
        "unpaired_equivalent": bool(welch["equivalent"]),
    }


def _as_series(values, seeds: Sequence[int]) -> pd.Series:
    """Perplexities by seed: a Series as given, or an array in the order of `seeds`."""
    if isinstance(values, pd.Series):
        return values.astype(np.float64)
    values = np.asarray(values, dtype=np.float64)
    index = list(seeds) if len(seeds) == len(values) else list(range(len(values)))
    return pd.Series(values, index=index)


def optimizer_tests(
    adam,
    adamw,
    ppl_adam,
    ppl_adamw,
    *,
    n_boot: int,
    permutations: int,
    seed: int,
    confidence: float,
    perplexity_margin: float,
    paired: bool = False,
) -> pd.DataFrame:
    """OPTIMIZER_TEST_COLUMNS for one Adam/AdamW pair.

    adam, adamw: `GroupedSimilarity` of each member (primary prompts). ppl_adam, ppl_adamw: validation
    perplexities, a Series indexed by seed or an array in the member's seed order. paired: the members
    share initial weights and data order per seed (`headstab.plan.spec.paired_by_seed`); the paired design
    is used when the prompt groups allow it too (`pairing_problem`), and `design` says which was.
    Rows: each statistic of TESTED_STATISTICS per layer (the content rows when both members have the
    content variant): pooled values of each member, difference AdamW - Adam; paired: paired multi-bootstrap
    interval, jackknife-t interval and p-value of the per-seed pseudo-value differences and the prompt groups
    (sign_flip_p_value: the sign-flip test of the differences, prompts fixed); unpaired_*: independent
    multi-bootstraps (seeds seed, seed + 1) and the Welch jackknife-t test (permutation_p_value: the permutation
    test of the refits' pseudo-values, prompts fixed); q_value and the labels (`_families_and_labels`).
    Statistic "perplexity" (layer -1): paired TOST (unpaired: Welch TOST) within +-perplexity_margin x
    the Adam mean at alpha = 1 - confidence, its (1 - 2 alpha) interval; Welch TOST in unpaired_*.
    """
    problem = pairing_problem(adam, adamw)
    if paired and problem is not None:
        log.warning("Adam vs AdamW tested unpaired: %s", problem)
    design_paired = paired and problem is None
    draws = draw_resamples(n_boot, len(adam.seeds), len(adam.group_sizes), seed)
    members = [_Member(adam, draws)]
    unpaired_adamw = _Member(adamw, draw_resamples(n_boot, len(adamw.seeds), len(adamw.group_sizes), seed + 1))
    members.append(_Member(adamw, draws) if design_paired else unpaired_adamw)
    options = {"confidence": confidence, "permutations": permutations, "seed": seed, "n_boot": n_boot}
    statistics = [s for s in TESTED_STATISTICS if "content" not in s or (adam.has_content and adamw.has_content)]
    frames = [_layer_rows(s, members, unpaired_adamw, design_paired, options) for s in statistics]
    table = pd.concat(frames, ignore_index=True)
    for name, grouped in (("adam", adam), ("adamw", adamw)):
        entropy = np.full(table["layer"].max() + 1, np.nan) if grouped.entropy is None else grouped.entropy.mean((0, 2))
        table[f"entropy_{name}"] = entropy[table["layer"].to_numpy()]
    table = table.assign(
        n_adam=len(adam.seeds), n_adamw=len(adamw.seeds), n_pairs=len(adam.seeds) if design_paired else 0
    )
    table = table.assign(n_resamples=n_boot, equivalent=None, margin=np.nan, unpaired_equivalent=None)
    ppl = _perplexity_row(
        _as_series(ppl_adam, adam.seeds),
        _as_series(ppl_adamw, adamw.seeds),
        design_paired,
        perplexity_margin,
        confidence,
    )
    table = pd.concat([table, pd.DataFrame([ppl])], ignore_index=True)
    table["design"] = "paired" if design_paired else "unpaired"
    return _families_and_labels(table, design_paired, min(len(adam.seeds), len(adamw.seeds)))[OPTIMIZER_TEST_COLUMNS]


def _families_and_labels(table: pd.DataFrame, paired: bool, n_unpaired: int) -> pd.DataFrame:
    """q_value, unpaired_q_value: Benjamini-Hochberg within the pair's family of layer tests (every layer and
    statistic; the perplexity row is an equivalence test, outside it); LABEL_COLUMNS at the design's seeds."""
    layer_rows = table["statistic"] != "perplexity"
    for p_column, q_column in (("p_value", "q_value"), ("unpaired_p_value", "unpaired_q_value")):
        table[q_column] = np.nan
        table.loc[layer_rows, q_column] = benjamini_hochberg(table.loc[layer_rows, p_column].to_numpy(np.float64))
    design = "paired" if paired else "unpaired"
    for column, methods in LABELS.items():
        n = int(table["n_pairs"].iloc[0]) if paired and not column.startswith("unpaired") else n_unpaired
        labels = pd.Series(None, index=table.index, dtype=object)
        for rows, method in zip((layer_rows, ~layer_rows), methods[design], strict=True):
            if method is not None:
                labels[rows] = calibration_label(method, n)
        table[column] = labels
    return table
