"""Cross-layer stability against its null (paper §3.3, §4.2; docs/statistics.md "Prompt-permutation null").

A head's cross-layer stability is the mean over pair refits of its best match among every head of every layer,
a maximum over n_layers x n_heads candidates: its raw value rises with the number of layers even when no head
shares anything with another. Its null is the same maximum on the prompt-permutation null tensor
(`headstab.similarity.null_pairs`), so the difference, `above_null`, is calibrated for the maximum.

Test (`sign_flip_above`): for anchor a, each pair refit b gives one paired difference d_b = best match - null
best match. Under H0 (refit b's patterns are no more like a's on the same prompt than on its partner) each d_b is
as likely negated, and given the anchor the pair refits are independent, so the one-sided sign-flip test over
them is exact whatever the head's own level: a positional head (high observed, high null) is not called above
its null because other heads' nulls are lower. The alignment map and its dispersion are taken on the null too:
the chance level of "middle layers spread more".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headstab.statistics.calibration import ALPHA, calibration_label

__all__ = [
    "METHOD",
    "NULL_ALIGNMENT_COLUMNS",
    "TEST_COLUMNS",
    "add_cross_layer_null",
    "cross_layer_best",
    "cross_layer_test_columns",
    "null_alignment_tables",
    "sign_flip_above",
]

METHOD = "cross_layer_sign_flip"
TEST_COLUMNS = ["null_quantile", "p_value", "q_value", "p_calibration"]
DISPERSION_MEASURES = ("diagonal_share", "normalized_entropy", "mean_layer_distance", "kurtosis")
NULL_ALIGNMENT_COLUMNS = ["fraction_null", *(f"{name}_null" for name in DISPERSION_MEASURES)]
COLUMN_CHUNK = 512  # heads whose sign-flipped means are held at once: n_signs x COLUMN_CHUNK float64


def cross_layer_best(similarity: np.ndarray) -> np.ndarray:
    """[seed_a, seed_b, layer_a, head_a, layer_b, head_b] -> [seed_a, seed_b, layer, head]: best match over every layer's heads."""
    n_seeds, _, n_layers, n_heads = similarity.shape[:4]
    return similarity.reshape(n_seeds, n_seeds, n_layers, n_heads, -1).max(axis=-1)


def sign_flip_above(
    differences: np.ndarray, n_signs: int, seed: int, alpha: float = ALPHA
) -> tuple[np.ndarray, np.ndarray]:
    """One-sided sign-flip test that the mean of paired differences over axis 0 is above 0.

    differences: [pair, ...], trailing axes tested separately with the same sign vectors. With 2**n_pairs <=
    n_signs every sign vector is enumerated and p = #{mean* >= mean} / 2**n_pairs (exact, at least 1 / 2**n_pairs,
    the identity included); otherwise p = (1 + #{mean* >= mean}) / (1 + n_signs) over random sign vectors.
    Returns float64 (p_value, quantile), each of the trailing shape: quantile is the 1 - alpha quantile of the
    sign-flipped means, the mean a difference must exceed to be called above 0 at alpha.
    """
    d = np.asarray(differences, dtype=np.float64)
    n = len(d)
    if n < 1 or n_signs < 1:
        raise ValueError(f"a sign-flip test needs paired differences and sign vectors; got {n} and {n_signs}")
    flat = d.reshape(n, -1)
    exact = 2**n <= n_signs
    if exact:
        signs = 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1)
    else:
        signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n_signs, n))
    observed = flat.mean(axis=0)
    slack = 8 * np.finfo(np.float64).eps * np.abs(flat).max(axis=0, initial=0.0)  # a tie up to rounding counts
    extreme, quantile = np.empty(flat.shape[1]), np.empty(flat.shape[1])
    for start in range(0, flat.shape[1], COLUMN_CHUNK):
        part = slice(start, start + COLUMN_CHUNK)
        flipped = signs @ flat[:, part] / n
        extreme[part] = (flipped >= observed[part] - slack[part]).sum(axis=0)
        quantile[part] = np.quantile(flipped, 1.0 - alpha, axis=0)
    p_value = extreme / len(signs) if exact else (1.0 + extreme) / (1.0 + n_signs)
    return p_value.reshape(d.shape[1:]), quantile.reshape(d.shape[1:])


def add_cross_layer_null(kinds: dict, resamples, null_similarity, grouped, n_signs: int, seed: int) -> None:
    """Kind "cross_layer_null" in `kinds` (`headstab.statistics.interval_tables.replicates_by_kind`): the null's
    best matches, their replicates over the same resamples, and each anchor's sign-flip test over its pair refits
    of the head's and of the layer's mean difference from the null ("head_p_value", "head_null_quantile" [anchor,
    layer, head], "anchor_layer_p_value", "anchor_layer_null_quantile" [anchor, layer]). Nothing without a null.

    null_similarity: (S0 [seed_a, seed_b, layer_a, head_a, layer_b, head_b], partners [prompt]) of `grouped`'s
    refits and prompts (`headstab.similarity.pairs.read_pair_similarity_null`), or None; partners other than
    `grouped.partners` (another statistics.seed) raise.
    """
    from headstab.statistics.bootstrap import stability_replicates

    if null_similarity is None:
        return
    null, partners = null_similarity
    if not np.array_equal(partners, grouped.partners):
        raise ValueError(
            "the pair-similarity file's null pairs prompts differently from the prompt groups (another "
            "statistics.seed or prompt set); rebuild both (snakemake --forcerun pair_similarity prompt_group_similarity)"
        )
    kinds["cross_layer_null"] = values = stability_replicates(resamples, best=cross_layer_best(null))
    n = values["pair_best"].shape[0]
    off_diagonal = ~np.eye(n, dtype=bool)
    pairs = (kinds["cross_layer"]["pair_best"] - values["pair_best"])[off_diagonal]  # [anchor * (n - 1), layer, head]
    differences = np.moveaxis(pairs.reshape(n, n - 1, *pairs.shape[1:]), 1, 0)  # [pair, anchor, layer, head]
    for name, d, null_estimate in (
        ("head", differences, values["head_estimate"]),
        ("anchor_layer", differences.mean(axis=-1), values["head_estimate"].mean(axis=-1)),
    ):
        p_value, quantile = sign_flip_above(d, n_signs, seed)
        values[f"{name}_p_value"], values[f"{name}_null_quantile"] = p_value, null_estimate + quantile


def cross_layer_test_columns(null: dict, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """TEST_COLUMNS of a statistic of `shape` ([anchor, layer, head] or [anchor, layer]) from the tests that
    `add_cross_layer_null` put in the null kind `null`; NaN where there are none (same-layer, pooled rows).
    q_value: Benjamini-Hochberg over the rows of the statistic (the family: one table's cross-layer rows of one
    prompt set); p_calibration: `calibration_label(METHOD, refits)`."""
    from scipy.stats import false_discovery_control

    name = {3: "head", 2: "anchor_layer"}.get(len(shape))
    if name is None or f"{name}_p_value" not in null:
        return {column: np.full(shape, np.nan) for column in TEST_COLUMNS}
    p_value = null[f"{name}_p_value"]
    q_value = np.full(p_value.shape, np.nan)
    finite = np.isfinite(p_value)
    q_value[finite] = false_discovery_control(p_value[finite])
    label = calibration_label(METHOD, null["pair_best"].shape[0])
    return {
        "null_quantile": null[f"{name}_null_quantile"],
        "p_value": p_value,
        "q_value": q_value,
        "p_calibration": np.full(shape, label, dtype=object),
    }


def null_alignment_tables(
    alignment_map: pd.DataFrame,
    dispersion: pd.DataFrame,
    null_similarity: np.ndarray | None,
    seeds,
    promptset: str,
    include_self: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The alignment map (`fraction_null`) and its dispersion (`<measure>_null`) of the null tensor's best matches
    beside the observed ones (`headstab.stability.alignment_map_table`, `alignment_dispersion_table`); NaN without
    a null. alignment_map, dispersion: ALIGNMENT_COLUMNS and DISPERSION_COLUMNS of one prompt set."""
    from headstab.stability import alignment_dispersion_table, alignment_map_table, pair_stability_table

    alignment_map, dispersion = alignment_map.copy(), dispersion.copy()
    if null_similarity is None:
        alignment_map["fraction_null"] = np.nan
        for measure in DISPERSION_MEASURES:
            dispersion[f"{measure}_null"] = np.nan
        return alignment_map, dispersion
    pairs = pair_stability_table(null_similarity, seeds, promptset, scopes=("cross_layer",))
    null_map = alignment_map_table(pairs, include_self=include_self)
    null_dispersion = alignment_dispersion_table(null_map)
    keys = ["promptset", "anchor_seed", "layer"]
    alignment_map = alignment_map.merge(
        null_map.rename(columns={"fraction": "fraction_null"}), on=[*keys, "match_layer"], how="left", validate="1:1"
    )
    renamed = null_dispersion.rename(columns={measure: f"{measure}_null" for measure in DISPERSION_MEASURES})
    return alignment_map, dispersion.merge(renamed, on=keys, how="left", validate="1:1")
