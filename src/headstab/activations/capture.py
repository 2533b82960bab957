"""Prompts to token ids, and one batched forward pass to the hooks a cache stores.

A cache stores each hook under its TransformerLens name (docs/caches.md): `hook_pattern` and `hook_z`
of every block's attention, and the residual stream at `hook_resid_mid`, or `hook_resid_post` for
attention-only models, which have no `hook_resid_mid` (without an MLP the two are the same tensor).
`hook_resid_pre` / `hook_resid_post` are stored besides when asked (config key analysis.cka_hook).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ATTENTION_HOOKS",
    "RESID_HOOKS",
    "check_known_words",
    "check_prompt_lengths",
    "check_resid_hook",
    "collect_activations",
    "extra_resid_hooks_for",
    "hook_template",
    "pad_token_id_of",
    "pad_token_lists",
    "resid_hook_name",
    "stored_hooks",
    "tokenize_prompts",
]

ATTENTION_HOOKS = ("hook_pattern", "hook_z")
RESID_HOOKS = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post")


# ---------------------------------------------------------------- prompts
def tokenize_prompts(tokenizer: Any, prompts: Sequence[str], prepend_bos: bool) -> list[list[int]]:
    """Token ids of each prompt, without the tokenizer's own special tokens, BOS prepended when asked.

    Matches the paper's code (TransformerLens prepends BOS); tokenizing without special tokens and
    prepending `bos_token_id` ourselves keeps that exact for tokenizers that add other specials.
    """
    bos = tokenizer.bos_token_id
    if prepend_bos and bos is None:
        raise ValueError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', tokenizer)!r} has no bos_token_id, but cache.prepend_bos "
            "is true; set cache.prepend_bos: false or use a tokenizer with a BOS token"
        )
    encoded = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    return [([int(bos)] if prepend_bos else []) + [int(t) for t in ids] for ids in encoded]


def check_known_words(tokenizer: Any, prompts: Sequence[str], promptset: str, source: str | Path | None = None) -> None:
    """Fail on a prompt the tokenizer reads partly as its unknown token (a word-level tokenizer meeting a word
    its corpus lacks), naming the prompt and the words; a byte-level BPE never emits it."""
    unk = tokenizer.unk_token_id
    if unk is None:
        return
    where = f" (file {source})" if source is not None else ""
    encoded = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    for index, (prompt, ids) in enumerate(zip(prompts, encoded, strict=True)):
        if unk in ids and tokenizer.unk_token not in prompt:
            unknown = [w for w in prompt.split() if unk in tokenizer(w, add_special_tokens=False)["input_ids"]]
            raise ValueError(
                f"prompt set '{promptset}'{where}: prompt {index} has words the tokenizer does not know "
                f"({', '.join(repr(w) for w in unknown[:5])}), which it would read as its unknown token "
                f"{tokenizer.unk_token!r}; give prompts in the tokenizer's vocabulary (a `model: words` tokenizer "
                "knows only its corpus's words)"
            )


def pad_token_id_of(tokenizer: Any) -> int:
    """Id stored in padded positions of `tokens` (pad, else EOS, else 0); never attended by real tokens."""
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if candidate is not None:
            return int(candidate)
    return 0


def check_prompt_lengths(
    token_lists: Sequence[Sequence[int]], n_ctx: int, promptset: str, source: str | Path | None = None
) -> None:
    """Fail on an empty prompt or one longer than the model's context (BOS counted), naming its index and length."""
    where = f" (file {source})" if source is not None else ""
    for index, ids in enumerate(token_lists):
        if len(ids) == 0:
            raise ValueError(f"prompt set '{promptset}'{where}: prompt {index} has no tokens; remove it or fill it in")
        if len(ids) > n_ctx:
            raise ValueError(
                f"prompt set '{promptset}'{where}: prompt {index} has {len(ids)} tokens (BOS included when "
                f"prepended), longer than the model's context n_ctx={n_ctx}; shorten or remove that prompt"
            )


def pad_token_lists(token_lists: Sequence[Sequence[int]], pad_token_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token lists to the longest one: (tokens int32 [prompt, pos], lengths int32 [prompt])."""
    lengths = np.array([len(ids) for ids in token_lists], dtype=np.int32)
    tokens = np.full((len(token_lists), int(lengths.max(initial=0))), pad_token_id, dtype=np.int32)
    for row, ids in enumerate(token_lists):
        tokens[row, : len(ids)] = ids
    return tokens, lengths


# ---------------------------------------------------------------- hooks
def resid_hook_name(model: Any) -> str:
    """`hook_resid_mid` when the model has it, `hook_resid_post` for attention-only models (no MLP: identical)."""
    return "hook_resid_mid" if "blocks.0.hook_resid_mid" in model.hook_dict else "hook_resid_post"


def check_resid_hook(hook: str) -> None:
    if hook not in RESID_HOOKS:
        raise ValueError(
            f"residual hook {hook!r} is not one of {', '.join(RESID_HOOKS)} (config key analysis.cka_hook)"
        )


def extra_resid_hooks_for(requested: Sequence[str], resid_hook: str) -> list[str]:
    """The requested residual hooks a cache stores besides `resid_hook`, in RESID_HOOKS order.

    `hook_resid_mid` is never extra: it is `resid_hook` itself, or, for an attention-only model, the
    same tensor as its `hook_resid_post`.
    """
    if isinstance(requested, str):
        raise TypeError(f"extra_resid_hooks must be a sequence of hook names, got the string {requested!r}")
    for hook in requested:
        check_resid_hook(hook)
    return [hook for hook in RESID_HOOKS if hook in requested and hook not in ("hook_resid_mid", resid_hook)]


def stored_hooks(resid_hook: str, extra_resid_hooks: Sequence[str] = ()) -> list[str]:
    """Dataset names of a cache in file order: the attention hooks, `resid_hook`, then the extra residual hooks."""
    return [*ATTENTION_HOOKS, resid_hook, *extra_resid_hooks_for(extra_resid_hooks, resid_hook)]


def hook_template(hook: str) -> str:
    """The TransformerLens hook behind dataset `hook`, `{layer}` to fill in."""
    return ("blocks.{layer}.attn." if hook in ATTENTION_HOOKS else "blocks.{layer}.") + hook


def collect_activations(
    model: Any,
    tokens: np.ndarray,
    extra_resid_hooks: Sequence[str] = (),
    patterns_only: bool = False,
    residual_only: bool = False,
) -> dict[str, list[np.ndarray]]:
    """One forward pass over a right-padded batch (int [batch, pos]): {dataset name: one float32 array
    [batch, ...] per layer}, the hooks of `stored_hooks` (only hook_pattern with `patterns_only`; without
    hook_z with `residual_only`), as TransformerLens hands them out.

    Right padding keeps every real token's activations exact (a query never attends to later
    positions); what sits at padded positions is not meaningful and is never stored.
    """
    import torch

    n_layers = int(model.cfg.n_layers)
    hooks = ["hook_pattern"] if patterns_only else stored_hooks(resid_hook_name(model), extra_resid_hooks)
    names = {
        hook: [hook_template(hook).format(layer=layer) for layer in range(n_layers)]
        for hook in hooks
        if not (residual_only and hook == "hook_z")
    }
    wanted = {name for layer_names in names.values() for name in layer_names}
    device = next(model.parameters()).device
    batch = torch.as_tensor(np.asarray(tokens), dtype=torch.long, device=device)
    with torch.inference_mode():
        # Only the hooks stored are kept, and the run stops after the last block: no logits.
        _, cache = model.run_with_cache(batch, names_filter=lambda name: name in wanted, stop_at_layer=n_layers)
    return {hook: [cache[name].float().cpu().numpy() for name in layer_names] for hook, layer_names in names.items()}
