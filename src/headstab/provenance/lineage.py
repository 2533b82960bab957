"""Lineage: the chain of files behind a file of the workflow, walked back to the corpus shards, each file
checked against the record that covers it (checks.py); `python -m headstab.provenance` prints it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from headstab.activations.reader import open_cache
from headstab.plan.layout import file_kind
from headstab.provenance.checks import (
    ProvenanceNode,
    check_sha256,
    read_h5_attrs,
    read_in_full,
    read_record,
)
from headstab.provenance.relocation import rebased
from headstab.similarity.pairs import read_pair_similarity, read_pair_similarity_null
from headstab.similarity.prompt_groups import read_grouped_similarity
from headstab.table_files import RECORD_SUFFIX, read_file_record, record_inputs, record_path

__all__ = ["as_dict", "format_chain", "trace", "walk"]

# kinds of input a table's job may read that a record covers and `trace` follows to the corpus, by family: a
# chain follows one file of each family (a pair-similarity file and a prompt-group file lead to the same caches)
_TRACED = {
    "checkpoint": "weights",
    "snapshot weights": "weights",
    "activation cache": "cache",
    "pair similarity": "similarity",
    "prompt-group similarity": "similarity",
}


def _corpus_node(meta_path: Path, expected_sha256: str | None, verify: bool) -> ProvenanceNode:
    node = ProvenanceNode(str(meta_path), "corpus meta", status=check_sha256(meta_path, expected_sha256, verify))
    if node.status == "missing" or (meta := read_record(meta_path, node, "corpus metadata")) is None:
        return node
    node.details |= {key: meta.get(key) for key in ("corpus", "n_tokens", "n_documents", "source") if key in meta}
    tokenizer = meta.get("tokenizer") or {}
    if tokenizer:
        node.details["tokenizer"] = {
            k: tokenizer.get(k) for k in ("name", "source", "vocab_size", "tokenizer_json_sha256") if k in tokenizer
        }
    for shard in meta.get("shards", []):
        shard_path = meta_path.parent / shard["file"]
        node.inputs.append(
            ProvenanceNode(
                str(shard_path),
                "token shard",
                {"n_tokens": shard.get("n_tokens")},
                status=check_sha256(shard_path, shard.get("sha256"), verify),
            )
        )
    node.inputs += _recorded_tokenizer(tokenizer, meta_path, "corpus meta", verify)
    return node


def _recorded_tokenizer(record: Any, holder: Path, recorded_by: str, verify: bool) -> list[ProvenanceNode]:
    """The tokenizer.json a corpus or cache (at `holder`) was made with, checked against the sha256 that record
    holds (not only against the tokenizer's own meta.json, which an edit could have rewritten too); [] when none is
    recorded. A `source: local` tokenizer is the user's own directory, wherever the results directory went."""
    if not isinstance(record, dict) or not record.get("path") or not record.get("tokenizer_json_sha256"):
        return []
    tokenizer_json = Path(record["path"]) / "tokenizer.json"
    if (record.get("origin") or {}).get("source") != "local":
        tokenizer_json = rebased(tokenizer_json, holder)
    status = check_sha256(tokenizer_json, record["tokenizer_json_sha256"], verify)
    return [ProvenanceNode(str(tokenizer_json), "tokenizer", {"recorded_by": recorded_by}, status=status)]


def _shard_node(path: Path, verify: bool) -> ProvenanceNode:
    """A token shard (.npy) checked against its record (.json, written with it)."""
    shard, record_path = path.with_suffix(".npy"), path.with_suffix(".json")
    node = ProvenanceNode(str(record_path), "token shard record")
    if (record := read_record(record_path, node, "shard record")) is not None:
        node.details = {key: record.get(key) for key in ("corpus", "shard_index", "n_tokens") if key in record}
        node.inputs.append(
            ProvenanceNode(str(shard), "token shard", status=check_sha256(shard, record.get("sha256"), verify))
        )
    return node


def _checkpoint_node(weights: Path, expected_sha256: str | None, verify: bool) -> ProvenanceNode:
    node = ProvenanceNode(str(weights), "checkpoint", status=check_sha256(weights, expected_sha256, verify))
    meta_path = weights.parent / "meta.json"
    if not meta_path.exists():
        node.details["meta"] = f"{meta_path} missing"
        return node
    if (meta := read_record(meta_path, node, "training metadata")) is None:
        node.path, node.kind = str(meta_path), "checkpoint meta"
        return node
    arch = meta.get("architecture", {})
    node.details = {
        "architecture": arch.get("name") if isinstance(arch, dict) else arch,
        "seed": meta.get("seed"),
        "steps": meta.get("steps", meta.get("step")),
        "tokens_trained": meta.get("tokens_trained"),
        "final_loss": meta.get("final_loss"),
        "git_commit": meta.get("environment", {}).get("git_commit"),
        "device": meta.get("environment", {}).get("device"),
        "host": meta.get("environment", {}).get("host"),
    }
    if node.status != "missing" and meta.get("final_weights_sha256"):
        node.status = check_sha256(weights, meta["final_weights_sha256"], verify)
        node.details["record"] = str(meta_path) if node.status != "ok" else None
    corpus = meta.get("corpus", {})
    if corpus.get("meta"):
        node.inputs.append(_corpus_node(rebased(corpus["meta"], meta_path), corpus.get("meta_sha256"), verify))
    return node


def _state_node(path: Path, verify: bool) -> ProvenanceNode:
    """A full-state checkpoint (state_*.pt) checked against its sidecar (state_*.pt.sha256)."""
    state = path.with_name(path.name.removesuffix(".sha256"))
    sidecar = state.with_name(state.name + ".sha256")
    node = ProvenanceNode(str(state), "full-state checkpoint", {"sidecar": str(sidecar)})
    try:
        expected = sidecar.read_text().split()[0]
    except (OSError, IndexError, UnicodeDecodeError) as error:
        node.status, node.details["error"] = "unreadable", f"sidecar {sidecar}: {error}"
        return node
    node.status = check_sha256(state, expected, verify)
    return node


def _tokenizer_node(path: Path, verify: bool) -> ProvenanceNode:
    """A tokenizer directory the workflow built, its tokenizer.json checked against its meta.json."""
    directory = path.parent
    node = ProvenanceNode(str(directory / "meta.json"), "tokenizer")
    if (meta := read_record(directory / "meta.json", node, "tokenizer metadata")) is not None:
        node.details = {key: meta.get(key) for key in ("vocab_size", "origin") if key in meta}
        expected = meta.get("tokenizer_json_sha256")
        tokenizer_json = directory / "tokenizer.json"
        node.inputs.append(
            ProvenanceNode(str(tokenizer_json), "tokenizer", status=check_sha256(tokenizer_json, expected, verify))
        )
    return node


def _cache_node(path: Path, verify: bool) -> ProvenanceNode:
    node = ProvenanceNode(str(path), "activation cache")
    if (attrs := read_h5_attrs(path, node, verify)) is None:
        return node
    node.details |= {
        key: attrs.get(key) for key in ("architecture", "seed", "prompt_sets", "cache_dtype", "patterns_only")
    }
    node.details["git_commit"] = (attrs.get("environment") or {}).get("git_commit")

    def read() -> None:
        with open_cache(path) as cache:
            if verify:
                cache.verify()  # reads every dataset in full: every fletcher32 checksum

    read_in_full(node, read)
    if attrs.get("checkpoint"):
        checkpoint = rebased(attrs["checkpoint"], path)
        node.inputs.append(_checkpoint_node(checkpoint, attrs.get("checkpoint_sha256"), verify))
    for name, digest in (attrs.get("prompt_file_sha256") or {}).items():
        node.inputs.append(ProvenanceNode(name, "prompt file", {"sha256": digest}))
    node.inputs += _recorded_tokenizer(attrs.get("tokenizer_identity"), path, "activation cache", verify)
    return node


def _result_node(path: Path, verify: bool, expand_all: bool) -> ProvenanceNode:
    """A pair-similarity or prompt-group similarity file, and the caches it was computed from."""
    kind = file_kind(path) or "pair similarity"
    node = ProvenanceNode(str(path), kind)
    if (attrs := read_h5_attrs(path, node, verify)) is None:
        return node
    if verify:  # reads the data in full: its fletcher32 checksums (a pair-similarity file's null too)
        if kind == "prompt-group similarity":
            read_in_full(node, lambda: read_grouped_similarity(path))
        else:
            read_in_full(node, lambda: (read_pair_similarity(path), read_pair_similarity_null(path)))
    node.details |= {
        "architecture": attrs.get("architecture"),
        "promptset": attrs.get("promptset"),
        "seeds": [int(s) for s in attrs.get("seeds", [])],
        "git_commit": (attrs.get("environment") or {}).get("git_commit"),
    }
    caches = attrs.get("inputs") or attrs.get("caches") or []
    for index, cache_path in enumerate(rebased(cache, path) for cache in caches):
        if index == 0 or expand_all:
            node.inputs.append(_cache_node(cache_path, verify))
        else:
            node.inputs.append(ProvenanceNode(str(cache_path), "activation cache", {"expanded": "no (use --all)"}))
    return node


@dataclass
class _Chain:
    """What one trace has met: files traced (listed, not traced again) and the families of `_TRACED` already
    followed once."""

    seen: set[str] = field(default_factory=set)
    expanded: set[str] = field(default_factory=set)


def _recorded_node(path: Path, verify: bool, expand_all: bool, chain: _Chain, follow: bool = True) -> ProvenanceNode:
    """A table or figure checked against its record (write_table, write_figure_records), and traced through the
    inputs of the job that wrote it: other tables always, the first weights, cache and similarity file in the
    whole chain (every one with `expand_all`); a file met earlier in the chain is listed, not traced again.
    follow=False: the file only."""
    node = ProvenanceNode(str(path), file_kind(path) or "table")
    chain.seen.add(str(path))
    record_file = record_path(path)
    try:
        record = read_file_record(path)
    except (FileNotFoundError, ValueError, UnicodeDecodeError) as error:
        node.status = "missing" if not path.exists() else "unrecorded"
        node.details["error"] = f"{error}. {_rebuild_fix(path, None)}"
        return node
    node.details |= {"rule": record.get("rule"), "record": str(record_file)}
    node.status = check_sha256(path, record["sha256"], verify)
    if node.status == "sha256 mismatch":
        node.details["error"] = (
            f"{path} differs from the sha256 in {record_file}: it was changed after its rule wrote it. "
            + _rebuild_fix(path, record.get("rule"))
        )
    if not follow:
        node.details["inputs"] = f"not traced (trace {path.name} for them)"
        return node
    for item in record_inputs(path, record):
        node.inputs.append(_input_node(item, verify, expand_all, chain))
    return node


def _rebuild_fix(path: Path, rule: str | None) -> str:
    rerun = f"snakemake --forcerun {rule}" if rule else "snakemake --forcerun <its rule>"
    return f"Rebuild it: `{rerun}`, or delete {path} and run snakemake"


def _input_node(path: Path, verify: bool, expand_all: bool, chain: _Chain) -> ProvenanceNode:
    """One input of a table's or figure's job: a table or figure (traced), a file a record covers (traced, the
    first of its kind unless `expand_all`), or a file no record covers (its status only)."""
    kind = file_kind(path)
    if str(path) in chain.seen:
        return ProvenanceNode(str(path), kind or "input", {"traced": "above"})
    if kind in ("table", "figure"):
        return _recorded_node(path, verify, expand_all, chain)
    if kind in _TRACED and (expand_all or _TRACED[kind] not in chain.expanded):
        chain.expanded.add(_TRACED[kind])
        chain.seen.add(str(path))
        return trace(path, verify, expand_all)
    if kind is None:  # a prompt file, the configuration ...: outside results_dir, covered by no record here
        return ProvenanceNode(str(path), "input", {"record": "none (not a file of results_dir)"})
    status = "ok" if path.exists() else "missing"
    return ProvenanceNode(str(path), kind, {"expanded": "no (use --all)"}, status=status)


def trace(path: str | Path, verify: bool = False, expand_all: bool = False) -> ProvenanceNode:
    """The chain of files behind a file of the workflow, back to the corpus shards.

    Knows every kind of file the workflow writes under results_dir (headstab.plan.layout.file_kind): checkpoints
    (final.pt, meta.json, train_log.csv), full-state checkpoints, snapshot weights, activation caches,
    similarity and prompt-group similarity files, token shards, corpus metas, tokenizers, tables and figures
    (checked against their record and traced through the inputs of the job that wrote them); files no record covers (logs,
    benchmarks, report pages, the configuration, the corpus text) are listed as such. verify=True recomputes
    every recorded sha256, checks every HDF5 file's attribute digests and reads it in full, which checks its
    fletcher32 checksums (slow for big files); otherwise hashes are only listed.
    """
    path = Path(path)
    kind = file_kind(path)
    if kind in ("checkpoint", "snapshot weights"):
        return _checkpoint_node(path.parent / "final.pt", None, verify)
    if kind in ("pair similarity", "prompt-group similarity"):
        return _result_node(path, verify, expand_all)
    if kind in ("table", "figure"):
        return _recorded_node(path, verify, expand_all, _Chain())
    if kind in ("table record", "figure record"):  # checked against its file, whose own trace follows the inputs
        return _recorded_node(
            path.with_name(path.name.removesuffix(RECORD_SUFFIX)), verify, expand_all, _Chain(), False
        )
    builders = {"full-state checkpoint": _state_node, "activation cache": _cache_node, "token shard": _shard_node}
    builders |= {"tokenizer": _tokenizer_node, "corpus meta": lambda path, verify: _corpus_node(path, None, verify)}
    if kind in builders:
        return builders[kind](path, verify)
    if kind is not None:  # written by the workflow, covered by no record: there is nothing to check it against
        status = "ok" if path.exists() else "missing"
        return ProvenanceNode(str(path), kind, {"record": "none (nothing to verify)"}, status=status)
    raise ValueError(
        f"don't know how to trace {path}: it is not a file the workflow writes under results_dir (a checkpoint, "
        "cache, similarity file, token shard, corpus meta.json, tokenizer, table, figure, log ...; "
        "headstab.plan.layout.file_kind)"
    )


def format_chain(node: ProvenanceNode, indent: int = 0) -> str:
    """The chain as an indented tree, one file a line, details beside it."""
    details = ", ".join(f"{key}={value}" for key, value in node.details.items() if value is not None)
    flag = "" if node.status == "ok" else f"  [{node.status}]"
    line = f"{'  ' * indent}{'<- ' if indent else ''}{node.kind}: {node.path}{flag}" + (
        f"  ({details})" if details else ""
    )
    return "\n".join([line, *(format_chain(child, indent + 1) for child in node.inputs)])


def as_dict(node: ProvenanceNode) -> dict[str, Any]:
    return {**asdict(node), "inputs": [as_dict(child) for child in node.inputs]}


def walk(node: ProvenanceNode) -> Iterator[ProvenanceNode]:
    """The node and every node below it, depth first."""
    yield node
    for child in node.inputs:
        yield from walk(child)
