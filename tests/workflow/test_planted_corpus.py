"""The induction control's data through the real rules: planted_text, a word-level train_tokenizer, tokenize_shard."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml
from helpers.workflow_runs import REPO, run_snakemake

from headstab.data.planted import generate_planted_documents
from headstab.refits.tokenizer import load_tokenizer


def test_planted_corpus_shards_hold_one_document_and_its_eos_per_window_in_word_ids(tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "config/demo_circuits.yaml").read_text())
    config["results_dir"] = str(tmp_path / "results")
    config["corpora"]["planted"].update(n_documents=12, n_shards=2)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    results = tmp_path / "results"
    meta = results / "data/planted/meta.json"
    run = run_snakemake(str(meta), "--cores", "2", "--configfile", str(path))
    assert run.returncode == 0, run.stderr[-3000:]

    tokenizer_meta = json.loads((results / "tokenizers/planted_words/meta.json").read_text())
    assert tokenizer_meta["origin"]["model"] == "words" and tokenizer_meta["vocab_size"] == 32
    tokenizer = load_tokenizer(results / "tokenizers/planted_words")
    shards = [np.load(p) for p in sorted((results / "data/planted").glob("shard_*.npy"))]
    windows = np.concatenate(shards).reshape(-1, 128)  # 127 words and EOS: shards hold whole windows
    assert windows.shape == (12, 128)
    assert (windows[:, -1] == tokenizer.eos_token_id).all() and (windows[:, :-1] != tokenizer.eos_token_id).all()
    documents = list(generate_planted_documents(0, 12, 31, 127, (8, 32), (0, 32), 0.5))
    decoded = sorted(tokenizer.decode(window[:-1].tolist()) for window in windows)
    assert decoded == sorted(documents)  # every document, word for word, whatever shard it went to
