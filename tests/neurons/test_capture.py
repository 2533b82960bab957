"""Capture of MLP neurons: the chunks are TransformerLens's `blocks.{layer}.mlp.hook_post` in float16, padded
positions dropped, and two refits streamed batch by batch give the statistics of their stored activations."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import TINY_ARCHITECTURE
from helpers.bridges import tiny_bridge

from headstab.neurons.capture import (
    mlp_post_chunks,
    mlp_post_hook_names,
    neuron_pair_passes,
    newline_token_ids,
    special_token_ids,
    stream_all_pairs,
    stream_pair_statistics,
)
from headstab.neurons.streamed import PairStatistics
from headstab.plan.spec import ArchitectureSpec
from headstab.refits.models import build_model


@pytest.fixture(scope="module")
def refits():
    """Two seeds of the suite's tiny MLP architecture, as the workflow builds them."""
    spec = ArchitectureSpec(**TINY_ARCHITECTURE)  # 2 layers, d_mlp 32
    return build_model(spec, 1), build_model(spec, 2)


def hook_values(model, tokens: np.ndarray) -> np.ndarray:
    """[batch, pos, layer, d_mlp] float32 straight from run_with_cache."""
    _, cache = model.run_with_cache(torch.as_tensor(tokens, dtype=torch.long))
    return np.stack([cache[f"blocks.{layer}.mlp.hook_post"].numpy() for layer in range(2)], axis=2)


def test_chunks_are_the_mlp_post_hook_in_float16(refits):
    model = refits[0]
    tokens = np.random.default_rng(0).integers(0, 32, size=(3, 16))
    (chunk,) = mlp_post_chunks(model, [tokens])
    assert chunk.dtype == np.float16 and chunk.shape == (48, 2, 32)
    np.testing.assert_array_equal(chunk, hook_values(model, tokens).reshape(48, 2, 32).astype(np.float16))
    assert mlp_post_hook_names(model) == ["blocks.0.mlp.hook_post", "blocks.1.mlp.hook_post"]


def test_the_pass_stops_at_the_last_mlp_and_leaves_no_hook(refits):
    """Nothing after the last MLP activation runs (the unembedding is the costly part at GPT-2 scale), and the
    model's next forward pass runs with none of the capture's hooks."""
    model = refits[0]
    later = []
    model.hook_dict["unembed.hook_in"].add_hook(lambda tensor, hook: later.append(tensor.shape))
    try:
        tokens = np.random.default_rng(4).integers(0, 32, size=(2, 8))
        (chunk,) = mlp_post_chunks(model, [tokens])
        assert later == [] and chunk.shape == (16, 2, 32)
        model(torch.as_tensor(tokens, dtype=torch.long))
        assert len(later) == 1
        np.testing.assert_array_equal(chunk, hook_values(model, tokens).reshape(16, 2, 32).astype(np.float16))
    finally:
        model.reset_hooks()


def test_padded_positions_are_dropped_prompt_by_prompt(refits):
    model = refits[0]
    tokens = np.random.default_rng(1).integers(0, 32, size=(3, 6))
    lengths = np.array([6, 2, 4])
    (chunk,) = mlp_post_chunks(model, [(tokens, lengths)])
    values = hook_values(model, tokens).astype(np.float16)
    expected = np.concatenate([values[row, :length] for row, length in enumerate(lengths)])
    np.testing.assert_array_equal(chunk, expected)


def test_two_refits_streamed_give_the_statistics_of_their_activations(refits):
    rng = np.random.default_rng(2)
    batches = [rng.integers(0, 32, size=(2, 16)) for _ in range(3)]
    streamed = stream_pair_statistics(*refits, batches, "cross_layer", ("seed1", "seed2"))
    a = np.concatenate([next(mlp_post_chunks(refits[0], [batch])) for batch in batches])
    b = np.concatenate([next(mlp_post_chunks(refits[1], [batch])) for batch in batches])
    reference = PairStatistics.empty("seed1", "seed2", 2, 32, "cross_layer")
    reference.update(a, b)
    assert (streamed.anchor, streamed.other, streamed.n_tokens) == ("seed1", "seed2", 96)
    for name in ("mean_a", "comoment_b", "cross"):
        np.testing.assert_allclose(getattr(streamed, name).numpy(), getattr(reference, name).numpy(), atol=1e-9)
    assert not torch.allclose(streamed.mean_a, streamed.mean_b)  # two refits, not one read twice


def test_an_attention_only_model_has_no_neurons_and_says_so():
    model = tiny_bridge(attn_only=True)
    with pytest.raises(
        ValueError,
        match="no hook blocks.0.mlp.hook_post .*statistics need the MLP activations: give an architecture with MLPs$",
    ):
        mlp_post_hook_names(model)


def test_every_pair_streamed_at_once_equals_each_pair_streamed_alone(refits):
    rng = np.random.default_rng(3)
    batches = [rng.integers(0, 32, size=(2, 16)) for _ in range(2)]
    third = build_model(ArchitectureSpec(**TINY_ARCHITECTURE), 3)
    models = {"seed1": refits[0], "seed2": refits[1], "seed3": third}
    every = stream_all_pairs(models, batches, "same_layer")
    assert list(every) == [("seed1", "seed2"), ("seed1", "seed3"), ("seed2", "seed3")]
    alone = stream_pair_statistics(refits[1], third, batches, "same_layer", ("seed2", "seed3"))
    for name in ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross"):
        assert torch.equal(getattr(every[("seed2", "seed3")], name), getattr(alone, name))


def test_chunks_left_on_the_device_are_the_same_float16_values(refits):
    tokens = np.random.default_rng(4).integers(0, 32, size=(2, 16))
    (on_device,) = mlp_post_chunks(refits[0], [tokens], on_device=True)
    (host,) = mlp_post_chunks(refits[0], [tokens])
    assert isinstance(on_device, torch.Tensor) and on_device.dtype == torch.float16
    np.testing.assert_array_equal(on_device.numpy(), host)


def test_skipped_tokens_are_dropped_with_the_padding(refits):
    model = refits[0]
    tokens = np.array([[0, 5, 7, 0, 9, 3], [0, 4, 7, 2, 2, 2]])
    lengths = np.array([6, 3])
    (chunk,) = mlp_post_chunks(model, [(tokens, lengths)], skip_tokens={0, 7})
    values = hook_values(model, tokens).astype(np.float16)
    expected = values[[0, 0, 0, 1], [1, 4, 5, 1]]  # prompt 0 keeps 5, 9, 3; prompt 1 keeps 4 (then padding)
    np.testing.assert_array_equal(chunk, expected)
    every = stream_all_pairs(
        dict(zip(("seed1", "seed2"), refits)), [(tokens, lengths)], "same_layer", skip_tokens={0, 7}
    )
    assert every[("seed1", "seed2")].n_tokens == 4


def test_chosen_pairs_run_only_their_models_and_equal_the_full_stream(refits):
    rng = np.random.default_rng(5)
    batches = [rng.integers(0, 32, size=(2, 16)) for _ in range(2)]

    class Refused:
        cfg = refits[0].cfg

        def run_with_cache(self, *args, **kwargs):
            raise AssertionError("a refit in no chosen pair was run")

    models = {"seed1": refits[0], "seed2": refits[1], "seed3": Refused()}
    chosen = stream_all_pairs(models, batches, "same_layer", pairs=[("seed2", "seed1")])
    full = stream_all_pairs({"seed2": refits[1], "seed1": refits[0]}, batches, "same_layer")
    assert list(chosen) == [("seed2", "seed1")]
    for name in ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross"):
        assert torch.equal(getattr(chosen[("seed2", "seed1")], name), getattr(full[("seed2", "seed1")], name))
    with pytest.raises(ValueError, match=r"\['seed9'\] that are not among the models"):
        stream_all_pairs(models, batches, "same_layer", pairs=[("seed1", "seed9")])


def test_pair_passes_hold_as_many_pairs_as_the_budget_fits():
    labels = ["a", "b", "c", "d"]  # 6 pairs
    every = [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "d")]
    assert neuron_pair_passes(labels, 10, None) == [every]
    assert neuron_pair_passes(labels, 10, 25) == [every[:2], every[2:4], every[4:]]
    assert neuron_pair_passes(labels, 10, 60) == [every]
    assert neuron_pair_passes(labels, 10, 5) == [[pair] for pair in every]  # one pair a pass at least


def test_the_newline_token_is_skipped_only_when_it_is_one_token():
    class Tokenizer:
        def __init__(self, ids):
            self.ids = ids

        def encode(self, text, add_special_tokens):
            assert text == "\n" and add_special_tokens is False
            return self.ids

    assert newline_token_ids(Tokenizer([198])) == [198]
    assert newline_token_ids(Tokenizer([5, 6])) == []


def test_special_tokens_are_each_id_once_and_only_those_the_tokenizer_has():
    tokenizer = lambda bos, eos, pad: SimpleNamespace(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)  # noqa: E731
    assert special_token_ids(tokenizer(50256, 50256, 50256)) == [50256]  # GPT-2: <|endoftext|> is all three
    assert special_token_ids(tokenizer(0, 0, None)) == [0]  # a tokenizer without a padding token
    assert special_token_ids(tokenizer(2, 1, None)) == [1, 2]
    assert special_token_ids(tokenizer(None, None, None)) == []


def test_the_model_is_hooked_at_the_mlp_activations_only(refits, monkeypatch):
    model = refits[0]
    run_with_hooks, hooked = model.run_with_hooks, []

    def spy(*args, fwd_hooks, **kwargs):
        hooked.append([name for name, _ in fwd_hooks])
        return run_with_hooks(*args, fwd_hooks=fwd_hooks, **kwargs)

    monkeypatch.setattr(model, "run_with_hooks", spy)
    next(mlp_post_chunks(model, [np.zeros((1, 4), dtype=np.int64)]))
    assert hooked == [["blocks.0.mlp.hook_post", "blocks.1.mlp.hook_post"]]


def test_a_pass_that_never_reaches_a_hook_is_an_error_naming_it(refits, monkeypatch):
    model = refits[0]
    monkeypatch.setattr(model, "run_with_hooks", lambda *args, **kwargs: None)  # hooks never called
    with pytest.raises(RuntimeError, match=r"^the forward pass never reached hook blocks\.0\.mlp\.hook_post;"):
        next(mlp_post_chunks(model, [np.zeros((1, 4), dtype=np.int64)]))


def test_token_ids_of_any_integer_dtype_give_the_same_chunks(refits):
    # Tokenized corpora are stored as uint16 (GPT-2's 50257 ids fit); embeddings index with int64 only.
    tokens = np.array([[0, 5, 7, 0, 9, 3], [0, 4, 7, 2, 2, 2]])
    batch = (tokens, np.array([6, 3]))
    (expected,) = mlp_post_chunks(refits[0], [batch], skip_tokens={0, 7})
    (narrow,) = mlp_post_chunks(
        refits[0], [(tokens.astype(np.uint16), batch[1])], skip_tokens=np.array([0, 7], dtype=np.uint16)
    )
    np.testing.assert_array_equal(narrow, expected)


def test_the_models_device_not_torchs_default_device_decides(refits):
    # A session that set another default device (torch.set_default_device) still streams on the models' device.
    tokens = np.array([[0, 5, 7, 0, 9, 3], [0, 4, 7, 2, 2, 2]])
    batch = (tokens, np.array([6, 3]))
    (expected,) = mlp_post_chunks(refits[0], [batch], skip_tokens={0, 7})
    pair = stream_pair_statistics(*refits, [batch], "same_layer", ("seed1", "seed2"), skip_tokens={0, 7})
    with torch.device("meta"):
        (chunk,) = mlp_post_chunks(refits[0], [batch], skip_tokens={0, 7})
        streamed = stream_pair_statistics(*refits, [batch], "same_layer", ("seed1", "seed2"), skip_tokens={0, 7})
        every = stream_all_pairs(dict(zip(("seed1", "seed2"), refits)), [batch], "same_layer", skip_tokens={0, 7})
    np.testing.assert_array_equal(chunk, expected)
    for statistics in (streamed, every[("seed1", "seed2")]):
        assert statistics.n_tokens == 4 and statistics.cross.device.type == "cpu"
        assert torch.equal(statistics.cross, pair.cross)


def test_streamed_pairs_hand_the_statistics_chunks_left_on_the_device(refits, monkeypatch):
    # On a GPU a numpy chunk would be a round trip through the host, batch by batch.
    update, kinds = PairStatistics.update, set()

    def spy(self, anchor_chunk, other_chunk):
        kinds.update({type(anchor_chunk), type(other_chunk)})
        update(self, anchor_chunk, other_chunk)

    monkeypatch.setattr(PairStatistics, "update", spy)
    batches = [np.random.default_rng(6).integers(0, 32, size=(2, 16))]
    stream_pair_statistics(*refits, batches, "same_layer", ("seed1", "seed2"))
    stream_all_pairs(dict(zip(("seed1", "seed2"), refits)), batches, "same_layer")
    assert kinds == {torch.Tensor}


def test_one_refit_has_no_pair_to_stream(refits):
    assert stream_all_pairs({"seed1": refits[0]}, [np.zeros((1, 4), dtype=np.int64)], "same_layer") == {}


def test_the_accumulators_live_on_the_device_asked_for(refits):
    # No batch is read: the float64 statistics are allocated where the caller asked, before any token.
    pair = stream_pair_statistics(*refits, [], "cross_layer", ("seed1", "seed2"), device="meta")
    every = stream_all_pairs(dict(zip(("seed1", "seed2"), refits)), [], "cross_layer", device="meta")
    for statistics in (pair, every[("seed1", "seed2")]):
        assert statistics.n_tokens == 0 and statistics.cross.shape == (64, 64)
        assert {statistics.mean_a.device.type, statistics.comoment_b.device.type, statistics.cross.device.type} == {
            "meta"
        }
