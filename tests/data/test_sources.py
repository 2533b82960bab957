"""Document sources: local files and directories, .txt paragraphs, parquet columns, the hub, and their errors."""

from __future__ import annotations

import pytest

from headstab.data import CorpusError
from headstab.data.sources import iter_documents
from headstab.data.synthetic import write_jsonl

from .conftest import local_corpus


def test_directory_of_files_shards_by_file(tmp_path):
    for k in range(4):
        write_jsonl([f"file {k} doc {j}" for j in range(3)], tmp_path / "docs" / f"part{k}.jsonl")
    corpus = local_corpus(tmp_path / "docs", n_shards=2)
    shard_docs = [list(iter_documents(corpus, i, 2, "c")) for i in range(2)]
    assert not set(shard_docs[0]) & set(shard_docs[1])
    assert sorted(shard_docs[0] + shard_docs[1]) == sorted(f"file {k} doc {j}" for k in range(4) for j in range(3))


def test_local_txt_file_has_one_document_per_paragraph(tmp_path):
    (tmp_path / "corpus.txt").write_text("first para\nline two\n\nsecond para\n\n\n\nthird\n")
    assert list(iter_documents(local_corpus(tmp_path / "corpus.txt"), 0, 1, "c")) == [
        "first para\nline two",
        "second para",
        "third",
    ]


def test_local_parquet_file_with_a_named_text_column(tmp_path):
    import pandas as pd

    pd.DataFrame({"body": ["alpha", "beta", "gamma"], "id": [1, 2, 3]}).to_parquet(tmp_path / "c.parquet")
    corpus = local_corpus(tmp_path / "c.parquet", text_column="body")
    assert list(iter_documents(corpus, 0, 1, "c")) == ["alpha", "beta", "gamma"]
    with pytest.raises(CorpusError, match=r"column 'text' not found in .*c\.parquet.*corpora\.c\.text_column"):
        list(iter_documents(local_corpus(tmp_path / "c.parquet"), 0, 1, "c"))


def test_missing_local_path_names_path_and_key(tmp_path):
    missing = tmp_path / "nowhere" / "c4.jsonl"
    with pytest.raises(CorpusError, match=rf"{missing} does not exist.*corpora\.mine\.path"):
        list(iter_documents(local_corpus(missing), 0, 1, "mine"))


def test_directory_without_data_files_is_rejected(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.md").write_text("nothing")
    with pytest.raises(CorpusError, match=r"no \.jsonl.*corpora\.mine\.path"):
        list(iter_documents(local_corpus(tmp_path / "empty"), 0, 1, "mine"))


@pytest.mark.parametrize("streaming", [False, True])
def test_hub_source_calls_load_dataset_and_shards_rows(monkeypatch, streaming):
    import datasets

    table = datasets.Dataset.from_dict({"text": [f"row {k}" for k in range(7)]})
    calls = []

    def fake_load_dataset(name, config_name=None, split=None, streaming=False):
        calls.append((name, config_name, split, streaming))
        return table.to_iterable_dataset() if streaming else table

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    corpus = {
        "source": "hub",
        "name": "Skylion007/openwebtext",
        "config_name": None,
        "split": "train",
        "streaming": streaming,
        "text_column": "text",
        "n_shards": 2,
    }
    shard_docs = [list(iter_documents(corpus, i, 2, "owt")) for i in range(2)]
    assert calls == [("Skylion007/openwebtext", None, "train", streaming)] * 2
    assert shard_docs == [["row 0", "row 2", "row 4", "row 6"], ["row 1", "row 3", "row 5"]]
