"""Lineage: the chain from a file of the workflow back to the corpus shards, and --verify catching a flipped bit
in any file of it."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.provenance_runs import fake_run, flip_middle_byte

from headstab.fileio import read_json, sha256_file, write_json_atomic
from headstab.provenance.__main__ import main
from headstab.provenance.lineage import format_chain, trace, walk
from headstab.table_files import record_path, write_figure_records, write_table


@dataclass
class Job:
    """The part of Snakemake's `snakemake` object write_table and write_figure_records read."""

    rule: str
    input: list[str]
    output: list[str] = field(default_factory=list)


def test_checkpoint_chain_reaches_the_corpus_shards(tmp_path):
    weights = fake_run(tmp_path)
    chain = trace(weights, verify=True)
    assert chain.kind == "checkpoint" and chain.status == "ok" and chain.details["seed"] == 1
    corpus = chain.inputs[0]
    assert corpus.kind == "corpus meta" and corpus.status == "ok"
    assert [Path(node.path).name for node in corpus.inputs] == ["shard_000.npy", "shard_001.npy"]
    assert all(node.status == "ok" for node in corpus.inputs)
    text = format_chain(chain)
    assert "shard_001.npy" in text and "git_commit=abc123" in text


def test_a_changed_shard_is_reported_as_a_mismatch(tmp_path, capsys):
    weights = fake_run(tmp_path)
    np.save(tmp_path / "data/toy/shard_001.npy", np.zeros(10, dtype=np.uint16))
    chain = trace(weights, verify=True)
    assert chain.inputs[0].inputs[1].status == "sha256 mismatch"
    assert main([str(weights), "--verify"]) == 1
    assert "[sha256 mismatch]" in capsys.readouterr().out


def test_verify_catches_a_tokenizer_changed_after_the_corpus_was_made_with_it(tmp_path, capsys):
    """Checked against the corpus meta's record, not only the tokenizer's own meta.json: an edit that rewrote
    both still differs from what the shards were made with."""
    weights = fake_run(tmp_path, tokenizer=True)
    tokenizer = tmp_path / "tokenizers/toy_bpe"
    chain = trace(weights, verify=True)
    node = chain.inputs[0].inputs[-1]
    assert (node.kind, node.path, node.status) == ("tokenizer", str(tokenizer / "tokenizer.json"), "ok")
    (tokenizer / "tokenizer.json").write_text('{"model": {"vocab": {"a": 1, "b": 0}}}')
    write_json_atomic(tokenizer / "meta.json", {"tokenizer_json_sha256": sha256_file(tokenizer / "tokenizer.json")})
    assert main([str(tokenizer / "meta.json"), "--verify"]) == 0  # consistent in itself
    capsys.readouterr()
    assert main([str(weights), "--verify"]) == 1
    assert f"<- tokenizer: {tokenizer / 'tokenizer.json'}  [sha256 mismatch]  (recorded_by=corpus meta)" in (
        capsys.readouterr().out
    )


def test_without_verify_hashes_are_listed_not_recomputed(tmp_path):
    weights = fake_run(tmp_path)
    np.save(tmp_path / "data/toy/shard_001.npy", np.zeros(10, dtype=np.uint16))
    assert trace(weights).inputs[0].inputs[1].status == "unverified"


# ---------------------------------------------------------------- --verify catches flipped bits
@pytest.fixture
def built_run(tmp_path, tiny_spec):
    """A checkpoint with its meta.json, a cache built from it, a similarity file, a table and a figure drawn from
    it, laid out as the workflow does (every recorded path absolute)."""
    return _build_run(tmp_path, tiny_spec())


@pytest.fixture
def relative_run(tmp_path, tiny_spec, monkeypatch):
    """built_run as Snakemake writes it: from working directory tmp_path into results/, every recorded path
    relative to that working directory."""
    monkeypatch.chdir(tmp_path)
    return _build_run(Path("results"), tiny_spec())


def _build_run(root: Path, spec, tokenizer: Path | None = None, origin: str = "hub") -> dict[str, Path]:
    """built_run's files under `root`; with `tokenizer`, the corpus and the cache record that directory (a copy of
    tokenizers/toy_bpe) and {"source": origin} instead."""
    from headstab.activations.writer import CacheOptions, write_activation_cache
    from headstab.refits.models import build_model, save_weights
    from headstab.similarity.null_pairs import null_pair_similarity_from_caches
    from headstab.similarity.pairs import pair_similarity_from_caches, write_pair_similarity
    from headstab.similarity.prompt_groups import GroupedSimilarity, write_grouped_similarity

    weights = fake_run(root, tokenizer=True)  # tokenizer, corpus, shards and checkpoint meta.json
    if tokenizer is not None:
        _record_tokenizer(root, weights, tokenizer, origin)
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
            "tokenizer_identity": read_json(root / "data/toy/meta.json")["tokenizer"],
        },
    )
    similarity = arch / "similarity" / "primary.h5"
    partners = np.array([2, 0, 1])  # as rule pair_similarity writes the primary prompts: with the null
    write_pair_similarity(
        similarity,
        pair_similarity_from_caches([cache], "primary", progress=False),
        [1],
        attrs={"architecture": "l2_h4", "promptset": "primary", "inputs": {str(cache): {"seed": 1}}},
        null=null_pair_similarity_from_caches([cache], "primary", partners, progress=False),
        partners=partners,
    )
    groups = arch / "similarity" / "primary.groups.h5"
    observed = np.full((2, 1, 1, spec.n_layers, spec.n_heads, spec.n_heads), 0.5, dtype=np.float32)
    grouped = GroupedSimilarity(observed, observed / 2, np.array([2, 1]), [1], np.array([2, 0, 1]), np.array([4, 2, 6]))
    write_grouped_similarity(groups, grouped, attrs={"promptset": "primary", "seed": 1, "caches": [str(cache)]})
    table = arch / "tables" / "head_stability.csv"
    frame = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "stability": [1.0, 0.25]})
    write_table(frame, table, Job("stability_tables", [str(similarity), str(groups)]))
    figure = arch / "figures" / "head_stability.png"
    _save_png(figure)
    write_figure_records(Job("stability_figures", [str(table)], [str(figure)]))
    paths = {"checkpoint": weights, "cache": cache, "similarity": similarity, "groups": groups, "table": table}
    return paths | {"figure": figure}


def _record_tokenizer(root: Path, weights: Path, directory: Path, origin: str) -> None:
    """The corpus of fake_run(root) recorded as made with a copy of its tokenizer at `directory`, from `origin`; the
    checkpoint's meta.json records the corpus meta so changed."""
    shutil.copytree(root / "tokenizers" / "toy_bpe", directory)
    corpus_meta = root / "data" / "toy" / "meta.json"
    corpus = read_json(corpus_meta)
    write_json_atomic(
        corpus_meta,
        corpus | {"tokenizer": corpus["tokenizer"] | {"path": str(directory), "origin": {"source": origin}}},
    )
    meta = read_json(weights.parent / "meta.json")
    corpus_record = meta["corpus"] | {"meta_sha256": sha256_file(corpus_meta)}
    write_json_atomic(weights.parent / "meta.json", meta | {"corpus": corpus_record})


def _save_png(path: Path) -> None:
    from headstab.plots import new_figure, save_figure

    figure = new_figure((2, 2))
    figure.add_subplot().plot([0, 1], [1, 0])
    save_figure(figure, path)


def test_verify_passes_a_sound_run(built_run):
    for path in built_run.values():
        assert main([str(path), "--verify"]) == 0, path


def test_verify_of_every_output_catches_a_tokenizer_edited_after_the_caches_were_made(built_run, capsys):
    """A valid edit (two ids traded) left the tokenizer loadable: the cache's and the corpus's records catch it."""
    tokenizer_json = built_run["checkpoint"].parents[3] / "tokenizers/toy_bpe/tokenizer.json"
    tokenizer_json.write_text('{"model": {"vocab": {"a": 1, "b": 0}}}')
    for name in ("cache", "similarity", "groups", "table"):
        assert main([str(built_run[name]), "--verify"]) == 1, name
        out = capsys.readouterr().out
        for recorded_by in ("activation cache", "corpus meta"):
            assert f"tokenizer: {tokenizer_json}  [sha256 mismatch]  (recorded_by={recorded_by})" in out, name


def test_verify_catches_a_flipped_byte_in_a_cache_dataset(built_run, capsys):
    import h5py

    cache = built_run["cache"]
    with h5py.File(cache) as handle:
        info = handle["primary/hook_pattern"].id.get_chunk_info_by_coord((1, 0, 0))
    flip_middle_byte(cache, info.byte_offset, info.size - 4)  # inside the data, before the checksum
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
    flip_middle_byte(similarity, info.byte_offset, info.size - 4)
    assert main([str(built_run["table"]), "--verify"]) == 1
    assert f"pair similarity: {similarity}  [checksum mismatch]" in capsys.readouterr().out


def test_verify_catches_a_flipped_byte_in_the_null_of_a_similarity_file(built_run, capsys):
    import h5py

    similarity = built_run["similarity"]
    with h5py.File(similarity) as handle:
        info = handle["pair_similarity_null"].id.get_chunk_info_by_coord((0,) * 6)
    flip_middle_byte(similarity, info.byte_offset, info.size - 4)
    assert main([str(built_run["table"]), "--verify"]) == 1
    assert f"pair similarity: {similarity}  [checksum mismatch]" in capsys.readouterr().out


def test_verify_catches_a_flipped_bit_in_the_checkpoint_from_every_output_built_on_it(built_run, capsys):
    checkpoint = built_run["checkpoint"]
    flip_middle_byte(checkpoint)
    for path in built_run.values():
        assert main([str(path), "--verify"]) == 1, path
        assert f"checkpoint: {checkpoint}  [sha256 mismatch]" in capsys.readouterr().out


def test_verify_passes_a_sound_prompt_group_file_and_traces_it_to_its_caches(built_run, capsys):
    groups = built_run["groups"]
    assert main([str(groups), "--verify"]) == 0
    out = capsys.readouterr().out
    assert (
        out.startswith(f"prompt-group similarity: {groups}  (") and f"<- activation cache: {built_run['cache']}" in out
    )


@pytest.mark.parametrize("dataset", ["observed", "null"])
def test_verify_catches_a_flipped_byte_in_either_half_of_a_prompt_group_file(built_run, capsys, dataset):
    import h5py

    groups = built_run["groups"]
    with h5py.File(groups) as handle:
        info = handle[dataset].id.get_chunk_info_by_coord((1, 0, 0, 0, 0, 0))
    flip_middle_byte(groups, info.byte_offset, info.size - 4)
    assert main([str(groups), "--verify"]) == 1
    out = capsys.readouterr().out
    assert f"prompt-group similarity: {groups}  [checksum mismatch]" in out


@pytest.mark.parametrize("name", ["cache", "similarity", "groups"])
def test_verify_catches_an_attribute_changed_after_writing(built_run, capsys, name):
    import h5py

    path = built_run[name]
    with h5py.File(path, "a") as handle:
        key, value = ("seed", 3) if "seed" in handle.attrs else ("promptset", "len5")
        handle.attrs.modify(key, value)
    assert main([str(path)]) == (1 if name == "cache" else 0)  # the cache reader checks digests when it opens
    capsys.readouterr()
    assert main([str(path), "--verify"]) == 1
    out = capsys.readouterr().out
    assert f"{path}  [digest mismatch]" in out and "attrs_sha256 differs" in out


def test_full_state_checkpoint_shard_and_tokenizer_records_are_verified(tmp_path, capsys):
    from headstab.training.checkpoint import save_state

    checkpoint = fake_run(tmp_path).parent
    state = save_state(checkpoint, {"step": 8, "weights": np.arange(4)}, keep=1)
    data = tmp_path / "data" / "toy"
    record = data / "shard_000.json"
    write_json_atomic(record, {"corpus": "toy", "shard_index": 0, "sha256": sha256_file(data / "shard_000.npy")})
    tokenizer = tmp_path / "tokenizers" / "toy_bpe"
    tokenizer.mkdir(parents=True)
    (tokenizer / "tokenizer.json").write_text('{"model": {}}')
    write_json_atomic(tokenizer / "meta.json", {"tokenizer_json_sha256": sha256_file(tokenizer / "tokenizer.json")})
    log = tmp_path / "logs" / "train" / "l2_h4" / "seed1.log"
    log.parent.mkdir(parents=True)
    log.write_text("rule train started\n")
    sound = [state, state.with_name(state.name + ".sha256"), record, data / "shard_000.npy", tokenizer / "meta.json"]
    for path in [*sound, tokenizer / "tokenizer.json", log]:
        assert main([str(path), "--verify"]) == 0, path
    assert "log: " in capsys.readouterr().out
    damaged = {
        state: "full-state checkpoint",
        data / "shard_000.npy": "token shard",
        tokenizer / "tokenizer.json": "tokenizer",
    }
    for path, kind in damaged.items():
        flip_middle_byte(path)
        assert main([str(path), "--verify"]) == 1, path
        assert f"{kind}: {path}  [sha256 mismatch]" in capsys.readouterr().out


# ---------------------------------------------------------------- tables: their record and their real inputs
def test_verify_fails_a_hand_edited_table_naming_it_and_the_fix(built_run, capsys):
    """One value changed, the CSV still valid: only the table's record can tell."""
    table = built_run["table"]
    table.write_text(table.read_text().replace("0.25", "0.35"))
    assert main([str(table)]) == 0  # without --verify hashes are listed, not recomputed
    capsys.readouterr()
    assert main([str(table), "--verify"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"table: {table}  [sha256 mismatch]")
    assert f"{table} differs from the sha256 in {record_path(table)}" in out
    assert "`snakemake --forcerun stability_tables`" in out and f"or delete {table} and run snakemake" in out


def test_verify_fails_a_table_made_from_a_hand_edited_table(built_run, capsys):
    table = built_run["table"]
    summary = table.parents[2] / "summary" / "tables" / "head_summary.csv"
    write_table(pd.DataFrame({"stability": [0.625]}), summary, Job("head_summary", [str(table)]))
    assert main([str(summary), "--verify"]) == 0
    capsys.readouterr()
    table.write_text(table.read_text().replace("1.0", "0.5"))
    assert main([str(summary), "--verify"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"table: {summary}  (") and f"<- table: {table}  [sha256 mismatch]" in out


@pytest.mark.parametrize("damage", ["deleted", "not JSON", "no sha256"])
def test_verify_fails_a_table_whose_record_is_gone_or_damaged(built_run, capsys, damage):
    table = built_run["table"]
    record = record_path(table)
    if damage == "deleted":
        record.unlink()
    else:
        record.write_text("{" if damage == "not JSON" else json.dumps({"inputs": []}))
    assert main([str(table)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"table: {table}  [unrecorded]") and str(record) in out
    assert "snakemake --forcerun <its rule>" in out


def test_the_record_is_checked_against_its_table(built_run, capsys):
    """The record's own check is its table's sha256; the inputs are the table's trace."""
    table, record = built_run["table"], record_path(built_run["table"])
    chain = trace(record, verify=True)
    assert (chain.kind, chain.path, chain.status, chain.inputs) == ("table", str(table), "ok", [])
    table.write_text(table.read_text().replace("0.25", "0.5"))
    assert main([str(record), "--verify"]) == 1
    assert capsys.readouterr().out.startswith(f"table: {table}  [sha256 mismatch]  (rule=stability_tables")


def test_a_table_made_from_the_weights_is_traced_through_its_checkpoints(built_run, capsys):
    """weight_norms reads final.pt, no similarity file: its lineage names the checkpoint and the corpus."""
    weights = built_run["checkpoint"]
    table = weights.parents[2] / "tables" / "weight_norms.csv"
    write_table(pd.DataFrame({"seed": [1], "norm": [2.0]}), table, Job("weight_norms", [str(weights)]))
    chain = trace(table, verify=True)
    kinds = [node.kind for node in walk(chain)]
    assert chain.inputs[0].kind == "checkpoint" and chain.inputs[0].path == str(weights)
    assert "corpus meta" in kinds and "token shard" in kinds
    assert not {"pair similarity", "prompt-group similarity", "activation cache"} & set(kinds)
    assert {node.status for node in walk(chain)} == {"ok"}
    flip_middle_byte(weights)
    assert main([str(table), "--verify"]) == 1
    assert f"<- checkpoint: {weights}  [sha256 mismatch]" in capsys.readouterr().out


def test_a_table_made_from_similarity_files_is_traced_through_them_not_a_guess(built_run):
    """Its job's inputs in their order: the pair similarity, then the prompt-group file, each to its cache."""
    chain = trace(built_run["table"], verify=True)
    assert [(node.kind, node.path) for node in chain.inputs] == [
        ("pair similarity", str(built_run["similarity"])),
        ("prompt-group similarity", str(built_run["groups"])),
    ]
    assert chain.inputs[0].inputs[0].path == str(built_run["cache"])
    assert chain.inputs[1].details == {"expanded": "no (use --all)"}  # one similarity file leads to the caches
    everything = trace(built_run["table"], verify=True, expand_all=True)
    assert [node.inputs[0].path for node in everything.inputs] == [str(built_run["cache"])] * 2


def test_a_results_directory_moved_whole_keeps_its_tables_lineage(built_run, tmp_path):
    """The record holds inputs relative to the table: a copy traces the copy's files, not the original's."""
    table = built_run["table"]
    moved = tmp_path.with_name(tmp_path.name + "_moved")
    shutil.copytree(table.parents[2], moved)
    chain = trace(moved / "l2_h4" / "tables" / "head_stability.csv")
    assert [node.path for node in chain.inputs] == [
        str(moved / "l2_h4/similarity/primary.h5"),
        str(moved / "l2_h4/similarity/primary.groups.h5"),
    ]


def _flip_a_cache_chunk(cache: Path) -> None:
    """One bit flipped inside the data of a hook_pattern chunk, before its fletcher32 checksum."""
    import h5py

    with h5py.File(cache) as handle:
        info = handle["primary/hook_pattern"].id.get_chunk_info_by_coord((1, 0, 0))
    flip_middle_byte(cache, info.byte_offset, info.size - 4)


def _traced_files(chain) -> list[Path]:
    """Every file of the chain that lies on disk, resolved (a prompt file's node names its prompt set)."""
    return sorted({Path(node.path).resolve() for node in walk(chain) if node.kind != "prompt file"})


@pytest.mark.parametrize("run", ["built_run", "relative_run"])
def test_a_results_directory_moved_whole_is_verified_in_its_own_files(run, request, tmp_path):
    """The original is gone: every file the moved tables, caches and metas record is found in the moved directory,
    whether they recorded it absolute or relative to Snakemake's working directory."""
    table = request.getfixturevalue(run)["table"]
    old_root = table.parents[2].absolute()
    moved = tmp_path.with_name(tmp_path.name + "_moved") / "results"
    shutil.move(old_root, moved)
    chain = trace(moved / "l2_h4" / "tables" / "head_stability.csv", verify=True, expand_all=True)
    nodes = list(walk(chain))
    assert [(node.path, node.status) for node in nodes if node.status != "ok"] == []
    assert [node.path for node in nodes if Path(node.path).absolute().is_relative_to(old_root)] == []
    assert {node.kind for node in nodes} >= {
        "activation cache",
        "checkpoint",
        "corpus meta",
        "token shard",
        "tokenizer",
    }
    assert main([str(moved / "l2_h4" / "tables" / "head_stability.csv"), "--verify", "--all"]) == 0


@pytest.mark.parametrize("run", ["built_run", "relative_run"])
def test_a_copy_with_a_damaged_cache_fails_and_the_original_still_verifies(run, request, tmp_path, capsys):
    """The copy is checked in its own cache, not the original's that its files recorded."""
    table = request.getfixturevalue(run)["table"]
    original = table.parents[2]
    copy = original.with_name("copy")
    shutil.copytree(original, copy)
    _flip_a_cache_chunk(copy / "l2_h4" / "caches" / "seed1.h5")
    assert main([str(copy / "l2_h4" / "tables" / "head_stability.csv"), "--verify", "--all"]) == 1
    out = capsys.readouterr().out
    assert f"activation cache: {copy / 'l2_h4' / 'caches' / 'seed1.h5'}  [checksum mismatch]" in out
    assert f"{original / 'l2_h4' / 'caches'}" not in out
    assert main([str(table), "--verify", "--all"]) == 0


@pytest.mark.parametrize("where", ["parent", "results", "architecture"])
def test_a_trace_from_another_working_directory_reaches_the_same_files(relative_run, tmp_path, monkeypatch, where):
    """Recorded paths are relative to Snakemake's working directory: traced from its parent, from the results
    directory or from an architecture's directory (the table named relative to each), the same files, all sound."""
    expected = _traced_files(trace(relative_run["table"], verify=True, expand_all=True))
    cwd, table = {
        "parent": (tmp_path.parent, Path(tmp_path.name, "results/l2_h4/tables/head_stability.csv")),
        "results": (tmp_path / "results", Path("l2_h4/tables/head_stability.csv")),
        "architecture": (tmp_path / "results/l2_h4", Path("tables/head_stability.csv")),
    }[where]
    monkeypatch.chdir(cwd)
    chain = trace(table, verify=True, expand_all=True)
    assert [(node.path, node.status) for node in walk(chain) if node.status != "ok"] == []
    assert _traced_files(chain) == expected
    assert {path.name for path in expected} >= {"seed1.h5", "final.pt", "meta.json", "shard_001.npy", "tokenizer.json"}


@pytest.mark.parametrize(
    ("directory", "origin"), [("hub/models--toy/snapshots/abc", "hub"), ("mine/tokenizers/toy", "local")]
)
def test_a_recorded_tokenizer_outside_the_results_directory_is_left_where_it_is(
    tmp_path, tiny_spec, monkeypatch, directory, origin
):
    """A hub tokenizer's directory is in no results layout; a `source: local` tokenizer is the user's own
    directory even where its path looks like one (.../tokenizers/toy): neither follows the moved results."""
    monkeypatch.chdir(tmp_path)
    run = _build_run(Path("results"), tiny_spec(), tokenizer=Path(directory), origin=origin)
    shutil.move("results", "moved")
    chain = trace(Path("moved") / run["table"].relative_to("results"), verify=True, expand_all=True)
    tokenizers = {node.path for node in walk(chain) if node.kind == "tokenizer"}
    assert tokenizers == {str(Path(directory) / "tokenizer.json")}
    assert [(node.path, node.status) for node in walk(chain) if node.status != "ok"] == []


# ---------------------------------------------------------------- figures: their record and their job's inputs
def test_verify_fails_a_hand_edited_figure_naming_it_and_the_rule_to_rerun(built_run, capsys):
    """A PNG changed after its rule saved it (here: one byte in its pixels) still opens; only its record can tell."""
    figure = built_run["figure"]
    assert main([str(figure), "--verify"]) == 0
    capsys.readouterr()
    flip_middle_byte(figure)
    assert main([str(figure)]) == 0  # without --verify hashes are listed, not recomputed
    capsys.readouterr()
    assert main([str(figure), "--verify"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"figure: {figure}  [sha256 mismatch]")
    assert f"{figure} differs from the sha256 in {record_path(figure)}" in out
    assert "`snakemake --forcerun stability_figures`" in out and f"or delete {figure} and run snakemake" in out


def test_a_figure_is_traced_through_its_jobs_inputs(built_run, capsys):
    """The table its job read, and through it the similarity files and a cache: no guess from the directory."""
    figure, table = built_run["figure"], built_run["table"]
    chain = trace(figure, verify=True)
    assert (chain.kind, chain.status, chain.details["rule"]) == ("figure", "ok", "stability_figures")
    assert [(node.kind, node.path) for node in chain.inputs] == [("table", str(table))]
    assert [node.path for node in chain.inputs[0].inputs] == [str(built_run["similarity"]), str(built_run["groups"])]
    assert str(built_run["cache"]) in {node.path for node in walk(chain)}
    table.write_text(table.read_text().replace("0.25", "0.5"))  # the figure is sound, what it was drawn from not
    assert main([str(figure), "--verify"]) == 1
    assert f"<- table: {table}  [sha256 mismatch]" in capsys.readouterr().out


def test_a_figure_without_its_record_is_unrecorded_and_its_record_is_checked_against_it(built_run, capsys):
    figure, record = built_run["figure"], record_path(built_run["figure"])
    chain = trace(record, verify=True)
    assert (chain.kind, chain.path, chain.status, chain.inputs) == ("figure", str(figure), "ok", [])
    record.unlink()
    assert main([str(figure)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"figure: {figure}  [unrecorded]") and "figure record file" in out and str(record) in out
