"""Demo prompts from held-out synthetic documents: lengths, varying repeat offsets, determinism, the command."""

import json

import pytest

from headstab.prompts.pickle_import import main
from headstab.prompts.synthetic import demo_prompts, write_demo_prompts


def count_words(text: str) -> int:
    return len(text.split())


def test_prompts_have_token_counts_in_range_and_the_repeat_share():
    prompts = demo_prompts(seed=2, n_prompts=40, count_tokens=count_words, token_range=(20, 40))
    assert len(prompts) == 40
    assert all(20 <= p.n_tokens == count_words(p.text) <= 40 for p in prompts)
    assert sum(p.span > 0 for p in prompts) == 30  # 3 of every 4


def test_repeated_span_is_verbatim_and_its_offset_and_gap_vary():
    prompts = [p for p in demo_prompts(2, 40, count_words, (20, 40)) if p.span]
    for p in prompts:
        words = p.text.split(" ")
        assert words[p.source : p.source + p.span] == words[p.copy : p.copy + p.span]
        assert p.offset >= p.span  # the copy starts after its source ends
    offsets = {p.offset for p in prompts}
    gaps = {p.offset - p.span for p in prompts}
    assert len(offsets) >= 10 and len(gaps) >= 10


def test_prompts_are_deterministic_by_seed():
    first = demo_prompts(2, 12, count_words, (20, 40))
    assert first == demo_prompts(2, 12, count_words, (20, 40))
    assert [p.text for p in first] != [p.text for p in demo_prompts(3, 12, count_words, (20, 40))]


def test_impossible_length_fails_naming_the_document():
    with pytest.raises(ValueError, match="held-out document 0 of seed 2 gave no prompt of 5000-6000 tokens"):
        demo_prompts(2, 1, count_words, (5000, 6000))


def test_command_writes_prompts_in_range_of_the_configs_tokenizer(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(
        "tokenizers: {bpe: {source: train, corpus: text, vocab_size: 300}}\n"
        "corpora: {text: {source: synthetic, seed: 0, n_documents: 30, repeated_spans: 2}}\n"
    )
    out = tmp_path / "prompts.json"
    assert (
        main(["synthetic", "--config", str(config), "--tokenizer", "bpe", "--n-prompts", "8", "--out", str(out)]) == 0
    )
    assert "wrote 8 prompts (" in capsys.readouterr().out
    prompts = json.loads(out.read_text())
    assert len(prompts) == 8 and all(isinstance(p, str) for p in prompts)
    assert [p.text for p in write_demo_prompts(config, tmp_path / "again.json", "bpe", 2, 8)] == prompts


def test_command_refuses_a_corpus_seed(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(
        "tokenizers: {bpe: {source: train, corpus: text, vocab_size: 300}}\n"
        "corpora: {text: {source: synthetic, seed: 0, n_documents: 30}}\n"
    )
    args = [
        "synthetic",
        "--config",
        str(config),
        "--tokenizer",
        "bpe",
        "--seed",
        "0",
        "--out",
        str(tmp_path / "p.json"),
    ]
    assert main(args) == 2
    assert "prompt seed 0 is a corpus seed" in capsys.readouterr().err


def test_planted_prompts_are_planted_words_with_one_span_repeated_and_the_shipped_file_is_what_the_command_writes(
    tmp_path,
):
    from pathlib import Path

    from headstab.data.planted import planted_words

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "planted.json"
    prompts = write_demo_prompts(repo / "config/demo_circuits.yaml", out, "planted_words", 2, 100)
    assert json.loads(out.read_text()) == json.loads((repo / "resources/prompts/planted_repeats.json").read_text())
    vocabulary = set(planted_words(31))
    for p in prompts:
        words = p.text.split(" ")
        assert set(words) <= vocabulary and 40 <= p.n_tokens == len(words) <= 80  # one token per word
        if p.span:
            assert 6 <= p.span <= 16 and words[p.source : p.source + p.span] == words[p.copy : p.copy + p.span]
    assert sum(p.span > 0 for p in prompts) == 75
    assert len({p.offset for p in prompts if p.span}) >= 20  # no fixed offset
