"""Head, layer and cross-layer stability across refits, alignment maps and commonness.

Paper Eq. 3-5 (§3.2), the cross-layer variant (§3.3, §4.2) and within-layer commonness (Eq. 10,
§A.6), computed from the pair-similarity tensor of `headstab.similarity.pairs` and returned as tidy
pandas DataFrames whose columns are the CSV contract of the workflow's tables. Layers and heads are
0-based (as in hook names); seeds are the refits' seeds as given.

Every function is vectorised with numpy (argmax over axes, diagonals of the tensor); there is no
Python loop over heads, pairs of heads or pairs of refits, except the one-to-one assignment
(`headstab.matching`), one small Hungarian solve per pair of refits and layer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import scipy.special

from headstab.matching import assigned_values, one_to_one_assignment

__all__ = [
    "PAIR_COLUMNS",
    "HEAD_COLUMNS",
    "LAYER_COLUMNS",
    "ALIGNMENT_COLUMNS",
    "DISPERSION_COLUMNS",
    "COMMONNESS_COLUMNS",
    "SCOPES",
    "pair_stability_table",
    "head_stability_table",
    "layer_stability_table",
    "alignment_map_table",
    "alignment_dispersion_table",
    "commonness_table",
    "stability_tables",
    "TABLE_NAMES",
]

SCOPES = ("same_layer", "cross_layer")
PAIR_COLUMNS = [
    "promptset",
    "scope",
    "anchor_seed",
    "pair_seed",
    "layer",
    "head",
    "best_layer",
    "best_head",
    "similarity",
    "assigned_head",
    "assigned_similarity",
]
HEAD_COLUMNS = ["promptset", "scope", "anchor_seed", "layer", "head", "stability", "stability_one_to_one", "n_pairs"]
LAYER_COLUMNS = ["promptset", "scope", "anchor_seed", "layer", "mean", "std", "stability_one_to_one"]
ALIGNMENT_COLUMNS = ["promptset", "anchor_seed", "layer", "match_layer", "fraction"]
DISPERSION_COLUMNS = [
    "promptset",
    "anchor_seed",
    "layer",
    "diagonal_share",
    "normalized_entropy",
    "mean_layer_distance",
    "kurtosis",
]
COMMONNESS_COLUMNS = ["promptset", "seed", "layer", "head", "commonness", "commonness_excl_self"]


def _check_similarity(similarity: np.ndarray, seeds: Sequence[int]) -> np.ndarray:
    """Validate S against the seeds; returns S as an array (6 or 5 axes)."""
    similarity = np.asarray(similarity)
    if similarity.ndim == 6:
        n_a, n_b, n_layers, n_heads, n_layers_b, n_heads_b = similarity.shape
        if (n_layers, n_heads) != (n_layers_b, n_heads_b):
            raise ValueError(
                "pair similarity must be [seed_a, seed_b, layer_a, head_a, layer_b, head_b] with "
                f"matching layer/head axes; got shape {similarity.shape}"
            )
    elif similarity.ndim == 5:
        n_a, n_b, _, n_heads, n_heads_b = similarity.shape
        if n_heads != n_heads_b:
            raise ValueError(
                f"same-layer similarity must be [seed_a, seed_b, layer, head_a, head_b]; got shape {similarity.shape}"
            )
    else:
        raise ValueError(
            "pair similarity must be [seed_a, seed_b, layer_a, head_a, layer_b, head_b] (6 axes) or "
            f"same-layer [seed_a, seed_b, layer, head_a, head_b] (5 axes); got shape {similarity.shape}"
        )
    if n_a != n_b or n_a != len(seeds):
        raise ValueError(f"pair similarity has {n_a} x {n_b} refits but {len(seeds)} seeds were given ({list(seeds)})")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be unique; got {list(seeds)}")
    return similarity


def _same_layer_blocks(similarity: np.ndarray) -> np.ndarray:
    """[seed_a, seed_b, layer_a, head_a, layer_b, head_b] -> [seed_a, seed_b, layer, head_a, head_b]."""
    if similarity.ndim == 5:
        return similarity
    # np.diagonal moves the shared layer axis last: [seed_a, seed_b, head_a, head_b, layer].
    return np.moveaxis(np.diagonal(similarity, axis1=2, axis2=4), -1, 2)


def pair_stability_table(
    similarity: np.ndarray,
    seeds: Sequence[int],
    promptset: str,
    scopes: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Best match of every head of every anchor refit in every other refit (Eq. 3).

    similarity: S [seed_a, seed_b, layer_a, head_a, layer_b, head_b] from `pair_similarity`, or the
        same-layer blocks [seed_a, seed_b, layer, head_a, head_b] (then only scope same_layer).
    seeds: the refits' seeds, in S's seed order. promptset: name written in the promptset column.
    scopes: any of "same_layer" (search the pair refit's heads of the same layer, §3.2) and
        "cross_layer" (search all heads of all layers, §3.3); default: all the tensor allows.

    Returns PAIR_COLUMNS, one row per (scope, anchor_seed, pair_seed != anchor_seed, layer, head),
    in that order. Ties go to the lowest (layer, head) index (numpy argmax). assigned_head and
    assigned_similarity: the partner of a one-to-one (Hungarian) assignment of the layer's heads
    (`headstab.matching`); same-layer rows only (empty for cross-layer rows).
    """
    similarity = _check_similarity(similarity, seeds)
    allowed = SCOPES if similarity.ndim == 6 else ("same_layer",)
    scopes = tuple(allowed if scopes is None else scopes)
    for scope in scopes:
        if scope not in allowed:
            raise ValueError(
                f"scope {scope!r} is not available for a similarity tensor of shape "
                f"{similarity.shape}; choose from {list(allowed)}"
            )
    n_seeds, n_layers, n_heads = similarity.shape[0], similarity.shape[2], similarity.shape[3]
    if n_seeds < 2:
        raise ValueError(f"stability needs at least 2 refits; got seeds {list(seeds)}")

    anchor, pair, layer, head = np.indices((n_seeds, n_seeds, n_layers, n_heads))
    off_diagonal = (anchor != pair).ravel()
    seeds_array = np.asarray(seeds)

    frames = []
    for scope in scopes:
        if scope == "same_layer":
            blocks = _same_layer_blocks(similarity)  # [seed_a, seed_b, layer, head_a, head_b]
            best_head = blocks.argmax(axis=-1)
            best_value = np.take_along_axis(blocks, best_head[..., None], axis=-1)[..., 0]
            best_layer = layer
            assigned_head = one_to_one_assignment(blocks)
            assigned = assigned_values(blocks, assigned_head).astype(np.float64)
        else:
            flat = similarity.reshape(n_seeds, n_seeds, n_layers, n_heads, n_layers * n_heads)
            best_index = flat.argmax(axis=-1)
            best_value = np.take_along_axis(flat, best_index[..., None], axis=-1)[..., 0]
            best_layer, best_head = np.divmod(best_index, n_heads)
            assigned_head, assigned = np.full(best_head.shape, np.nan), np.full(best_head.shape, np.nan)
        frames.append(
            pd.DataFrame(
                {
                    "promptset": promptset,
                    "scope": scope,
                    "anchor_seed": seeds_array[anchor.ravel()[off_diagonal]],
                    "pair_seed": seeds_array[pair.ravel()[off_diagonal]],
                    "layer": layer.ravel()[off_diagonal],
                    "head": head.ravel()[off_diagonal],
                    "best_layer": best_layer.ravel()[off_diagonal],
                    "best_head": best_head.ravel()[off_diagonal],
                    "similarity": best_value.ravel()[off_diagonal].astype(np.float64),
                    "assigned_head": pd.array(assigned_head.ravel()[off_diagonal], dtype="Int64"),
                    "assigned_similarity": assigned.ravel()[off_diagonal],
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[PAIR_COLUMNS]


def head_stability_table(pair_table: pd.DataFrame) -> pd.DataFrame:
    """Head stability: mean over pair refits of the best-match similarity (Eq. 4), every anchor.

    pair_table: PAIR_COLUMNS (from `pair_stability_table`, any number of prompt sets and scopes).
    Returns HEAD_COLUMNS; n_pairs is the number of pair refits averaged; stability_one_to_one is the same
    mean of the one-to-one partners' similarity (NaN for cross-layer rows).
    """
    _require_columns(pair_table, PAIR_COLUMNS, "pair_table")
    keys = ["promptset", "scope", "anchor_seed", "layer", "head"]
    grouped = pair_table.groupby(keys, sort=False)
    table = grouped["similarity"].agg(stability="mean", n_pairs="count")
    # mean of an all-NaN group is NaN (skipna), as a cross-layer row's one-to-one stability should be.
    table["stability_one_to_one"] = grouped["assigned_similarity"].mean()
    return table.reset_index()[HEAD_COLUMNS]


def layer_stability_table(head_table: pd.DataFrame, ddof: int = 0) -> pd.DataFrame:
    """Layer stability: mean and standard deviation over a layer's heads of head stability (Eq. 5).

    head_table: HEAD_COLUMNS. ddof: 0 for the population standard deviation (numpy's default; a
    layer with one head has std 0), 1 for the sample standard deviation (the authors' code; a layer
    with one head has std NaN).
    Returns LAYER_COLUMNS, one row per (promptset, scope, anchor_seed, layer); stability_one_to_one is
    the mean over the layer's heads of their one-to-one stability.
    """
    _require_columns(head_table, HEAD_COLUMNS, "head_table")
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 (population s.d.) or 1 (sample s.d.); got {ddof!r}")
    keys = ["promptset", "scope", "anchor_seed", "layer"]
    grouped = head_table.groupby(keys, sort=False)
    table = grouped["stability"].mean().rename("mean").to_frame()
    table["std"] = grouped["stability"].std(ddof=ddof)
    table["stability_one_to_one"] = grouped["stability_one_to_one"].mean()
    return table.reset_index()[LAYER_COLUMNS]


def alignment_map_table(pair_table: pd.DataFrame, include_self: bool = False) -> pd.DataFrame:
    """Cross-layer alignment map: where each layer's heads find their best match (§4.2, Fig. 3).

    pair_table: PAIR_COLUMNS with scope "cross_layer" rows.
    For each (promptset, anchor_seed, layer), fraction is the share of (head, pair refit) best
    matches that fall in match_layer, pooled over the layer's heads and all pair refits. Every
    (layer, match_layer) appears, zeros included; each row's fractions sum to 1.
    include_self: also count each anchor head's match to itself (in its own layer) as one of N matches, as
    the authors' code does (config key analysis.alignment_self_match). The diagonal d then reads
    d + (1 - d) / N and every other fraction f reads f (N - 1) / N, N the number of refits.
    Returns ALIGNMENT_COLUMNS.
    """
    _require_columns(pair_table, PAIR_COLUMNS, "pair_table")
    cross = pair_table[pair_table["scope"] == "cross_layer"]
    if cross.empty:
        raise ValueError(
            "pair_table has no scope 'cross_layer' rows; build it with pair_stability_table on the "
            "full [seed_a, seed_b, layer_a, head_a, layer_b, head_b] tensor"
        )
    if include_self:
        heads = cross[["promptset", "anchor_seed", "layer", "head"]].drop_duplicates()
        cross = pd.concat([cross, heads.assign(best_layer=heads["layer"])], ignore_index=True)
    layers = np.unique(np.concatenate([cross["layer"].to_numpy(), cross["best_layer"].to_numpy()]))
    n_layers = int(layers.max()) + 1
    keys = ["promptset", "anchor_seed", "layer"]
    counts = (
        cross.groupby([*keys, "best_layer"], sort=False)
        .size()
        .unstack("best_layer", fill_value=0)
        .reindex(columns=range(n_layers), fill_value=0)
    )
    fractions = counts.div(counts.sum(axis=1), axis=0)
    fractions.columns.name = "match_layer"
    table = fractions.stack().rename("fraction").reset_index()
    # unstack sorted the rows; restore the order of the pair table (seeds as given, first first).
    order = cross[keys].drop_duplicates()
    table = order.merge(table, on=keys, how="left")
    return table[ALIGNMENT_COLUMNS].reset_index(drop=True)


def alignment_dispersion_table(alignment_map: pd.DataFrame) -> pd.DataFrame:
    """How spread out each alignment-map row is over matched layers (§4.2, Fig. 3).

    alignment_map: ALIGNMENT_COLUMNS, every match_layer of a row listed (zeros included), as
    `alignment_map_table` writes it. Each row (promptset, anchor_seed, layer) is a distribution p over
    its n_layers matched layers k (the fractions, renormalised to sum to 1). Columns:

    - diagonal_share: p[layer], the share of best matches in the anchor's own layer (0..1);
    - normalized_entropy: -sum_k p_k ln p_k / ln(n_layers), with 0 ln 0 = 0: 0 when every match falls
      in one layer, 1 when they are uniform over all layers; 0 when n_layers == 1;
    - mean_layer_distance: sum_k p_k |k - layer|, the mean distance in layers to the best match;
    - kurtosis: Fisher kurtosis of k under p (see `_row_kurtosis`): NaN for a row whose matches all
      fall in one layer, and not monotone in spread, so it is not a dispersion measure.

    The first three are finite for every row. Returns DISPERSION_COLUMNS, one row per alignment-map
    row, in the map's order.
    """
    _require_columns(alignment_map, ALIGNMENT_COLUMNS, "alignment_map")
    keys = ["promptset", "anchor_seed", "layer"]
    fraction = alignment_map["fraction"].to_numpy(dtype=np.float64)
    match = alignment_map["match_layer"].to_numpy(dtype=np.float64)
    layer = alignment_map["layer"].to_numpy(dtype=np.float64)
    frame = alignment_map[keys].copy()
    frame["w"] = fraction
    frame["diagonal"] = np.where(match == layer, fraction, 0.0)
    frame["entropy"] = scipy.special.entr(fraction)  # -p ln p, and exactly 0 at p = 0
    frame["distance"] = fraction * np.abs(match - layer)
    grouped = frame.groupby(keys, sort=False)
    sums = grouped[["w", "diagonal", "entropy", "distance"]].sum()
    n_layers = grouped.size().to_numpy()
    total = sums["w"].to_numpy()
    # Entropy of p = f / total from the sums over f: H(p) = H(f) / total + ln(total).
    entropy = sums["entropy"].to_numpy() / total + np.log(total)
    log_n = np.log(np.maximum(n_layers, 2))  # n_layers == 1 divides 0 by ln 2, giving the defined 0
    table = pd.DataFrame(
        {
            "diagonal_share": sums["diagonal"].to_numpy() / total,
            "normalized_entropy": np.where(n_layers > 1, entropy / log_n, 0.0),
            "mean_layer_distance": sums["distance"].to_numpy() / total,
            "kurtosis": _row_kurtosis(alignment_map, keys).to_numpy(),
        },
        index=sums.index,
    ).reset_index()
    return table[DISPERSION_COLUMNS]


def _row_kurtosis(alignment_map: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Fisher kurtosis of each alignment-map row, seen as a distribution over matched layers.

    Each row (keys) is the distribution of the matched layer index k with probabilities `fraction`;
    its kurtosis is E[(k - mu)^4] / Var(k)^2 - 3, which equals `scipy.stats.kurtosis(matched_layers)`
    (Fisher, biased) of the pooled best matches. A row whose matches all fall in one layer has zero
    variance and an undefined kurtosis: NaN. Not a dispersion measure: -2 for a 50/50 split over two
    layers, -1.36 for uniform over four, +95 for a 99/1 split.
    Returns a Series indexed by keys in the map's row order (groupby sort=False).
    """
    weight = alignment_map["fraction"].to_numpy(dtype=np.float64)
    match = alignment_map["match_layer"].to_numpy(dtype=np.float64)
    frame = alignment_map[keys].copy()
    frame["w"] = weight
    frame["wk"] = weight * match
    sums = frame.groupby(keys, sort=False)[["w", "wk"]].transform("sum")
    mean = sums["wk"].to_numpy() / sums["w"].to_numpy()
    centred = match - mean
    frame["m2"] = weight * centred**2
    frame["m4"] = weight * centred**4
    moments = frame.groupby(keys, sort=False)[["w", "m2", "m4"]].sum()
    variance = moments["m2"] / moments["w"]
    fourth = moments["m4"] / moments["w"]
    # Variance is in squared layer indices: anything this small is a single-layer row up to rounding.
    degenerate = variance <= 1e-12
    return ((fourth / variance.where(~degenerate) ** 2) - 3.0).rename("kurtosis")


def commonness_table(similarity: np.ndarray, seeds: Sequence[int], promptset: str) -> pd.DataFrame:
    """Within-layer commonness of every head of every refit (Eq. 10, §A.6).

    similarity: S [seed_a, seed_b, layer_a, head_a, layer_b, head_b] or same-layer blocks
        [seed_a, seed_b, layer, head_a, head_b]; only the a = b blocks are used.
    commonness of head (l, i) of refit a is the mean over ALL heads j of layer l of refit a of
    sim(i, j), the head itself included (as the paper defines it, so a layer of identical heads has
    commonness 1); commonness_excl_self leaves j = i out (NaN when a layer has one head).
    Returns COMMONNESS_COLUMNS, one row per (seed, layer, head).
    """
    similarity = _check_similarity(similarity, seeds)
    blocks = _same_layer_blocks(similarity)  # [seed_a, seed_b, layer, head_a, head_b]
    # Diagonal over seeds: [layer, head_a, head_b, seed] -> [seed, layer, head_a, head_b].
    within = np.moveaxis(np.diagonal(blocks, axis1=0, axis2=1), -1, 0).astype(np.float64)
    n_seeds, n_layers, n_heads = within.shape[:3]
    total = within.sum(axis=-1)
    self_similarity = np.diagonal(within, axis1=-2, axis2=-1)
    commonness = total / n_heads
    if n_heads > 1:
        excl_self = (total - self_similarity) / (n_heads - 1)
    else:
        excl_self = np.full_like(total, np.nan)
    seed, layer, head = np.indices((n_seeds, n_layers, n_heads))
    table = pd.DataFrame(
        {
            "promptset": promptset,
            "seed": np.asarray(seeds)[seed.ravel()],
            "layer": layer.ravel(),
            "head": head.ravel(),
            "commonness": commonness.ravel(),
            "commonness_excl_self": excl_self.ravel(),
        }
    )
    return table[COMMONNESS_COLUMNS]


def _require_columns(table: pd.DataFrame, columns: Sequence[str], name: str) -> None:
    missing = [column for column in columns if column not in table.columns]
    if missing:
        raise ValueError(f"{name} lacks columns {missing}; expected {list(columns)}, got {list(table.columns)}")


TABLE_NAMES = (
    "pair_stability",
    "head_stability",
    "layer_stability",
    "alignment_map",
    "alignment_dispersion",
    "commonness",
)


def stability_tables(
    similarity: np.ndarray, seeds: Sequence[int], promptset: str, ddof: int = 0, alignment_self_match: bool = False
) -> dict[str, pd.DataFrame]:
    """Every table of §3.2-3.3, §4.2 and §A.6 for one prompt set, keyed by TABLE_NAMES.

    similarity: S [seed_a, seed_b, layer_a, head_a, layer_b, head_b] (Eq. 2), all refits of one architecture.
    ddof: of the layer standard deviation over heads (`layer_stability_table`): 0 population, 1 sample.
    alignment_self_match: count each anchor head's match to itself in the alignment map (`alignment_map_table`).
    """
    pairs = pair_stability_table(similarity, seeds, promptset)
    heads = head_stability_table(pairs)
    alignment = alignment_map_table(pairs, include_self=alignment_self_match)
    return {
        "pair_stability": pairs,
        "head_stability": heads,
        "layer_stability": layer_stability_table(heads, ddof=ddof),
        "alignment_map": alignment,
        "alignment_dispersion": alignment_dispersion_table(alignment),
        "commonness": commonness_table(similarity, seeds, promptset),
    }
