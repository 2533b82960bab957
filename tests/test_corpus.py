"""Corpora: synthetic generator, document sources (local files, save_to_disk, hub), shards and their metadata."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from headstab.corpus import (
    CorpusError,
    aggregate_shard_records,
    build_shard,
    generate_synthetic_documents,
    iter_documents,
    load_shards,
    read_corpus_meta,
    shard_token_quota,
    token_dtype,
    tokenize_documents,
    write_jsonl,
    write_shard,
)
from headstab.fileio import sha256_file, write_json_atomic


# ---------------------------------------------------------------- synthetic text
def test_same_seed_gives_identical_text_and_other_seeds_differ():
    first = list(generate_synthetic_documents(seed=7, n_documents=50))
    assert first == list(generate_synthetic_documents(seed=7, n_documents=50))
    other = list(generate_synthetic_documents(seed=8, n_documents=50))
    assert all(a != b for a, b in zip(first, other))
    # Document k depends only on (seed, k): a longer corpus extends a shorter one.
    assert list(generate_synthetic_documents(seed=7, n_documents=80))[:50] == first


def test_jsonl_of_the_same_seed_is_byte_identical(tmp_path):
    write_jsonl(generate_synthetic_documents(0, 40), tmp_path / "a.jsonl")
    write_jsonl(generate_synthetic_documents(0, 40), tmp_path / "b.jsonl")
    assert sha256_file(tmp_path / "a.jsonl") == sha256_file(tmp_path / "b.jsonl")
    lines = (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["text"] for line in lines] == list(generate_synthetic_documents(0, 40))


DOCS = list(generate_synthetic_documents(seed=0, n_documents=300))


def test_brackets_are_balanced_and_nested():
    pairs = {")": "(", "]": "[", "}": "{"}
    max_depth = 0
    for doc in DOCS:
        stack = []
        for char in doc:
            if char in "([{":
                stack.append(char)
                max_depth = max(max_depth, len(stack))
            elif char in pairs:
                assert stack and stack.pop() == pairs[char], doc
        assert not stack, doc
    assert max_depth >= 3  # real nesting, not only flat pairs


def test_arithmetic_lines_are_correct():
    lines = [m.groups() for doc in DOCS for m in re.finditer(r"^(\d+) ([-+*]) (\d+) = (-?\d+)$", doc, re.M)]
    assert len(lines) > 200
    for a, op, b, result in lines:
        assert int(result) == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
    assert {op for _, op, _, _ in lines} == {"+", "-", "*"}


def test_introduced_names_recur_and_code_words_repeat_verbatim():
    repeated = 0
    for doc in DOCS:
        intro = re.match(r"This is a story about (.*)\.\n", doc).group(1)
        names = re.split(r", | and ", intro)
        assert 2 <= len(names) <= 4
        assert all(len(name.split()) == 2 for name in names)
        assert doc.count(names[0]) >= 2  # introduced, and named again at the end
        repeated += sum(doc.count(name) >= 3 for name in names)
        for first, second in re.findall(r"Code words: ([a-z ]+)\. Repeat the code words: ([a-z ]+)\.", doc):
            assert first == second
    assert repeated > len(DOCS)  # most documents reuse several names many times
    assert sum("Repeat the code words" in doc for doc in DOCS) > 50


def test_lists_dialogue_and_code_are_present_and_well_formed():
    text = "\n\n".join(DOCS)
    assert re.search(r"^1\. \w+ \w+\n2\. ", text, re.M)  # numbered lists count from 1
    assert re.search(r"^- \w+$", text, re.M)  # bulleted lists
    assert re.search(r"^[A-Z][a-z]+ [A-Z][a-z]+: ", text, re.M)  # dialogue turns
    assert re.search(r'You said ".+" Yes, I did\.', text)  # a turn quoting the previous one verbatim
    for block in re.findall(r"^def \w+\(\w+, \w+\):\n(?:    .*\n)+", text, re.M):
        indents = [len(line) - len(line.lstrip(" ")) for line in block.splitlines()[1:]]
        assert all(indent in (4, 8) for indent in indents)


# ---------------------------------------------------------------- a small tokenizer for shard tests
@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from headstab.tokenizer import train_bpe_tokenizer, write_tokenizer_meta

    out = tmp_path_factory.mktemp("tok") / "bpe"
    train_bpe_tokenizer(DOCS[:100], vocab_size=300, out_dir=out)
    write_tokenizer_meta(out, {"source": "train", "corpus": "test", "vocab_size": 300})
    return out


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    from headstab.tokenizer import load_tokenizer

    return load_tokenizer(tokenizer_dir)


@pytest.fixture(scope="module")
def identity(tokenizer_dir):
    from headstab.tokenizer import tokenizer_identity

    return tokenizer_identity(tokenizer_dir)


def _local(path, **extra):
    return {"source": "local", "path": str(path), "tokenizer": "t", "n_shards": 1, "n_tokens": None,
            "streaming": True, "split": "train", "text_column": "text", **extra}


def _segments(stream: np.ndarray, eos_id: int) -> list[np.ndarray]:
    cuts = np.flatnonzero(stream == eos_id)
    return np.split(stream, cuts + 1)[:-1]


# ---------------------------------------------------------------- tokens and shards
def test_documents_become_token_ids_each_followed_by_eos(tokenizer):
    docs = DOCS[:5]
    stream = tokenize_documents(docs, tokenizer, tokenizer.eos_token_id)
    segments = _segments(stream, tokenizer.eos_token_id)
    assert len(segments) == 5
    for doc, segment in zip(docs, segments):
        assert segment[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(segment[:-1].tolist()) == doc


def test_token_dtype_switches_to_uint32_above_65536_ids():
    assert token_dtype(1024) == np.uint16
    assert token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32


def test_shard_quota_sums_to_n_tokens_with_the_remainder_in_the_last_shard():
    assert [shard_token_quota(10, 3, i) for i in range(3)] == [3, 3, 4]
    assert sum(shard_token_quota(2_000_000_000, 10, i) for i in range(10)) == 2_000_000_000
    assert shard_token_quota(None, 3, 0) is None


@pytest.mark.parametrize("vocab_size, dtype", [(1024, np.uint16), (100_000, np.uint32)])
def test_shard_write_read_round_trip(tmp_path, vocab_size, dtype):
    tokens = np.random.default_rng(0).integers(0, vocab_size, size=1000)
    record = write_shard(tokens, tmp_path / "shard_000.npy", {"corpus": "c"}, vocab_size)
    [loaded] = load_shards([tmp_path / "shard_000.npy"])
    assert isinstance(loaded, np.memmap) and loaded.dtype == dtype
    np.testing.assert_array_equal(loaded, tokens)
    on_disk = json.loads((tmp_path / "shard_000.json").read_text())
    assert on_disk == record
    assert on_disk["sha256"] == sha256_file(tmp_path / "shard_000.npy")
    assert (on_disk["n_tokens"], on_disk["dtype"], on_disk["corpus"]) == (1000, np.dtype(dtype).name, "c")


def test_token_id_outside_the_vocabulary_is_rejected(tmp_path):
    with pytest.raises(CorpusError, match="token id 300 is outside the tokenizer's vocabulary of 300"):
        write_shard(np.array([1, 2, 300]), tmp_path / "shard_000.npy", {}, vocab_size=300)


def test_shards_are_disjoint_cover_every_document_and_aggregate(tmp_path, tokenizer, identity):
    texts = [f"document number {k}" for k in range(11)]
    write_jsonl(texts, tmp_path / "text.jsonl")
    corpus = _local(tmp_path / "text.jsonl", n_shards=3)
    shard_docs = [list(iter_documents(corpus, i, 3, "c")) for i in range(3)]
    assert shard_docs[1] == [texts[1], texts[4], texts[7], texts[10]]  # rows i, i+n, i+2n, ...
    assert sorted(doc for docs in shard_docs for doc in docs) == sorted(texts)
    records = [build_shard(corpus, "c", i, tmp_path / f"shard_{i:03d}.npy", tokenizer, identity) for i in range(3)]
    eos = tokenizer.eos_token_id
    for i, shards in enumerate(load_shards([tmp_path / f"shard_{i:03d}.npy" for i in range(3)])):
        decoded = [tokenizer.decode(segment[:-1].tolist()) for segment in _segments(np.asarray(shards), eos)]
        assert decoded == shard_docs[i]
    meta = aggregate_shard_records(records, "c")
    write_json_atomic(tmp_path / "meta.json", meta)
    meta = read_corpus_meta(tmp_path / "meta.json")
    assert meta["n_documents"] == 11
    assert meta["n_tokens"] == sum(r["n_tokens"] for r in records) == sum(len(s) for s in load_shards(
        [tmp_path / f"shard_{i:03d}.npy" for i in range(3)]))
    assert [s["sha256"] for s in meta["shards"]] == [sha256_file(tmp_path / f"shard_{i:03d}.npy") for i in range(3)]
    assert meta["tokenizer"]["tokenizer_json_sha256"] == identity["tokenizer_json_sha256"]


def test_directory_of_files_shards_by_file(tmp_path):
    for k in range(4):
        write_jsonl([f"file {k} doc {j}" for j in range(3)], tmp_path / "docs" / f"part{k}.jsonl")
    corpus = _local(tmp_path / "docs", n_shards=2)
    shard_docs = [list(iter_documents(corpus, i, 2, "c")) for i in range(2)]
    assert not set(shard_docs[0]) & set(shard_docs[1])
    assert sorted(shard_docs[0] + shard_docs[1]) == sorted(f"file {k} doc {j}" for k in range(4) for j in range(3))


def test_local_txt_file_has_one_document_per_paragraph(tmp_path):
    (tmp_path / "corpus.txt").write_text("first para\nline two\n\nsecond para\n\n\n\nthird\n")
    assert list(iter_documents(_local(tmp_path / "corpus.txt"), 0, 1, "c")) == [
        "first para\nline two", "second para", "third"]


def test_local_parquet_file_with_a_named_text_column(tmp_path):
    import pandas as pd

    pd.DataFrame({"body": ["alpha", "beta", "gamma"], "id": [1, 2, 3]}).to_parquet(tmp_path / "c.parquet")
    corpus = _local(tmp_path / "c.parquet", text_column="body")
    assert list(iter_documents(corpus, 0, 1, "c")) == ["alpha", "beta", "gamma"]
    with pytest.raises(CorpusError, match=r"column 'text' not found in .*c\.parquet.*corpora\.c\.text_column"):
        list(iter_documents(_local(tmp_path / "c.parquet"), 0, 1, "c"))


def test_pretokenized_save_to_disk_rows_are_copied_without_tokenizing(tmp_path, tokenizer, identity):
    import datasets

    rows = [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]]
    datasets.Dataset.from_dict({"tokens": rows, "other": ["a", "b", "c", "d"]}).save_to_disk(str(tmp_path / "ds"))
    corpus = _local(tmp_path / "ds", pretokenized=True, token_column="tokens", n_shards=2)
    for i, expected in enumerate(([1, 2, 3, 6], [4, 5, 7, 8, 9, 10])):  # rows i, i+2: flattened, no EOS added
        record = build_shard(corpus, "c4", i, tmp_path / f"shard_{i:03d}.npy", tokenizer, identity)
        np.testing.assert_array_equal(np.load(tmp_path / f"shard_{i:03d}.npy"), expected)
        assert record["n_documents"] == 2 and record["eos_token_id"] is None
    with pytest.raises(CorpusError, match=r"column 'ids' not found.*corpora\.c4\.token_column"):
        list(iter_documents({**corpus, "token_column": "ids"}, 0, 2, "c4"))


def test_n_tokens_caps_each_shard_exactly(tmp_path, tokenizer, identity):
    write_jsonl(DOCS[:20], tmp_path / "text.jsonl")
    corpus = _local(tmp_path / "text.jsonl", n_shards=2, n_tokens=301)
    counts = [build_shard(corpus, "c", i, tmp_path / f"s{i}.npy", tokenizer, identity)["n_tokens"] for i in range(2)]
    assert counts == [150, 151]
    full = tokenize_documents(DOCS[0:20:2], tokenizer, tokenizer.eos_token_id)
    np.testing.assert_array_equal(np.load(tmp_path / "s0.npy"), full[:150])  # a prefix of the shard's stream


def test_corpus_too_small_for_n_tokens_names_corpus_shard_and_key(tmp_path, tokenizer, identity):
    write_jsonl(DOCS[:4], tmp_path / "text.jsonl")
    corpus = _local(tmp_path / "text.jsonl", n_shards=2, n_tokens=10_000_000)
    with pytest.raises(CorpusError) as error:
        build_shard(corpus, "tiny", 1, tmp_path / "shard_001.npy", tokenizer, identity)
    message = str(error.value)
    assert "'tiny'" in message and "shard 1 of 2" in message and "needs 5000000 tokens" in message
    assert "corpora.tiny.n_tokens" in message
    found = len(tokenize_documents(DOCS[1:4:2], tokenizer, tokenizer.eos_token_id))
    assert f"only {found}" in message


def test_missing_local_path_names_path_and_key(tmp_path):
    missing = tmp_path / "nowhere" / "c4.jsonl"
    with pytest.raises(CorpusError, match=rf"{missing} does not exist.*corpora\.mine\.path"):
        list(iter_documents(_local(missing), 0, 1, "mine"))


def test_directory_without_data_files_is_rejected(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.md").write_text("nothing")
    with pytest.raises(CorpusError, match=r"no \.jsonl.*corpora\.mine\.path"):
        list(iter_documents(_local(tmp_path / "empty"), 0, 1, "mine"))


def test_nonexistent_shard_index_is_rejected(tmp_path, tokenizer, identity):
    write_jsonl(["a"], tmp_path / "text.jsonl")
    with pytest.raises(CorpusError, match="n_shards=2; shard 2 does not exist"):
        build_shard(_local(tmp_path / "text.jsonl", n_shards=2), "c", 2, tmp_path / "s.npy", tokenizer, identity)


@pytest.mark.parametrize("streaming", [False, True])
def test_hub_source_calls_load_dataset_and_shards_rows(monkeypatch, streaming):
    import datasets

    table = datasets.Dataset.from_dict({"text": [f"row {k}" for k in range(7)]})
    calls = []

    def fake_load_dataset(name, config_name=None, split=None, streaming=False):
        calls.append((name, config_name, split, streaming))
        return table.to_iterable_dataset() if streaming else table

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    corpus = {"source": "hub", "name": "Skylion007/openwebtext", "config_name": None, "split": "train",
              "streaming": streaming, "text_column": "text", "n_shards": 2}
    shard_docs = [list(iter_documents(corpus, i, 2, "owt")) for i in range(2)]
    assert calls == [("Skylion007/openwebtext", None, "train", streaming)] * 2
    assert shard_docs == [["row 0", "row 2", "row 4", "row 6"], ["row 1", "row 3", "row 5"]]


def test_missing_shard_file_names_the_rule(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"shard_000\.npy does not exist.*tokenize_shard"):
        load_shards([tmp_path / "shard_000.npy"])


def test_printed_commands_quote_paths_with_spaces(tmp_path):
    import shlex

    shard = tmp_path / "results dir" / "shard_000.npy"
    with pytest.raises(FileNotFoundError) as err:
        load_shards([shard])
    assert shlex.split(str(err.value).split("`")[1]) == ["snakemake", str(shard)]
    shard.parent.mkdir()
    np.save(shard, np.zeros((2, 2), dtype=np.uint16))
    with pytest.raises(CorpusError) as err:
        load_shards([shard])
    assert shlex.split(str(err.value).split("`")[1]) == ["snakemake", str(shard), "--forcerun", "tokenize_shard"]


def test_corpus_meta_missing_keys_is_rejected(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"n_tokens": 3}))
    with pytest.raises(CorpusError, match=r"meta\.json lacks 'shards'.*corpus_meta"):
        read_corpus_meta(tmp_path / "meta.json")
