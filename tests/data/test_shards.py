"""Token shards: tokenizing with EOS, dtypes, quotas, the write/read round trip, records, meta.json and their errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headstab.data import CorpusError
from headstab.data.shards import (
    aggregate_shard_records,
    build_shard,
    load_shards,
    read_corpus_meta,
    shard_token_quota,
    token_dtype,
    tokenize_documents,
    write_shard,
)
from headstab.data.sources import iter_documents
from headstab.data.synthetic import write_jsonl
from headstab.fileio import sha256_file, write_json_atomic

from .conftest import DOCS, eos_segments, local_corpus


def test_documents_become_token_ids_each_followed_by_eos(tokenizer):
    docs = DOCS[:5]
    stream = tokenize_documents(docs, tokenizer, tokenizer.eos_token_id)
    segments = eos_segments(stream, tokenizer.eos_token_id)
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
    corpus = local_corpus(tmp_path / "text.jsonl", n_shards=3)
    shard_docs = [list(iter_documents(corpus, i, 3, "c")) for i in range(3)]
    assert shard_docs[1] == [texts[1], texts[4], texts[7], texts[10]]  # rows i, i+n, i+2n, ...
    assert sorted(doc for docs in shard_docs for doc in docs) == sorted(texts)
    records = [build_shard(corpus, "c", i, tmp_path / f"shard_{i:03d}.npy", tokenizer, identity) for i in range(3)]
    eos = tokenizer.eos_token_id
    for i, shards in enumerate(load_shards([tmp_path / f"shard_{i:03d}.npy" for i in range(3)])):
        decoded = [tokenizer.decode(segment[:-1].tolist()) for segment in eos_segments(np.asarray(shards), eos)]
        assert decoded == shard_docs[i]
    meta = aggregate_shard_records(records, "c")
    write_json_atomic(tmp_path / "meta.json", meta)
    meta = read_corpus_meta(tmp_path / "meta.json")
    assert meta["n_documents"] == 11
    assert (
        meta["n_tokens"]
        == sum(r["n_tokens"] for r in records)
        == sum(len(s) for s in load_shards([tmp_path / f"shard_{i:03d}.npy" for i in range(3)]))
    )
    assert [s["sha256"] for s in meta["shards"]] == [sha256_file(tmp_path / f"shard_{i:03d}.npy") for i in range(3)]
    assert meta["tokenizer"]["tokenizer_json_sha256"] == identity["tokenizer_json_sha256"]


def test_pretokenized_save_to_disk_rows_are_copied_without_tokenizing(tmp_path, tokenizer, identity):
    import datasets

    rows = [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]]
    datasets.Dataset.from_dict({"tokens": rows, "other": ["a", "b", "c", "d"]}).save_to_disk(str(tmp_path / "ds"))
    corpus = local_corpus(tmp_path / "ds", pretokenized=True, token_column="tokens", n_shards=2)
    for i, expected in enumerate(([1, 2, 3, 6], [4, 5, 7, 8, 9, 10])):  # rows i, i+2: flattened, no EOS added
        record = build_shard(corpus, "c4", i, tmp_path / f"shard_{i:03d}.npy", tokenizer, identity)
        np.testing.assert_array_equal(np.load(tmp_path / f"shard_{i:03d}.npy"), expected)
        assert record["n_documents"] == 2 and record["eos_token_id"] is None
    with pytest.raises(CorpusError, match=r"column 'ids' not found.*corpora\.c4\.token_column"):
        list(iter_documents({**corpus, "token_column": "ids"}, 0, 2, "c4"))


def test_n_tokens_caps_each_shard_exactly(tmp_path, tokenizer, identity):
    write_jsonl(DOCS[:20], tmp_path / "text.jsonl")
    corpus = local_corpus(tmp_path / "text.jsonl", n_shards=2, n_tokens=301)
    counts = [build_shard(corpus, "c", i, tmp_path / f"s{i}.npy", tokenizer, identity)["n_tokens"] for i in range(2)]
    assert counts == [150, 151]
    full = tokenize_documents(DOCS[0:20:2], tokenizer, tokenizer.eos_token_id)
    np.testing.assert_array_equal(np.load(tmp_path / "s0.npy"), full[:150])  # a prefix of the shard's stream


def test_corpus_too_small_for_n_tokens_names_corpus_shard_and_key(tmp_path, tokenizer, identity):
    write_jsonl(DOCS[:4], tmp_path / "text.jsonl")
    corpus = local_corpus(tmp_path / "text.jsonl", n_shards=2, n_tokens=10_000_000)
    with pytest.raises(CorpusError) as error:
        build_shard(corpus, "tiny", 1, tmp_path / "shard_001.npy", tokenizer, identity)
    message = str(error.value)
    assert "'tiny'" in message and "shard 1 of 2" in message and "needs 5000000 tokens" in message
    assert "corpora.tiny.n_tokens" in message
    found = len(tokenize_documents(DOCS[1:4:2], tokenizer, tokenizer.eos_token_id))
    assert f"only {found}" in message


def test_nonexistent_shard_index_is_rejected(tmp_path, tokenizer, identity):
    write_jsonl(["a"], tmp_path / "text.jsonl")
    with pytest.raises(CorpusError, match="n_shards=2; shard 2 does not exist"):
        build_shard(local_corpus(tmp_path / "text.jsonl", n_shards=2), "c", 2, tmp_path / "s.npy", tokenizer, identity)


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
