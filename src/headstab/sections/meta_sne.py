"""meta-SNE of attention heads across refits and architectures (paper §4.9, Fig. 11).

Each head is described by how it separates prompts: the Euclidean distances between the
token-averaged outputs (`attn.hook_z`) it produces for every pair of prompts. Heads of all refits
and architectures share one description space (same prompts), so one t-SNE places them all.
"""

from __future__ import annotations

import logging
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


def meta_sne_table(
    descriptions: Mapping[tuple[str, int], np.ndarray],
    facts: Mapping[str, Mapping[str, Any]],
    perplexity: float = 30.0,
    n_threads: int = 1,
    embedding: str = "joint",
) -> pd.DataFrame:
    """`meta_sne_frame` plus the t-SNE coordinates as columns tsne_x, tsne_y.

    embedding: "joint" places every head in one t-SNE (Adam and AdamW heads share the axes);
    "per_optimizer" runs one t-SNE per optimizer, as the authors' code does, so coordinates of
    the two panels are not comparable (config key analysis.meta_sne_embedding).
    """
    if embedding not in META_SNE_EMBEDDINGS:
        raise ValueError(
            f"embedding must be one of {list(META_SNE_EMBEDDINGS)} (config key analysis.meta_sne_embedding); got {embedding!r}"
        )
    frame, features = meta_sne_frame(descriptions, facts)
    xy = np.empty((len(frame), 2))
    groups = (
        [np.arange(len(frame))]
        if embedding == "joint"
        else [np.flatnonzero(frame["optimizer"].to_numpy() == optimizer) for optimizer in frame["optimizer"].unique()]
    )
    for rows in groups:
        xy[rows] = meta_sne_embedding(features[rows], perplexity=perplexity, n_threads=n_threads)
    return frame.assign(tsne_x=xy[:, 0], tsne_y=xy[:, 1], embedding=embedding)
