"""Provenance records: atomic JSON, sha256, and the chain from a checkpoint back to the corpus shards."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from headstab.provenance import (
    environment_record,
    format_chain,
    main,
    read_json,
    sha256_file,
    trace,
    write_json_atomic,
)


def test_sha256_of_a_known_file(tmp_path):
    path = tmp_path / "abc.txt"
    path.write_bytes(b"abc")
    # sha256("abc") from FIPS 180-2, appendix B.1
    assert sha256_file(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert sha256_file(path, chunk_bytes=1) == sha256_file(path)


def test_write_json_atomic_round_trip_leaves_no_temporary_and_normal_permissions(tmp_path):
    path = tmp_path / "sub" / "meta.json"
    write_json_atomic(path, {"b": 1, "a": [1, 2]})
    assert read_json(path) == {"a": [1, 2], "b": 1}
    assert [p.name for p in path.parent.iterdir()] == ["meta.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_read_json_names_the_file_when_broken(tmp_path):
    path = tmp_path / "meta.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=str(path)):
        read_json(path)
    with pytest.raises(FileNotFoundError, match="nope.json"):
        read_json(tmp_path / "nope.json")


def test_environment_record_names_packages_and_code_version():
    record = environment_record("cpu")
    assert record["device"] == "cpu"
    assert {"torch", "transformer-lens", "numpy", "python"} <= set(record["packages"])
    assert record["git_commit"]


def _fake_run(root: Path) -> Path:
    """A corpus with two shards and one checkpoint that records it, as the workflow writes them."""
    data = root / "data" / "toy"
    data.mkdir(parents=True)
    shards = []
    for index in range(2):
        shard = data / f"shard_{index:03d}.npy"
        np.save(shard, np.arange(10, dtype=np.uint16) + index)
        shards.append({"file": shard.name, "n_tokens": 10, "sha256": sha256_file(shard)})
    corpus_meta = data / "meta.json"
    write_json_atomic(corpus_meta, {"corpus": "toy", "n_tokens": 20, "shards": shards})
    checkpoint = root / "l2_h4" / "checkpoints" / "seed1"
    checkpoint.mkdir(parents=True)
    (checkpoint / "final.pt").write_bytes(b"weights")
    write_json_atomic(
        checkpoint / "meta.json",
        {
            "architecture": {"name": "l2_h4"},
            "seed": 1,
            "final_weights_sha256": sha256_file(checkpoint / "final.pt"),
            "corpus": {"meta": str(corpus_meta), "meta_sha256": sha256_file(corpus_meta)},
            "environment": {"git_commit": "abc123", "device": "cpu"},
        },
    )
    return checkpoint / "final.pt"


def test_checkpoint_chain_reaches_the_corpus_shards(tmp_path):
    weights = _fake_run(tmp_path)
    chain = trace(weights, verify=True)
    assert chain.kind == "checkpoint" and chain.status == "ok" and chain.details["seed"] == 1
    corpus = chain.inputs[0]
    assert corpus.kind == "corpus meta" and corpus.status == "ok"
    assert [Path(node.path).name for node in corpus.inputs] == ["shard_000.npy", "shard_001.npy"]
    assert all(node.status == "ok" for node in corpus.inputs)
    text = format_chain(chain)
    assert "shard_001.npy" in text and "git_commit=abc123" in text


def test_a_changed_shard_is_reported_as_a_mismatch(tmp_path, capsys):
    weights = _fake_run(tmp_path)
    np.save(tmp_path / "data/toy/shard_001.npy", np.zeros(10, dtype=np.uint16))
    chain = trace(weights, verify=True)
    assert chain.inputs[0].inputs[1].status == "sha256 mismatch"
    assert main([str(weights), "--verify"]) == 1
    assert "[sha256 mismatch]" in capsys.readouterr().out


def test_without_verify_hashes_are_listed_not_recomputed(tmp_path):
    weights = _fake_run(tmp_path)
    np.save(tmp_path / "data/toy/shard_001.npy", np.zeros(10, dtype=np.uint16))
    assert trace(weights).inputs[0].inputs[1].status == "unverified"


def test_cli_json_and_unknown_file(tmp_path, capsys):
    weights = _fake_run(tmp_path)
    assert main([str(weights), "--json"]) == 0
    parsed = json.loads(capsys.readouterr().out)
    assert parsed["inputs"][0]["kind"] == "corpus meta"
    assert main([str(tmp_path / "notes.txt")]) == 2
    assert "don't know how to trace" in capsys.readouterr().err
