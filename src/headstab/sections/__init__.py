"""The paper's analyses after §4.3, one module per section.

    weight_norms    §4.4.1, Table B.5     weight norms vs layer stability
    prompt_length   §4.4.2, Fig. 5/B.4    layer stability by prompt length
    optimizers      §4.5, Fig. 6/35, B.7  Adam vs AdamW: stability, activation norms, perplexity
    stability_gap   §4.6, Fig. 7-8        stability gap and depth of the extreme layers
    residual_cka    §4.7, Fig. 9/B.8      residual-stream CKA between refits
    ablation        §4.8, Fig. 10/B.9     head ablation importance vs stability
    meta_sne        §4.9, Fig. 11         meta-SNE of all heads

§4.1-4.3 are `headstab.stability`; each section's figures are the `headstab.plots` module of the same
name. This module holds what the rules pass to several sections: an architecture's facts, the one-line
summary its report captions show and how it was trained, in words, all read from its spec, never from its name.
"""

from __future__ import annotations

from typing import Any

from headstab.plan.spec import ArchitectureSpec

__all__ = ["architecture_facts", "architecture_summary", "optimizer_label", "training_label"]


def optimizer_label(optimizer: str) -> str:
    """'Adam' or 'AdamW' for the spec's optimizer setting ('adam' | 'adamw')."""
    return "AdamW" if optimizer == "adamw" else "Adam"


def architecture_facts(spec: ArchitectureSpec) -> dict[str, Any]:
    """What the cross-architecture figures encode: depth, heads, optimizer, MLP or attention-only."""
    return {
        "n_layers": spec.n_layers,
        "n_heads": spec.n_heads,
        "optimizer": optimizer_label(spec.optimizer),
        "attention_only": spec.attn_only,
    }


def architecture_summary(spec: ArchitectureSpec, results_dir: str) -> str:
    """One line naming the configuration an architecture's figures come from (for report captions)."""
    kind = "attention-only" if spec.attn_only else f"MLP d_mlp={spec.d_mlp}"
    seed_list = list(spec.seeds)
    numbered = all(isinstance(seed, int) for seed in seed_list)  # a seed grid names its refits "init-data"
    # the span first: the range between seeds 1 and 2**40 is never built
    span = seed_list[-1] - seed_list[0] + 1 if numbered else 0
    consecutive = span == len(seed_list) and seed_list == list(range(seed_list[0], seed_list[-1] + 1))
    seed_text = f"{seed_list[0]}-{seed_list[-1]}" if consecutive else seed_list
    order = ", one data order shared by all" if spec.data_order == "shared" else ""
    return (
        f"{spec.name}: {spec.n_layers} layers x {spec.n_heads} heads, d_model={spec.d_model}, d_head={spec.d_head}, "
        f"{kind}, {optimizer_label(spec.optimizer)} (lr={spec.lr}, weight_decay={spec.weight_decay}), "
        f"{len(seed_list)} refits (seeds {seed_text}{order}), tokenizer {spec.tokenizer}, corpus {spec.corpus}, "
        f"results_dir {results_dir}"
    )


def training_label(spec: ArchitectureSpec) -> str:
    """How an architecture was trained, in words: steps (when its token budget fixes them), optimizer, lr, decay."""
    length = (
        f"{spec.n_tokens // spec.tokens_per_step:,} steps of {spec.batch_size} x {spec.seq_len} tokens"
        if spec.n_tokens is not None
        else f"{spec.epochs} epoch(s) in batches of {spec.batch_size} x {spec.seq_len} tokens"
    )
    decay = f" weight decay {spec.weight_decay:g}" if spec.weight_decay else ""
    return f"{length}, {spec.optimizer} lr {spec.lr:g}{decay}"
