"""headstab.sections (the package): an architecture's facts and summary line, read from its spec."""

from headstab.sections import architecture_facts, architecture_summary, optimizer_label


def test_optimizer_label():
    assert optimizer_label("adamw") == "AdamW" and optimizer_label("adam") == "Adam"


def test_facts_come_from_the_spec_whatever_the_name(tiny_spec):
    # named like an Adam model with MLP, configured as an attention-only AdamW one
    facts = architecture_facts(tiny_spec(name="l2_h2", optimizer="adamw", attn_only=True, d_mlp=None))
    assert facts == {"n_layers": 2, "n_heads": 2, "optimizer": "AdamW", "attention_only": True}


def test_summary_names_the_configuration(tiny_spec):
    line = architecture_summary(tiny_spec(seeds=(1, 2, 3)), "results/x")
    assert line == (
        "tiny: 2 layers x 2 heads, d_model=16, d_head=8, MLP d_mlp=32, Adam (lr=0.01, weight_decay=0.0), "
        "3 refits (seeds 1-3), tokenizer tiny_tokenizer, corpus tiny_corpus, results_dir results/x"
    )
    assert "seeds [1, 5]" in architecture_summary(tiny_spec(seeds=(1, 5)), "r")
    assert "attention-only" in architecture_summary(tiny_spec(attn_only=True, d_mlp=None), "r")
    assert "(seeds 1-3, one data order shared by all)" in architecture_summary(
        tiny_spec(seeds=(1, 2, 3), data_order="shared"), "r"
    )


def test_seeds_far_apart_are_listed_without_building_the_range_between_them(tiny_spec):
    """[1, 2**40] is two refits: the consecutive check built the 2**40 seeds between them (MemoryError)."""
    assert "2 refits (seeds [1, 1099511627776])" in architecture_summary(tiny_spec(seeds=(1, 2**40)), "r")
    assert "3 refits (seeds [1, 3, 2])" in architecture_summary(tiny_spec(seeds=(1, 3, 2)), "r")
    assert "3 refits (seeds 4-6)" in architecture_summary(tiny_spec(seeds=(4, 5, 6)), "r")


def test_training_label_gives_steps_from_the_token_budget():
    from headstab.plan.spec import ArchitectureSpec
    from headstab.sections import training_label

    spec = ArchitectureSpec(
        name="a", n_layers=2, n_heads=8, d_model=64, d_head=8, d_mlp=256, n_ctx=256, d_vocab=300, act_fn="gelu",
        normalization_type="LN", positional_embedding_type="standard", init_mode="gpt2", attn_only=True,
        tokenizer="t", corpus="c", optimizer="adamw", weight_decay=0.2, lr=1e-2, batch_size=8, seq_len=128,
        epochs=1, n_tokens=655360, checkpoint_every=320, log_every=16, divergence_factor=3.0, seeds=(1, 2),
    )  # fmt: skip
    assert training_label(spec) == "640 steps of 8 x 128 tokens, adamw lr 0.01 weight decay 0.2"
    by_epochs = spec.__class__(**{**spec.__dict__, "n_tokens": None, "weight_decay": 0.0, "optimizer": "adam"})
    assert training_label(by_epochs) == "1 epoch(s) in batches of 8 x 128 tokens, adam lr 0.01"
