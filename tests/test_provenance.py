"""Provenance records: the environment, and the chain from a checkpoint back to the corpus shards."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headstab.fileio import read_json, sha256_file, write_json_atomic
from headstab.provenance import environment_record, format_chain, main, trace


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


# ---------------------------------------------------------------- --verify catches flipped bits
def _flip_middle_byte(path: Path, start: int = 0, size: int | None = None) -> None:
    """Flip one bit of the byte in the middle of path[start:start + size] (default: the whole file)."""
    size = path.stat().st_size - start if size is None else size
    data = bytearray(path.read_bytes())
    data[start + size // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture
def built_run(tmp_path, tiny_spec):
    """A checkpoint with its meta.json, a cache built from it, a similarity file and a table, laid out as the workflow does."""
    from headstab.activations.writer import CacheOptions, write_activation_cache
    from headstab.refits.models import build_model, save_weights
    from headstab.similarity.pairs import pair_similarity_from_caches, write_pair_similarity

    weights = _fake_run(tmp_path)  # corpus, shards and checkpoint meta.json
    spec = tiny_spec()
    model = build_model(spec, seed=1)
    save_weights(model, weights)
    meta = read_json(weights.parent / "meta.json")
    write_json_atomic(weights.parent / "meta.json", {**meta, "final_weights_sha256": sha256_file(weights)})
    arch = weights.parents[2]
    cache = arch / "caches" / "seed1.h5"
    token_lists = [[1, 5, 7, 9], [1, 3], [1, 4, 4, 8, 2, 6]]
    write_activation_cache(
        cache,
        model,
        {"primary": token_lists},
        pad_token_id=0,
        options=CacheOptions(show_progress=False),
        attrs={
            "architecture": "l2_h4",
            "seed": 1,
            "checkpoint": str(weights),
            "checkpoint_sha256": sha256_file(weights),
        },
    )
    similarity = arch / "similarity" / "primary.h5"
    write_pair_similarity(
        similarity,
        pair_similarity_from_caches([cache], "primary", progress=False),
        [1],
        attrs={"architecture": "l2_h4", "promptset": "primary", "inputs": {str(cache): {"seed": 1}}},
    )
    table = arch / "tables" / "head_stability.csv"
    table.parent.mkdir()
    table.write_text("layer,head,stability\n0,0,1.0\n")
    return {"checkpoint": weights, "cache": cache, "similarity": similarity, "table": table}


def test_verify_passes_a_sound_run(built_run):
    for path in built_run.values():
        assert main([str(path), "--verify"]) == 0, path


def test_verify_catches_a_flipped_byte_in_a_cache_dataset(built_run, capsys):
    import h5py

    cache = built_run["cache"]
    with h5py.File(cache) as handle:
        info = handle["primary/hook_pattern"].id.get_chunk_info_by_coord((1, 0, 0))
    _flip_middle_byte(cache, info.byte_offset, info.size - 4)  # inside the data, before the checksum
    assert main([str(cache)]) == 0  # opening reads no pattern data: only --verify reads everything
    capsys.readouterr()
    for path in (cache, built_run["similarity"], built_run["table"]):
        assert main([str(path), "--verify"]) == 1, path
        out = capsys.readouterr().out
        assert f"activation cache: {cache}  [checksum mismatch]" in out and "/primary/hook_pattern is corrupt" in out


def test_verify_catches_a_flipped_byte_in_a_similarity_file(built_run, capsys):
    import h5py

    similarity = built_run["similarity"]
    with h5py.File(similarity) as handle:
        info = handle["pair_similarity"].id.get_chunk_info_by_coord((0,) * 6)
    _flip_middle_byte(similarity, info.byte_offset, info.size - 4)
    assert main([str(built_run["table"]), "--verify"]) == 1
    assert f"pair similarity: {similarity}  [checksum mismatch]" in capsys.readouterr().out


def test_verify_catches_a_flipped_bit_in_the_checkpoint_from_every_output_built_on_it(built_run, capsys):
    checkpoint = built_run["checkpoint"]
    _flip_middle_byte(checkpoint)
    for path in built_run.values():
        assert main([str(path), "--verify"]) == 1, path
        assert f"checkpoint: {checkpoint}  [sha256 mismatch]" in capsys.readouterr().out
