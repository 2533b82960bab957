"""Trained-in head types: trained vs step-0 weak universality with intervals, the verdict, the sentences."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headstab.head_types import HEAD_TYPES
from headstab.plan.spec import ArchitectureSpec
from headstab.sections.trained_in import trained_in_sentences, trained_in_table, training_label, weak_universality

N_REFITS, N_LAYERS, N_HEADS = 8, 2, 4


def typed(previous_token_refits: set[int], layer: int = 0) -> pd.DataFrame:
    """Heads of N_REFITS refits, head 0 of `layer` a previous-token head in the given refits, the rest untyped."""
    rows = [
        (
            refit,
            lay,
            head,
            "previous_token" if (refit in previous_token_refits and lay == layer and head == 0) else "none",
        )
        for refit in range(1, N_REFITS + 1)
        for lay in range(N_LAYERS)
        for head in range(N_HEADS)
    ]
    return pd.DataFrame(rows, columns=["refit", "layer", "head", "type"])


def universality(above_null: float) -> pd.DataFrame:
    rows = [
        (
            layer,
            name,
            "above_null",
            above_null if name == "previous_token" else np.nan,
            above_null - 0.01,
            above_null + 0.01,
        )
        for layer in range(N_LAYERS)
        for name in HEAD_TYPES
    ]
    return pd.DataFrame(rows, columns=["layer", "type", "statistic", "estimate", "ci_low", "ci_high"])


def table(trained: set[int], step0: set[int], **kwargs) -> pd.DataFrame:
    options = {"min_share": 0.75, "n_boot": 500, "seed": 0, "confidence": 0.95} | kwargs
    return trained_in_table("arch", typed(trained), typed(step0), universality(0.05), **options)


def test_weak_universality_is_the_share_of_refits_with_the_type_and_its_interval_brackets_it():
    share, low, high, n = weak_universality(typed({1, 2, 3, 4, 5, 6}), "previous_token", 0, 500, 0, 0.95)
    assert (share, n) == (6 / 8, 8)
    assert 0.0 <= low <= share <= high <= 1.0 and high - low > 0
    assert weak_universality(typed({1, 2}), "previous_token", 1, 500, 0, 0.95)[:3] == (0.0, 0.0, 0.0)
    assert weak_universality(typed(set(range(1, 9))), "previous_token", 0, 500, 0, 0.95)[:3] == (1.0, 1.0, 1.0)


def test_a_type_in_every_trained_refit_and_no_step0_refit_is_trained_in():
    result = table(trained=set(range(1, 9)), step0=set()).set_index(["layer", "type"])
    assert result.loc[(0, "previous_token"), "trained_in"]
    assert result.loc[(0, "previous_token"), ["trained", "step0"]].tolist() == [1.0, 0.0]
    assert result.loc[(0, "previous_token"), "above_null"] == 0.05
    assert not result.loc[(1, "previous_token"), "trained_in"]  # layer 1 has none
    assert result["trained_in"].sum() == 1


def test_below_the_share_or_overlapping_step0_is_not_trained_in():
    assert not table(trained={1, 2, 3, 4, 5}, step0=set())["trained_in"].any()  # 5 of 8 < 0.75
    assert not table(trained=set(range(1, 9)), step0={1, 2, 3, 4, 5, 6, 7})["trained_in"].any()  # step 0 has it too
    assert table(trained=set(range(1, 9)), step0=set(), min_share=1.0)["trained_in"].any()


def test_sentences_name_the_trained_in_type_with_counts_or_say_positional():
    trained_in = table(trained=set(range(1, 9)), step0={3})
    positional = table(trained={1, 2}, step0=set()).assign(architecture="other")
    sentences = trained_in_sentences(pd.concat([trained_in, positional]), ["arch", "other"], {"arch": "640 steps"})
    assert sentences[0].startswith("arch (640 steps): training put there previous-token heads in layer 0: 8 of 8 ")
    assert "against 1 of 8 at step 0" in sentences[0] and "above the null 0.050 [0.040, 0.060]" in sentences[0]
    assert sentences[1].startswith("other: no head type that training put there")
    assert "positional at this scale" in sentences[1]


def test_training_label_gives_steps_from_the_token_budget():
    spec = ArchitectureSpec(
        name="a", n_layers=2, n_heads=8, d_model=64, d_head=8, d_mlp=256, n_ctx=256, d_vocab=300, act_fn="gelu",
        normalization_type="LN", positional_embedding_type="standard", init_mode="gpt2", attn_only=True,
        tokenizer="t", corpus="c", optimizer="adamw", weight_decay=0.2, lr=1e-2, batch_size=8, seq_len=128,
        epochs=1, n_tokens=655360, checkpoint_every=320, log_every=16, divergence_factor=3.0, seeds=(1, 2),
    )  # fmt: skip
    assert training_label(spec) == "640 steps of 8 x 128 tokens, adamw lr 0.01 weight decay 0.2"
