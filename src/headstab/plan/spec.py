"""The architecture spec: one row of the paper's Table 1, and the error every config check raises.

A leaf module (nothing of headstab imported), so every layer can name a spec without importing the
config's validation.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any


class ConfigError(ValueError):
    """A configuration value is missing, misspelt or inconsistent; the message says which and how to fix it."""


@dataclass(frozen=True)
class ArchitectureSpec:
    """One row of the paper's Table 1: the model, its data and its training recipe."""

    name: str
    # model
    n_layers: int
    n_heads: int
    d_model: int
    d_head: int
    d_mlp: int
    n_ctx: int
    d_vocab: int
    act_fn: str
    normalization_type: str
    positional_embedding_type: str
    init_mode: str
    attn_only: bool
    # data
    tokenizer: str
    corpus: str
    # training
    optimizer: str
    weight_decay: float
    lr: float
    batch_size: int
    seq_len: int
    epochs: int
    n_tokens: int | None
    checkpoint_every: int
    log_every: int
    divergence_factor: float  # training stops when a loss exceeds divergence_factor x ln(d_vocab)
    seeds: tuple[int | str, ...]  # a seed_grid refit is named "{init}-{data}" (headstab.plan.seed_design)
    # Steps whose weights train keeps (headstab.training.snapshots); no effect on the weights at any step, and left out
    # of to_dict() when empty, so the train and cache params of an architecture without snapshots stay as they were.
    snapshot_steps: tuple[int, ...] = ()
    # "per_seed": a refit's seed also orders its windows; "shared": one order for every refit (headstab.plan.seed_design).
    # Left out of to_dict() when per_seed, so the train params of the paper's refits stay as they were.
    data_order: str = "per_seed"

    @property
    def initializer_range(self) -> float:
        """Std of TransformerLens's gpt2 init: 0.8 / sqrt(d_model) (0.0353553 at d_model 512)."""
        return 0.8 / math.sqrt(self.d_model)

    @property
    def n_params(self) -> int:
        """Attention and MLP weight matrices, without biases, LayerNorms or embeddings (the listings' n_params)."""
        attention = 4 * self.d_model * self.n_heads * self.d_head
        mlp = 0 if self.attn_only else 2 * self.d_model * self.d_mlp
        return self.n_layers * (attention + mlp)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def model_config(self, seed: int) -> dict[str, Any]:
        """Keyword arguments for TransformerLens's TransformerBridgeConfig (seeded initialisation)."""
        return {
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "d_model": self.d_model,
            "d_head": self.d_head,
            "d_mlp": self.d_mlp,
            "n_ctx": self.n_ctx,
            "d_vocab": self.d_vocab,
            "act_fn": self.act_fn,
            "normalization_type": self.normalization_type,
            "positional_embedding_type": self.positional_embedding_type,
            "init_mode": self.init_mode,
            "initializer_range": self.initializer_range,
            "attn_only": self.attn_only,
            "seed": int(seed),
            "tie_word_embeddings": False,
        }

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["seeds"] = list(self.seeds)
        if self.snapshot_steps:
            out["snapshot_steps"] = list(self.snapshot_steps)
        else:
            del out["snapshot_steps"]
        if self.data_order == "per_seed":
            del out["data_order"]
        return out


def spec_from_dict(values: dict[str, Any]) -> ArchitectureSpec:
    """ArchitectureSpec from `ArchitectureSpec.to_dict()` output (e.g. Snakemake params)."""
    return ArchitectureSpec(
        **{**values, "seeds": tuple(values["seeds"]), "snapshot_steps": tuple(values.get("snapshot_steps", ()))}
    )


ARCHITECTURE_FIELDS = tuple(f.name for f in fields(ArchitectureSpec) if f.name != "name")
# Filled here, not by a schema `default:` (that would be written into every entry and override architecture_defaults).
BUILT_IN_ARCHITECTURE_DEFAULTS: dict[str, Any] = {
    "divergence_factor": 3.0,
    "snapshot_steps": (),
    "data_order": "per_seed",
}


# The model build_model(spec, s) builds and the token stream its data comes from: shared by what fixes a
# refit's start and data (PAIRING_FIELDS) and what fixes its training trajectory (training.checkpoint).
MODEL_AND_DATA_FIELDS = (
    "n_layers",
    "n_heads",
    "d_model",
    "d_head",
    "d_mlp",
    "n_ctx",
    "d_vocab",
    "act_fn",
    "normalization_type",
    "positional_embedding_type",
    "init_mode",
    "attn_only",
    "tokenizer",
    "corpus",
)
# What fixes refit s's start and data: build_model(spec, s) reads the model fields and the seed, and
# window_order(seed) runs over the corpus cut into seq_len windows for the step budget.
PAIRING_FIELDS = (
    *MODEL_AND_DATA_FIELDS,
    "batch_size",
    "seq_len",
    "epochs",
    "n_tokens",
    "seeds",
    "data_order",
)


def paired_by_seed(adam: ArchitectureSpec, adamw: ArchitectureSpec) -> bool:
    """Whether refit s of the two architectures starts from the same weights and sees the same data order
    (every field of PAIRING_FIELDS equal), so a comparison of the two is a paired design."""
    return all(getattr(adam, name) == getattr(adamw, name) for name in PAIRING_FIELDS)
