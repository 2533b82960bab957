"""meta-SNE of attention heads across refits and architectures (paper §4.9, Fig. 11).

Each head is described by how it separates prompts: the Euclidean distances between the
token-averaged outputs (`attn.hook_z`) it produces for every pair of prompts. Heads of all refits
and architectures share one description space (same prompts), so one t-SNE places them all.

Controls for "heads cluster by relative depth" (docs/statistics.md, "meta-SNE: depth or norm?"): a head
whose outputs are c times larger has every distance c times larger, and output norms grow with depth, so
depth clusters may be norm clusters. `scale_normalised` divides each description by its norm (its shape
kept, its scale removed) for a second embedding, and `depth_mantel_table` tests description distance against
|Δ relative depth| with each refit's layers permuted as whole blocks (refits of 3 or more layers), no t-SNE
involved.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from headstab.activations.reader import open_cache

log = logging.getLogger(__name__)


def token_mean_head_output(hook_z: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Average each head's output over the real tokens of each prompt.

    hook_z: [layer, prompt, pos, head, d_head] (`attn.hook_z`, zero-padded); lengths: [prompt].
    Returns [layer, head, prompt, d_head].
    """
    hook_z = np.asarray(hook_z)
    lengths = np.asarray(lengths)
    if hook_z.ndim != 5:
        raise ValueError(f"hook_z must be [layer, prompt, pos, head, d_head], got {hook_z.shape}")
    n_prompts, n_pos = hook_z.shape[1], hook_z.shape[2]
    if lengths.shape != (n_prompts,) or lengths.min(initial=1) < 1 or lengths.max(initial=0) > n_pos:
        raise ValueError(
            f"lengths must be [prompt] = ({hook_z.shape[1]},) with values in 1..{hook_z.shape[2]}, got {lengths}"
        )
    real = (np.arange(hook_z.shape[2])[None, :] < lengths[:, None]).astype(np.float64)
    # Masked, not trusting zero padding; float64 sums of float32 values are exact, so a constant head's
    # description is exactly zero.
    sums = np.einsum("lpshd,ps->lhpd", hook_z.astype(np.float64), real)
    return sums / lengths[None, None, :, None]


def head_descriptions(hook_z: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each head's description: distances between prompts of its token-averaged output.

    hook_z: [layer, prompt, pos, head, d_head] (zero-padded); lengths: [prompt].
    Returns [layer, head, n_prompts * (n_prompts - 1) / 2]: the upper triangle of the prompt x prompt
    Euclidean distance matrix in row-major order (as `scipy.spatial.distance.pdist`). The diagonal
    (always 0) and the mirrored lower triangle carry no information and are left out.
    """
    means = token_mean_head_output(hook_z, lengths)  # [layer, head, prompt, d_head]
    n_prompts = means.shape[2]
    if n_prompts < 2:
        raise ValueError(f"need at least two prompts to describe a head, got {n_prompts}")
    rows, cols = np.triu_indices(n_prompts, k=1)
    out = np.empty(means.shape[:2] + (len(rows),))
    for layer in range(means.shape[0]):  # one layer at a time bounds the [head, pair, d_head] buffer
        diff = means[layer][:, rows] - means[layer][:, cols]
        out[layer] = np.sqrt((diff**2).sum(axis=-1))
    return out


def refit_descriptions(cache: Any, promptset: str) -> np.ndarray:
    """[layer, head, n_prompt_pairs] of one refit from its open cache, one layer of hook_z read at a time."""
    lengths = cache.lengths(promptset)
    return np.stack(
        [head_descriptions(cache.hook_z(promptset, layer=layer)[None], lengths)[0] for layer in range(cache.n_layers)]
    )


def describe_refits(cache_paths: Mapping[tuple[str, int], str], promptset: str) -> dict[tuple[str, int], np.ndarray]:
    """(architecture, seed) -> `refit_descriptions` of its activation cache."""

    descriptions = {}
    for refit, path in tqdm(list(cache_paths.items()), desc="describe heads"):
        with open_cache(path) as cache:
            descriptions[refit] = refit_descriptions(cache, promptset)
    return descriptions


def meta_sne_frame(
    descriptions: Mapping[tuple[str, int], np.ndarray],
    facts: Mapping[str, Mapping[str, Any]],
) -> tuple[pd.DataFrame, np.ndarray]:
    """Stack the descriptions of all heads of all refits of all architectures.

    descriptions: (architecture, seed) -> [layer, head, n_features] (from `head_descriptions`);
    n_features must agree (same prompts). facts: architecture -> its `optimizer` ('Adam' | 'AdamW')
    and `attention_only` (`headstab.sections.architecture_facts`, read from the spec).
    Returns (frame with one row per (architecture, seed, layer, head) and columns architecture, seed,
    layer (0-based), head, n_layers, relative_depth = (layer + 1) / n_layers, optimizer,
    attention_only; features [row, n_features] in the same row order).
    """
    if not descriptions:
        raise ValueError("no head descriptions given")
    frames, blocks = [], []
    n_features = None
    for (architecture, seed), desc in descriptions.items():
        desc = np.asarray(desc)
        if desc.ndim != 3:
            raise ValueError(
                f"descriptions of {architecture} seed {seed} must be [layer, head, n_features], got {desc.shape}"
            )
        if n_features is None:
            n_features = desc.shape[2]
        elif desc.shape[2] != n_features:
            raise ValueError(
                f"descriptions of {architecture} seed {seed} have {desc.shape[2]} features, others "
                f"{n_features}; all refits must use the same prompt set"
            )
        if architecture not in facts:
            raise ValueError(
                f"no optimizer and attention-only facts for architecture {architecture!r}; facts cover {sorted(facts)}"
            )
        n_layers, n_heads = desc.shape[:2]
        layer, head = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
        frames.append(
            pd.DataFrame(
                {
                    "architecture": architecture,
                    "seed": seed,
                    "layer": layer.ravel(),
                    "head": head.ravel(),
                    "n_layers": n_layers,
                    "relative_depth": (layer.ravel() + 1) / n_layers,
                    "optimizer": facts[architecture]["optimizer"],
                    "attention_only": bool(facts[architecture]["attention_only"]),
                }
            )
        )
        blocks.append(desc.reshape(n_layers * n_heads, n_features))
    return pd.concat(frames, ignore_index=True), np.concatenate(blocks, axis=0)


# Reaches only the randomized SVD of the PCA initialisation (see meta_sne_embedding).
PCA_RANDOM_STATE = 0


def meta_sne_embedding(features: np.ndarray, perplexity: float = 30.0, n_threads: int = 1) -> np.ndarray:
    """2-D t-SNE of head descriptions (scikit-learn, Barnes-Hut, PCA initialisation; see `_initial_embedding`).

    features: [n_heads_total, n_features]. perplexity is clipped to (n - 1) / 3 (at least 1), since
    t-SNE needs perplexity < n. n_threads caps OpenMP/BLAS threads: 1 by default, because sklearn's
    OpenMP gradient spin-waits on a shared machine; raise it on a dedicated node. Returns [n_heads_total, 2].

    There is no seed: from a PCA start, scikit-learn's t-SNE draws no random numbers (its random_state
    reaches only the PCA's SVD solver, which finds the same components whatever the state), so the
    embedding is a function of the features alone. PCA_RANDOM_STATE pins the solver for bit-identical reruns.
    """
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    features = np.asarray(features, dtype=np.float64)
    n = features.shape[0]
    if features.ndim != 2 or n < 3:
        raise ValueError(f"t-SNE needs [n_heads >= 3, n_features] input, got shape {features.shape}")
    used = min(float(perplexity), max(1.0, (n - 1) / 3))
    if used != perplexity:
        log.info("meta-SNE: perplexity %.1f clipped to %.1f for %d heads", perplexity, used, n)
    tsne = TSNE(n_components=2, perplexity=used, init=_initial_embedding(features), random_state=PCA_RANDOM_STATE)
    with threadpool_limits(limits=n_threads):
        return tsne.fit_transform(features)


def _initial_embedding(features: np.ndarray) -> str | np.ndarray:
    """ "pca", or for one feature (descriptions from two prompts, where PCA has no second component)
    the feature itself on the x axis, scaled as scikit-learn scales PC1 (s.d. 1e-4), and y = 0.

    The y gradient of every head is then 0, so the map is the 1-D t-SNE of the one feature, drawn on a line.
    """
    if features.shape[1] >= 2:
        return "pca"
    x = features[:, 0] - features[:, 0].mean()
    spread = x.std()
    x = x / spread * 1e-4 if spread > 0 else x
    return np.column_stack([x, np.zeros_like(x)]).astype(np.float32)


META_SNE_EMBEDDINGS = ("joint", "per_optimizer")
DESCRIPTIONS = ("raw", "scale_normalised")


def scale_normalised(features: np.ndarray) -> np.ndarray:
    """Each head's description divided by its Euclidean norm: [n_heads_total, n_features] -> the same shape.

    Scaling a head's outputs by c scales every prompt distance by c, so it moves the raw description but not this
    one; what is left is how the head ranks and spaces the prompts. Division by the norm rather than z-scoring:
    the distances are non-negative and their mean is part of the shape (a z-score would also remove it, which no
    rescaling of outputs does). A head with a zero description (the same output for every prompt) stays zero.
    """
    features = np.asarray(features, dtype=np.float64)
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    return np.divide(features, norms, out=np.zeros_like(features), where=norms > 0)


def meta_sne_table(
    descriptions: Mapping[tuple[str, int], np.ndarray],
    facts: Mapping[str, Mapping[str, Any]],
    perplexity: float = 30.0,
    n_threads: int = 1,
    embedding: str = "joint",
    description: str = "raw",
) -> pd.DataFrame:
    """`meta_sne_frame` plus description_norm (each head's description norm) and the t-SNE coordinates as
    columns tsne_x, tsne_y.

    embedding: "joint" places every head in one t-SNE (Adam and AdamW heads share the axes);
    "per_optimizer" runs one t-SNE per optimizer, as the authors' code does, so coordinates of
    the two panels are not comparable (config key analysis.meta_sne_embedding).
    description: "raw" embeds the descriptions as they are (the paper's), "scale_normalised" divided by their
    norms (`scale_normalised`).
    """
    if embedding not in META_SNE_EMBEDDINGS:
        raise ValueError(
            f"embedding must be one of {list(META_SNE_EMBEDDINGS)} (config key analysis.meta_sne_embedding); got {embedding!r}"
        )
    if description not in DESCRIPTIONS:
        raise ValueError(f"description must be one of {list(DESCRIPTIONS)}; got {description!r}")
    frame, features = meta_sne_frame(descriptions, facts)
    frame = frame.assign(description_norm=np.linalg.norm(features, axis=1))
    if description == "scale_normalised":
        features = scale_normalised(features)
    xy = np.empty((len(frame), 2))
    groups = (
        [np.arange(len(frame))]
        if embedding == "joint"
        else [np.flatnonzero(frame["optimizer"].to_numpy() == optimizer) for optimizer in frame["optimizer"].unique()]
    )
    for rows in groups:
        xy[rows] = meta_sne_embedding(features[rows], perplexity=perplexity, n_threads=n_threads)
    return frame.assign(tsne_x=xy[:, 0], tsne_y=xy[:, 1], embedding=embedding, description=description)


MANTEL_MIN_LAYERS = 3  # with 2 layers a refit's depth has no order: a block permutation can only swap them
MANTEL_TABLE_COLUMNS = ["description", "predictor", "strata", "blocks", "n_refits", "n_architectures"]


def mantel_refits(
    descriptions: Mapping[tuple[str, int], np.ndarray], max_heads: int | None, seed: int
) -> list[tuple[str, int]]:
    """The refits of at least MANTEL_MIN_LAYERS layers whose heads enter the Mantel test: all of them, or whole
    refits in a seeded random order that takes one refit of every architecture before a second of any, while
    their heads fit in max_heads (at least one refit)."""
    eligible = [refit for refit, desc in descriptions.items() if np.shape(desc)[0] >= MANTEL_MIN_LAYERS]
    rng = np.random.default_rng(seed)
    by_arch: dict[str, list[tuple[str, int]]] = {}
    for refit in eligible:
        by_arch.setdefault(refit[0], []).append(refit)
    # (rank within its architecture, architecture, refit): sorted, the first of every architecture come first
    ranked = [
        (rank, i, refits[k])
        for i, refits in enumerate(by_arch.values())
        for rank, k in enumerate(rng.permutation(len(refits)))
    ]
    order = [refit for *_, refit in sorted(ranked)]
    chosen, heads = [], 0
    for refit in order:
        size = int(np.prod(np.shape(descriptions[refit])[:2]))
        if chosen and max_heads is not None and heads + size > max_heads:
            break
        chosen.append(refit)
        heads += size
    return chosen


def depth_mantel_table(
    descriptions: Mapping[tuple[str, int], np.ndarray],
    facts: Mapping[str, Mapping[str, Any]],
    n_permutations: int,
    seed: int,
    max_heads: int | None = None,
) -> pd.DataFrame:
    """Mantel test of description distance against |Δ relative depth|, an architecture's layers permuted as blocks.

    For the raw and the scale-normalised descriptions (DESCRIPTIONS): Euclidean distances between the heads'
    descriptions against the distance of their relative depths (layer + 1) / L, one-sided (far in depth, far in
    description), `headstab.statistics.mantel.mantel_test` with strata = architecture and blocks = layer of the
    architecture: each permutation gives an architecture's layers one random order, shared by its refits, all
    heads of a layer of every refit moving together. What separates architectures, what the heads of one layer
    share and what a layer of one refit shares with the same layer of another (a layer's identity across refits)
    are held fixed; what is tested is the depth order. Exact over every order when they are at most
    n_permutations (one 4-layer architecture: 24, so p >= 1/24). Only refits of at least MANTEL_MIN_LAYERS layers enter (`mantel_refits`; max_heads bounds
    the n x n distance matrix, whole refits kept). Returns MANTEL_TABLE_COLUMNS, MANTEL_COLUMNS, calibration and
    note (why r and p are NaN when no refit has 3 layers).
    """
    from scipy.spatial.distance import pdist, squareform

    from headstab.statistics.calibration import DESCRIPTIVE, calibration_label
    from headstab.statistics.mantel import MANTEL_COLUMNS, mantel_test

    columns = [*MANTEL_TABLE_COLUMNS, *MANTEL_COLUMNS, "calibration", "note"]
    refits = mantel_refits(descriptions, max_heads, seed)
    base = {"predictor": "abs_delta_relative_depth", "strata": "architecture", "blocks": "layer"}
    base["n_refits"] = len(refits)
    base["n_architectures"] = len({arch for arch, _ in refits})
    if not refits:
        depths = sorted({int(np.shape(desc)[0]) for desc in descriptions.values()})
        note = f"needs refits of at least {MANTEL_MIN_LAYERS} layers for a depth order; the run's have {depths}"
        empty = dict.fromkeys(MANTEL_COLUMNS, np.nan) | {"n_permutations": n_permutations}
        rows = [{"description": d, **base, **empty, "calibration": DESCRIPTIVE, "note": note} for d in DESCRIPTIONS]
        return pd.DataFrame(rows)[columns]
    frame, features = meta_sne_frame({refit: descriptions[refit] for refit in refits}, facts)
    # one order per architecture: a layer keeps its identity across refits, which is no depth order
    strata = frame.groupby("architecture").ngroup().to_numpy()
    blocks = frame.groupby(["architecture", "layer"]).ngroup().to_numpy()
    depth = frame["relative_depth"].to_numpy(dtype=np.float64)
    label = calibration_label("mantel_layer_blocks", len(refits))
    out = []
    depths = [int(facts[arch]["n_layers"]) for arch in sorted({arch for arch, _ in refits})]
    orders, note = math.prod(math.factorial(n_layers) for n_layers in depths), ""
    if orders <= n_permutations:  # reversing every layer order keeps each |Δ relative depth| when all share L
        floor = (2 if len(set(depths)) == 1 else 1) / orders
        note = f"exact over {orders} layer orders, so p >= {floor:.3g}"
    for description in DESCRIPTIONS:
        chosen = features if description == "raw" else scale_normalised(features)
        result = mantel_test(squareform(pdist(chosen)), depth, strata, n_permutations, seed, blocks=blocks)
        out.append({"description": description, **base, **result, "calibration": label, "note": note})
        log.info(
            "Mantel, %s descriptions vs |Δ depth| (%d refits): r %.3f, p %.4g",
            description,
            len(refits),
            result["mantel_r"],
            result["p_value"],
        )
    return pd.DataFrame(out)[columns]
