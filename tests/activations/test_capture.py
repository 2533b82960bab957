"""Prompts to token ids and one forward pass to the stored hooks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from activations.conftest import N_LAYERS
from headstab.activations.capture import (
    check_prompt_lengths,
    collect_activations,
    extra_resid_hooks_for,
    hook_template,
    pad_token_lists,
    stored_hooks,
    tokenize_prompts,
)


def single_prompt_activations(model, ids, extra=()):
    tokens, _ = pad_token_lists([ids], 0)
    return collect_activations(model, tokens, extra)


def test_patterns_match_transformer_lens_hooks_directly(model, token_sets):
    ids = token_sets["primary"][2]
    with torch.inference_mode():
        _, reference = model.run_with_cache(torch.tensor([ids]))
    ours = single_prompt_activations(model, ids)
    assert list(ours) == ["hook_pattern", "hook_z", "hook_resid_mid"]
    for layer in range(N_LAYERS):
        np.testing.assert_array_equal(
            ours["hook_pattern"][layer][0], reference[f"blocks.{layer}.attn.hook_pattern"][0].numpy()
        )
        np.testing.assert_array_equal(
            ours["hook_resid_mid"][layer][0], reference[f"blocks.{layer}.hook_resid_mid"][0].numpy()
        )
        np.testing.assert_array_equal(ours["hook_z"][layer][0], reference[f"blocks.{layer}.attn.hook_z"][0].numpy())


def test_extra_resid_pre_is_the_hook_exactly(model, token_sets):
    ids = token_sets["primary"][2]
    alone = single_prompt_activations(model, ids, ("hook_resid_pre",))
    with torch.inference_mode():
        _, reference = model.run_with_cache(torch.tensor([ids]))
    for layer in range(N_LAYERS):
        np.testing.assert_array_equal(
            alone["hook_resid_pre"][layer][0], reference[f"blocks.{layer}.hook_resid_pre"][0].numpy()
        )


def test_stored_hooks_are_named_after_transformer_lens():
    assert stored_hooks("hook_resid_mid") == ["hook_pattern", "hook_z", "hook_resid_mid"]
    assert stored_hooks("hook_resid_mid", ("hook_resid_post", "hook_resid_pre")) == [
        "hook_pattern",
        "hook_z",
        "hook_resid_mid",
        "hook_resid_pre",
        "hook_resid_post",
    ]
    # attention-only: hook_resid_post is stored anyway and serves hook_resid_mid
    assert extra_resid_hooks_for(("hook_resid_mid", "hook_resid_post", "hook_resid_pre"), "hook_resid_post") == [
        "hook_resid_pre"
    ]
    assert hook_template("hook_pattern") == "blocks.{layer}.attn.hook_pattern"
    assert hook_template("hook_resid_pre") == "blocks.{layer}.hook_resid_pre"
    with pytest.raises(ValueError, match="'hook_resid_final' is not one of.*analysis.cka_hook"):
        stored_hooks("hook_resid_mid", ("hook_resid_final",))
    with pytest.raises(TypeError, match="the string 'hook_resid_pre'"):
        stored_hooks("hook_resid_mid", "hook_resid_pre")


def test_prompt_lengths_are_checked_naming_set_file_index_and_length():
    check_prompt_lengths([[1, 2], [1]], 2, "primary")
    with pytest.raises(ValueError, match=r"prompt set 'primary' \(file p.json\): prompt 1 has 3 tokens.*n_ctx=2"):
        check_prompt_lengths([[1, 2], [1, 2, 3]], 2, "primary", "p.json")
    with pytest.raises(ValueError, match="prompt 0 has no tokens"):
        check_prompt_lengths([[]], 2, "primary")
    tokens, lengths = pad_token_lists([[5, 6, 7], [8]], 9)
    assert tokens.tolist() == [[5, 6, 7], [8, 9, 9]] and lengths.tolist() == [3, 1]


def test_tokenize_prompts_prepends_bos_without_other_specials(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.train_from_iterator(
        ["the cat sat on the mat"] * 20,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    ).save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    bos = tokenizer.bos_token_id
    plain = tokenizer("the cat", add_special_tokens=False)["input_ids"]
    with_bos, without = (tokenize_prompts(tokenizer, ["the cat", "mat"], prepend_bos=flag) for flag in (True, False))
    assert with_bos[0] == [bos] + plain and without[0] == plain
    assert with_bos[1][0] == bos and with_bos[1][1:] == without[1]


def test_a_word_the_word_level_tokenizer_lacks_fails_naming_it_and_a_byte_level_bpe_never_does(tmp_path):
    from headstab.activations.capture import check_known_words
    from headstab.data.synthetic import generate_synthetic_documents
    from headstab.refits.tokenizer import train_bpe_tokenizer, train_word_tokenizer

    words = train_word_tokenizer(["ba be bi bo"], vocab_size=8, out_dir=tmp_path / "words")
    check_known_words(words, ["ba be", "bo bi ba"], "primary")
    with pytest.raises(ValueError, match=r"prompt set 'primary' \(file p.json\): prompt 1 has words .*'cat', 'sat'"):
        check_known_words(words, ["ba be", "the cat sat bo"], "primary", "p.json")
    check_known_words(words, ["ba <|endoftext|> be"], "primary")  # the unknown token written out is not unknown
    bpe = train_bpe_tokenizer(generate_synthetic_documents(0, 20), vocab_size=300, out_dir=tmp_path / "bpe")
    check_known_words(bpe, ["the cat sat on 東京 🙂", "zqxj"], "primary")
