"""Training data: windows over shards, the seeded order, the step budget, and the input checks train_refit runs first."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headstab.training import TrainingData, TrainingError, train_refit
from headstab.training.data import TokenWindows, check_training_vocabulary, training_steps, window_order

from .conftest import quiet, write_shards


def test_windows_cut_each_shard_and_drop_short_tails(tmp_path):
    paths = write_shards(tmp_path, [np.arange(0, 40), np.arange(100, 130)], dtype=np.uint32)
    windows = TokenWindows.open(paths, seq_len=8)
    assert windows.n_windows == 5 + 3  # 40 // 8 and 30 // 8
    batch = windows.batch(np.array([5, 0, 7, 4]))
    assert batch.dtype == torch.int64 and batch.shape == (4, 8)
    assert batch[0].tolist() == list(range(100, 108))
    assert batch[1].tolist() == list(range(0, 8))
    assert batch[2].tolist() == list(range(116, 124))
    assert batch[3].tolist() == list(range(32, 40))
    assert windows.max_token_id() == 129


def test_data_order_is_a_seeded_permutation_per_epoch():
    first = window_order(50, seed=1, n_needed=50)
    assert sorted(first.tolist()) == list(range(50))
    assert np.array_equal(first, window_order(50, seed=1, n_needed=50))
    assert not np.array_equal(first, window_order(50, seed=2, n_needed=50))
    two_epochs = window_order(50, seed=1, n_needed=100)
    assert np.array_equal(two_epochs[:50], first)
    assert sorted(two_epochs[50:].tolist()) == list(range(50))
    assert np.array_equal(window_order(50, seed=1, n_needed=20), first[:20])


def test_budget_from_n_tokens_or_epochs(tiny_spec):
    assert training_steps(tiny_spec(n_tokens=None), n_windows=64, corpus_label="c") == 16  # 64 windows / batch 4
    assert training_steps(tiny_spec(n_tokens=None, epochs=2), n_windows=64, corpus_label="c") == 32
    assert training_steps(tiny_spec(n_tokens=640), n_windows=64, corpus_label="c") == 10  # 640 // (4 * 16)
    assert training_steps(tiny_spec(n_tokens=700), n_windows=64, corpus_label="c") == 10


def test_corpus_too_small_names_meta_file_counts_and_keys(tiny_spec, cyclic_shards, tmp_path):
    meta = tmp_path / "meta.json"
    meta.write_text("{}")
    spec = tiny_spec(n_tokens=100_000)
    with pytest.raises(TrainingError) as err:
        train_refit(spec, 1, TrainingData.of(cyclic_shards, corpus_meta_path=meta), tmp_path / "out", quiet())
    message = str(err.value)
    for needed in (
        str(meta),
        "64 windows",
        "1,024 tokens usable",
        "100,000 tokens",
        "architectures.tiny.n_tokens",
        "corpora.tiny_corpus.n_tokens",
    ):
        assert needed in message, needed
    assert not (tmp_path / "out" / "final.pt").exists()


def test_tokenizer_larger_than_d_vocab_is_refused(tiny_spec):
    with pytest.raises(
        TrainingError,
        match=r"tokenizer tok/dir has 40 tokens, more than d_vocab 32 of architecture 'tiny'.*architectures\.tiny\.d_vocab",
    ):
        check_training_vocabulary(
            tiny_spec(), tokenizer_size=40, max_token_id=10, tokenizer_label="tok/dir", corpus_label="c"
        )
    check_training_vocabulary(
        tiny_spec(), tokenizer_size=32, max_token_id=31, tokenizer_label="tok/dir", corpus_label="c"
    )


def test_tokenizer_dir_is_checked_before_training(tiny_spec, cyclic_shards, tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(40)}
    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="w0")), unk_token="w0")
    fast.save_pretrained(tmp_path / "tok")
    with pytest.raises(TrainingError, match=rf"tokenizer {tmp_path / 'tok'} has 40 tokens.*d_vocab 32"):
        train_refit(
            tiny_spec(), 1, TrainingData.of(cyclic_shards, tokenizer_dir=tmp_path / "tok"), tmp_path / "out", quiet()
        )


def test_token_ids_beyond_d_vocab_are_refused(tiny_spec, tmp_path):
    shards = write_shards(tmp_path, [np.full(64, 40)])
    with pytest.raises(TrainingError, match=r"holds token id 40, outside d_vocab 32 of architecture 'tiny'"):
        train_refit(tiny_spec(), 1, shards, tmp_path / "out", quiet())


def test_missing_corpus_meta_names_the_rule(tiny_spec, cyclic_shards, tmp_path):
    with pytest.raises(TrainingError, match=r"corpus metadata .*meta\.json does not exist.*rule corpus_meta"):
        train_refit(
            tiny_spec(),
            1,
            TrainingData.of(cyclic_shards, corpus_meta_path=tmp_path / "meta.json"),
            tmp_path / "out",
            quiet(),
        )
