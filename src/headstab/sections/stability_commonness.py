"""The paper's "least stable yet most distinct" (§4.3, §5) tested jointly, with refits as units.

The paper finds mid-layer heads the least stable across refits and the most unique within their layer: over
layers, low stability goes with low commonness, a positive association. Both numbers carry chance and
sharpness, so each is taken above its prompt-permutation null (stability: `above_null` of the anchor's
layer; commonness: the layer's mean `commonness_excl_self_above_null`, without the head's match with itself,
which adds (1 - self_null) / H above the null) and the layer's mean head entropy is partialled out.

- per refit: Pearson's r over its layers (NaN under 3 layers: through 2 points r is +-1 by construction) and
  the partial r given entropy (NaN under 4 layers, where it is +-1 by construction, or without entropy);
- across refits: the mean partial r and a one-sided sign-flip test (`scipy.stats.permutation_test`): under
  "no association given entropy" each refit's partial r is as likely negated. The refit is the unit because a
  refit's layers share its training run; pooling every refit's layers as independent points would count one
  refit's sharper layer L times. Inference is conditional on the prompt set, as every other test here.
Mean r rather than mean Fisher z: with 4-5 layers a partial r near +-1 has an unbounded z that would set the
mean alone.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from headstab.statistics.calibration import calibration_label
from headstab.statistics.resampling import partial_correlation

__all__ = [
    "JOINT_METHOD",
    "MIN_LAYERS",
    "STABILITY_COMMONNESS_COLUMNS",
    "TEST_COLUMNS",
    "joint_test",
    "refit_correlations",
    "refit_layer_values",
    "stability_commonness_summary",
    "stability_commonness_table",
]

JOINT_METHOD = "stability_commonness_joint"
MIN_LAYERS = {"r": 3, "partial_r": 4}  # below these, a correlation over layers is +-1 by construction
TEST_COLUMNS = ["n_refits", "n_layers", "mean_r", "mean_partial_r", "n_positive", "p_value", "min_p"]
TEST_COLUMNS += ["alternative", "calibration", "reason"]
STABILITY_COMMONNESS_COLUMNS = ["promptset", "seed", "r", "partial_r", *TEST_COLUMNS]
_LAYER_COLUMNS = ("anchor_seed", "layer", "above_null", "entropy")
_COMMONNESS_COLUMNS = ("seed", "layer", "commonness_excl_self_above_null")
_FIX = "rebuild it with `snakemake --forcerun stability_tables`"


def _rows(table: pd.DataFrame, name: str, columns: tuple[str, ...], promptset: str) -> pd.DataFrame:
    missing = [column for column in ("promptset", *columns) if column not in table.columns]
    if missing:
        raise ValueError(f"{name} lacks columns {missing}; {_FIX}")
    rows = table[table["promptset"] == promptset]
    if "scope" in rows.columns:
        rows = rows[rows["scope"] == "same_layer"]
    if rows.empty:
        raise ValueError(f"{name} has no same-layer rows of prompt set {promptset!r}; {_FIX}")
    return rows


def refit_layer_values(
    layer_stability: pd.DataFrame, commonness: pd.DataFrame, promptset: str
) -> tuple[list, dict[str, np.ndarray]]:
    """(seeds, {"stability", "commonness", "entropy"}), each float64 [refit, layer]: the anchor's layer
    stability above its null and its layer entropy (layer_stability.csv), and the mean over the layer's heads
    of commonness without self above its null (commonness.csv), of one prompt set."""
    layers = _rows(layer_stability, "layer_stability.csv", _LAYER_COLUMNS, promptset)
    heads = _rows(commonness, "commonness.csv", _COMMONNESS_COLUMNS, promptset)
    stability = layers.set_index(["anchor_seed", "layer"])[["above_null", "entropy"]].unstack("layer")
    common = heads.groupby(["seed", "layer"])["commonness_excl_self_above_null"].mean().unstack("layer")
    seeds, n_layers = list(stability.index), stability["above_null"].shape[1]
    if seeds != list(common.index) or list(stability["above_null"].columns) != list(common.columns):
        raise ValueError(
            f"layer_stability.csv covers refits {seeds} and layers 0-{n_layers - 1}, commonness.csv refits "
            f"{list(common.index)} and layers {list(common.columns)} ({promptset}); {_FIX}"
        )
    values = {
        "stability": stability["above_null"].to_numpy(),
        "commonness": common.to_numpy(),
        "entropy": stability["entropy"].to_numpy(),
    }
    return seeds, values


def refit_correlations(stability: np.ndarray, commonness: np.ndarray, entropy: np.ndarray) -> dict[str, np.ndarray]:
    """Per refit, over its layers (each [refit, layer]): "r" (Pearson; NaN under 3 layers) and "partial_r"
    (given entropy; NaN under 4 layers or where entropy is missing); NaN where a variable is constant or
    missing (a layer of one head has no commonness without self)."""
    n_refits, n_layers = stability.shape
    r, partial = np.full(n_refits, np.nan), np.full(n_refits, np.nan)
    for refit in range(n_refits):
        x, y, z = stability[refit], commonness[refit], entropy[refit]  # a missing value makes both NaN
        if n_layers >= MIN_LAYERS["r"]:
            with np.errstate(invalid="ignore"):  # a constant variable: 0 / 0, NaN
                r[refit] = np.corrcoef(x, y)[0, 1]
        if n_layers >= MIN_LAYERS["partial_r"]:
            partial[refit] = partial_correlation(x, y, z)
    return {"r": r, "partial_r": partial}


def joint_test(partial_r: np.ndarray, n_permutations: int, seed: int) -> dict[str, float]:
    """Mean of the refits' finite partial r and its one-sided sign-flip p-value (alternative: mean > 0).

    Exact over all 2^n sign vectors when 2^n <= n_permutations (p at least min_p = 1 / 2^n), else
    (1 + #{mean* >= mean}) / (1 + n_permutations) over random ones (min_p = 1 / (1 + n_permutations)).
    Returns mean_partial_r, n_positive, p_value, min_p and n_used; p NaN under 2 finite values.
    """
    if n_permutations < 1:
        raise ValueError(f"config key 'statistics.permutations' must be >= 1; got {n_permutations}")
    values = np.asarray(partial_r, dtype=np.float64)  # a None in a list reads as NaN
    values = values[np.isfinite(values)]
    n = values.size
    result = {"mean_partial_r": float(values.mean()) if n else np.nan, "n_positive": int((values > 0).sum())}
    result["n_used"] = n
    if n < 2:
        return {**result, "p_value": np.nan, "min_p": np.nan}
    test = stats.permutation_test(
        (values,),
        lambda sample, axis: sample.mean(axis=axis),
        permutation_type="samples",
        alternative="greater",
        n_resamples=n_permutations,
        rng=seed,
    )
    exact = 2**n <= n_permutations
    return {**result, "p_value": float(test.pvalue), "min_p": 2.0**-n if exact else 1.0 / (1 + n_permutations)}


def _reason(n_layers: int, has_entropy: bool, n_used: int) -> str:
    """Why the test's p-value is NaN (empty when it is not)."""
    if n_layers < MIN_LAYERS["partial_r"]:
        return f"{n_layers} layers: a partial correlation over layers needs at least {MIN_LAYERS['partial_r']}"
    if n_used >= 2:
        return ""
    if not has_entropy:
        return "no head entropy in the prompt groups: rebuild them with rule prompt_group_similarity"
    return f"{n_used} refits with a defined partial r: the sign-flip test needs at least 2"


def stability_commonness_table(
    layer_stability: pd.DataFrame, commonness: pd.DataFrame, promptset: str, n_permutations: int, seed: int
) -> pd.DataFrame:
    """STABILITY_COMMONNESS_COLUMNS: one row per refit of `promptset` with its r and partial r over layers, and
    the test across refits (`joint_test`, the same on every row) with its calibration label at the number of
    refits tested and the reason when its p-value is NaN."""
    seeds, values = refit_layer_values(layer_stability, commonness, promptset)
    correlations = refit_correlations(values["stability"], values["commonness"], values["entropy"])
    test = joint_test(correlations["partial_r"], n_permutations, seed)
    n_layers = values["stability"].shape[1]
    reason = _reason(n_layers, bool(np.isfinite(values["entropy"]).any()), test["n_used"])
    finite_r = correlations["r"][np.isfinite(correlations["r"])]
    table = pd.DataFrame({"promptset": promptset, "seed": seeds, **correlations})
    table["n_refits"] = test["n_used"]
    table["n_layers"] = n_layers
    table["mean_r"] = finite_r.mean() if finite_r.size else np.nan
    for key in ("mean_partial_r", "n_positive", "p_value", "min_p"):
        table[key] = test[key]
    table["alternative"] = "greater"
    table["calibration"] = calibration_label(JOINT_METHOD, test["n_used"])
    table["reason"] = reason
    return table[STABILITY_COMMONNESS_COLUMNS]


def stability_commonness_summary(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per architecture and prompt set: the test columns of each architecture's table, and q_value,
    Benjamini-Hochberg over the architectures' p-values (a family: one claim tested per architecture; NaN
    p-values stay NaN and are not counted)."""
    rows = []
    for arch, table in tables.items():
        first = table.drop_duplicates("promptset")[["promptset", *TEST_COLUMNS]]
        rows.append(first.assign(architecture=arch))
    columns = ["architecture", "promptset", *TEST_COLUMNS]
    summary = pd.concat(rows, ignore_index=True)[columns] if rows else pd.DataFrame(columns=columns)
    p_values = summary["p_value"].to_numpy(dtype=np.float64)
    q_values = np.full(p_values.shape, np.nan)
    finite = np.isfinite(p_values)
    if finite.any():
        q_values[finite] = stats.false_discovery_control(p_values[finite])
    summary.insert(summary.columns.get_loc("p_value") + 1, "q_value", q_values)
    return summary
