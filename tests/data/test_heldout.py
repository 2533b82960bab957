"""The neuron statistics' held-out text: documents -> the first `budget` tokens, EOS after each document (known
answers on character ids), and rule heldout_neuron_text's script on a local dataset standing in for the hub."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from headstab.data import CorpusError
from headstab.data.heldout import column_texts, first_tokens
from headstab.data.shards import tokenize_documents
from headstab.fileio import sha256_file

from .conftest import DOCS

REPO = Path(__file__).resolve().parents[2]
EOS = 0


def characters(text: str) -> list[int]:
    """A tokenizer with one id per character (its code point), so every answer can be written by hand."""
    return [ord(character) for character in text]


def test_each_document_is_followed_by_eos_and_a_short_source_gives_all_its_tokens():
    text = first_tokens(["ab", "cde"], characters, EOS, budget=100)
    assert text.tokens.tolist() == [97, 98, EOS, 99, 100, 101, EOS]
    assert text.tokens.dtype == np.int64
    assert (text.n_tokens, text.n_documents) == (7, 2)  # 7 < 100: the count says the source ran out


def test_the_stream_is_cut_at_exactly_the_budget_inside_the_document_that_crosses_it():
    text = first_tokens(["ab", "cde", "fg"], characters, EOS, budget=5)
    assert text.tokens.tolist() == [97, 98, EOS, 99, 100]
    assert (text.n_tokens, text.n_documents) == (5, 2)


def test_a_budget_ending_on_a_documents_eos_keeps_that_eos_and_no_more():
    text = first_tokens(["ab", "cde"], characters, EOS, budget=3)
    assert text.tokens.tolist() == [97, 98, EOS] and text.n_documents == 1


def test_an_empty_document_adds_nothing_not_even_an_eos():
    text = first_tokens(["ab", "", "c"], characters, EOS, budget=10)
    assert text.tokens.tolist() == [97, 98, EOS, 99, EOS] and text.n_documents == 2


def test_no_document_past_the_budget_is_read():
    """A streamed hub split is consumed only as far as the budget needs."""
    read = []

    def documents():
        for document in ["ab", "cde", "fg", "hi"]:
            read.append(document)
            yield document

    first_tokens(documents(), characters, EOS, budget=4)
    assert read == ["ab", "cde"]


def test_no_documents_give_an_empty_stream_and_a_budget_below_one_is_refused():
    text = first_tokens([], characters, EOS, budget=4)
    assert text.tokens.tolist() == [] and text.tokens.dtype == np.int64 and text.n_documents == 0
    with pytest.raises(ValueError, match="at least 1 token, got 0"):
        first_tokens(["ab"], characters, EOS, budget=0)


def test_the_stream_is_the_training_shards_stream_cut_at_the_budget(tokenizer):
    """The same separators as headstab.data.shards: the models read held-out text as they read training text."""
    docs = DOCS[:40]
    whole = tokenize_documents(docs, tokenizer, tokenizer.eos_token_id)
    budget = len(whole) // 2
    text = first_tokens(
        docs, lambda doc: tokenizer(doc, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id, budget
    )
    np.testing.assert_array_equal(text.tokens, whole[:budget])
    boundaries = np.flatnonzero(whole == tokenizer.eos_token_id)
    assert text.n_documents == int(np.searchsorted(boundaries, budget - 1)) + 1


def test_column_texts_reads_the_column_and_names_a_missing_one():
    assert list(column_texts([{"text": "a", "url": "u"}, {"text": "b"}], "text", "x")) == ["a", "b"]
    rows = column_texts([{"content": "a"}], "text", "hub dataset allenai/c4 of config key neurons.heldout")
    with pytest.raises(CorpusError, match=r"allenai/c4 of config key neurons\.heldout: .*'text', only \['content'\]"):
        next(rows)


# Runs workflow/scripts/heldout_neuron_text.py as Snakemake would, in its own process (run_job takes over stderr),
# with datasets.load_dataset answering every call from a local JSON-lines file, streamed, and recording the call.
DRIVER = """
import json, runpy, sys, types
import datasets

spec = json.loads(open(sys.argv[1]).read())
calls, real = [], datasets.load_dataset


def load_dataset(*args, **kwargs):
    calls.append({"args": list(args), "kwargs": kwargs})
    return real("json", data_files=spec["local"], split="train", streaming=True)


datasets.load_dataset = load_dataset
snakemake = types.SimpleNamespace(
    params=types.SimpleNamespace(**spec["params"]),
    wildcards=types.SimpleNamespace(dataset=spec["dataset"], tokenizer="bpe"),
    output=types.SimpleNamespace(tokens=spec["tokens"]),
    log=[spec["log"]],
)
try:
    runpy.run_path(spec["script"], init_globals={"snakemake": snakemake})
finally:
    open(spec["calls"], "w").write(json.dumps(calls))
"""


def _run_script(tmp_path: Path, tokenizer_dir: Path, documents: list[dict], budget: int, source: dict) -> dict:
    local = tmp_path / "validation.jsonl"
    local.write_text("".join(json.dumps(row) + "\n" for row in documents))
    spec = {
        "local": str(local),
        "script": str(REPO / "workflow/scripts/heldout_neuron_text.py"),
        "params": {"source": source, "tokens": budget, "tokenizer_dir": str(tokenizer_dir)},
        "dataset": f"allenai--c4_en_validation_first{budget}",
        "tokens": str(tmp_path / "heldout/bpe.npy"),
        "log": str(tmp_path / "heldout_neuron_text.log"),
        "calls": str(tmp_path / "calls.json"),
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    result = subprocess.run([sys.executable, str(driver), str(tmp_path / "spec.json")], capture_output=True, text=True)
    log = Path(spec["log"]).read_text() if Path(spec["log"]).exists() else ""
    return {**spec, "result": result, "log": log, "calls": json.loads(Path(spec["calls"]).read_text())}


C4 = {"name": "allenai/c4", "config_name": "en", "split": "validation", "text_column": "text"}


def test_the_script_streams_the_split_and_writes_the_first_budget_tokens_with_their_record(
    tmp_path, tokenizer_dir, tokenizer
):
    rows = [{"text": doc, "url": f"u{index}"} for index, doc in enumerate(DOCS[:30])]
    whole = tokenize_documents(DOCS[:30], tokenizer, tokenizer.eos_token_id)
    budget = len(whole) - 17
    run = _run_script(tmp_path, tokenizer_dir, rows, budget, C4)
    assert run["result"].returncode == 0, run["result"].stdout + run["log"]
    assert run["calls"] == [{"args": ["allenai/c4", "en"], "kwargs": {"split": "validation", "streaming": True}}]
    shard = np.load(run["tokens"])
    assert shard.dtype == np.uint16
    np.testing.assert_array_equal(shard, whole[:budget])
    record = json.loads(Path(run["tokens"]).with_suffix(".json").read_text())
    assert record["n_tokens"] == budget and record["token_budget"] == budget
    assert record["n_documents"] == 30 and record["eos_token_id"] == tokenizer.eos_token_id
    assert record["corpus"] == run["dataset"] and record["source"] == {"source": "hub", "streaming": True, **C4}
    assert record["sha256"] == sha256_file(run["tokens"])
    assert "WARNING" not in run["log"]


def test_the_script_keeps_a_short_split_whole_and_says_so_in_the_log(tmp_path, tokenizer_dir, tokenizer):
    rows = [{"text": doc} for doc in DOCS[:5]]
    whole = tokenize_documents(DOCS[:5], tokenizer, tokenizer.eos_token_id)
    run = _run_script(tmp_path, tokenizer_dir, rows, 10**6, C4)
    assert run["result"].returncode == 0, run["result"].stdout + run["log"]
    np.testing.assert_array_equal(np.load(run["tokens"]), whole)
    record = json.loads(Path(run["tokens"]).with_suffix(".json").read_text())
    assert (record["n_tokens"], record["token_budget"], record["n_documents"]) == (len(whole), 10**6, 5)
    assert f"holds {len(whole)} tokens, fewer than neurons.tokens=1000000: all of them" in run["log"]


def test_the_script_fails_naming_the_text_column_the_rows_lack(tmp_path, tokenizer_dir):
    run = _run_script(tmp_path, tokenizer_dir, [{"content": "a b c"}], 100, {**C4, "text_column": "body"})
    assert run["result"].returncode == 1
    assert "Error in rule heldout_neuron_text" in run["result"].stdout
    assert "config key neurons.heldout: the rows have no column 'body', only ['content']" in run["result"].stdout
    assert not Path(run["tokens"]).exists()
