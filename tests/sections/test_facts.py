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
