"""Provenance: what produced a file (inputs' sha256, config, code version, packages, host, device).

Every checkpoint, corpus shard, cache and similarity file carries such a record (a meta.json beside
it or HDF5 attributes), so a number in a paper can be traced back to the corpus shards.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from headstab.fileio import read_json, sha256_file

TRACKED_PACKAGES = (
    "headstab",
    "torch",
    "transformer-lens",
    "transformers",
    "tokenizers",
    "datasets",
    "numpy",
    "h5py",
    "snakemake",
)


def package_versions(packages: Iterable[str] = TRACKED_PACKAGES) -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in packages:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_commit(repo: str | Path | None = None) -> str:
    """The workflow's git commit (with '-dirty' when the tree has uncommitted changes), or 'unknown'."""
    repo = Path(repo) if repo is not None else Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def environment_record(device: str | None = None) -> dict[str, Any]:
    """Host, device, code version and package versions, for a meta.json."""
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "device": device or "cpu",
        "git_commit": git_commit(),
        "packages": package_versions(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


# ---------------------------------------------------------------- the chain behind an output
@dataclass
class ProvenanceNode:
    """One file in the chain from an output back to the corpus shards."""

    path: str
    kind: str
    details: dict[str, Any] = field(default_factory=dict)
    # ok | missing | sha256 mismatch | checksum mismatch | digest mismatch | unreadable | unverified
    status: str = "ok"
    inputs: list[ProvenanceNode] = field(default_factory=list)


FAILED = ("missing", "sha256 mismatch", "checksum mismatch", "digest mismatch", "unreadable")


def _check(path: Path, expected_sha256: str | None, verify: bool) -> str:
    if not path.exists():
        return "missing"
    if expected_sha256 is None:
        return "ok"
    if not verify:
        return "unverified"
    return "ok" if sha256_file(path) == expected_sha256 else "sha256 mismatch"


def _record(path: Path, node: ProvenanceNode, what: str) -> dict[str, Any] | None:
    """The JSON record `path` (None, with the node marked, when it is missing or unreadable)."""
    try:
        record = read_json(path, what)
    except (FileNotFoundError, ValueError, UnicodeDecodeError) as error:
        node.status = "missing" if isinstance(error, FileNotFoundError) else "unreadable"
        node.details["error"] = str(error)
        return None
    if not isinstance(record, dict):
        node.status, node.details["error"] = "unreadable", f"{what} file {path} is not a JSON object"
        return None
    return record


def _corpus_node(meta_path: Path, expected_sha256: str | None, verify: bool) -> ProvenanceNode:
    node = ProvenanceNode(str(meta_path), "corpus meta", status=_check(meta_path, expected_sha256, verify))
    if node.status == "missing" or (meta := _record(meta_path, node, "corpus metadata")) is None:
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
                status=_check(shard_path, shard.get("sha256"), verify),
            )
        )
    return node


def _shard_node(path: Path, verify: bool) -> ProvenanceNode:
    """A token shard (.npy) checked against its record (.json, written with it)."""
    shard, record_path = path.with_suffix(".npy"), path.with_suffix(".json")
    node = ProvenanceNode(str(record_path), "token shard record")
    if (record := _record(record_path, node, "shard record")) is not None:
        node.details = {key: record.get(key) for key in ("corpus", "shard_index", "n_tokens") if key in record}
        node.inputs.append(
            ProvenanceNode(str(shard), "token shard", status=_check(shard, record.get("sha256"), verify))
        )
    return node


def _checkpoint_node(weights: Path, expected_sha256: str | None, verify: bool) -> ProvenanceNode:
    node = ProvenanceNode(str(weights), "checkpoint", status=_check(weights, expected_sha256, verify))
    meta_path = weights.parent / "meta.json"
    if not meta_path.exists():
        node.details["meta"] = f"{meta_path} missing"
        return node
    if (meta := _record(meta_path, node, "training metadata")) is None:
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
        node.status = _check(weights, meta["final_weights_sha256"], verify)
        node.details["record"] = str(meta_path) if node.status != "ok" else None
    corpus = meta.get("corpus", {})
    if corpus.get("meta"):
        node.inputs.append(_corpus_node(Path(corpus["meta"]), corpus.get("meta_sha256"), verify))
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
    node.status = _check(state, expected, verify)
    return node


def _tokenizer_node(path: Path, verify: bool) -> ProvenanceNode:
    """A tokenizer directory the workflow built, its tokenizer.json checked against its meta.json."""
    directory = path.parent
    node = ProvenanceNode(str(directory / "meta.json"), "tokenizer")
    if (meta := _record(directory / "meta.json", node, "tokenizer metadata")) is not None:
        node.details = {key: meta.get(key) for key in ("vocab_size", "origin") if key in meta}
        expected = meta.get("tokenizer_json_sha256")
        tokenizer_json = directory / "tokenizer.json"
        node.inputs.append(
            ProvenanceNode(str(tokenizer_json), "tokenizer", status=_check(tokenizer_json, expected, verify))
        )
    return node


def _h5_attrs(path: Path, node: ProvenanceNode, verify: bool) -> dict[str, Any] | None:
    """The file attributes of an HDF5 file of the workflow (None, the node marked, when it is missing or
    unreadable); with `verify` also their digests (attrs_sha256)."""
    import h5py

    from headstab.activations.h5util import attribute_digest_mismatches, decode_attr

    if not path.exists():
        node.status = "missing"
        return None
    try:
        with h5py.File(path, "r") as handle:
            attrs = {key: decode_attr(handle.attrs[key]) for key in handle.attrs}
            mismatches = attribute_digest_mismatches(handle) if verify else []
    except OSError as error:
        node.status, node.details["error"] = "unreadable", str(error)
        return None
    if mismatches:
        node.status, node.details["error"] = "digest mismatch", f"{'; '.join(mismatches)} (attrs_sha256 differs)"
    return attrs


def _read_in_full(node: ProvenanceNode, read) -> None:
    """Run `read()`, a reader that checks the file's format and reads its datasets (their fletcher32 checksums)."""
    from headstab.activations.errors import is_filter_failure

    try:
        read()
    except ValueError as error:  # CacheError, SimilarityFileError, GroupedSimilarityError
        if node.status == "ok":
            cause = error.__cause__
            checksum = isinstance(cause, OSError) and is_filter_failure(cause)
            node.status, node.details["error"] = "checksum mismatch" if checksum else "unreadable", str(error)


def _cache_node(path: Path, verify: bool) -> ProvenanceNode:
    from headstab.activations.reader import open_cache

    node = ProvenanceNode(str(path), "activation cache")
    if (attrs := _h5_attrs(path, node, verify)) is None:
        return node
    node.details |= {
        key: attrs.get(key) for key in ("architecture", "seed", "prompt_sets", "cache_dtype", "patterns_only")
    }
    node.details["git_commit"] = (attrs.get("environment") or {}).get("git_commit")

    def read() -> None:
        with open_cache(path) as cache:
            if verify:
                cache.verify()  # reads every dataset in full: every fletcher32 checksum

    _read_in_full(node, read)
    if attrs.get("checkpoint"):
        node.inputs.append(_checkpoint_node(Path(attrs["checkpoint"]), attrs.get("checkpoint_sha256"), verify))
    for name, digest in (attrs.get("prompt_file_sha256") or {}).items():
        node.inputs.append(ProvenanceNode(name, "prompt file", {"sha256": digest}))
    return node


def _result_node(path: Path, verify: bool, expand_all: bool) -> ProvenanceNode:
    """A pair-similarity or prompt-group similarity file, and the caches it was computed from."""
    from headstab.plan.layout import file_kind
    from headstab.similarity.pairs import read_pair_similarity
    from headstab.similarity.prompt_groups import read_grouped_similarity

    kind = file_kind(path) or "pair similarity"
    node = ProvenanceNode(str(path), kind)
    if (attrs := _h5_attrs(path, node, verify)) is None:
        return node
    if verify:  # reads the data in full: its fletcher32 checksums
        reader = read_grouped_similarity if kind == "prompt-group similarity" else read_pair_similarity
        _read_in_full(node, lambda: reader(path))
    node.details |= {
        "architecture": attrs.get("architecture"),
        "promptset": attrs.get("promptset"),
        "seeds": [int(s) for s in attrs.get("seeds", [])],
        "git_commit": (attrs.get("environment") or {}).get("git_commit"),
    }
    caches = attrs.get("inputs") or attrs.get("caches") or []
    for index, cache_path in enumerate(caches):
        if index == 0 or expand_all:
            node.inputs.append(_cache_node(Path(cache_path), verify))
        else:
            node.inputs.append(ProvenanceNode(cache_path, "activation cache", {"expanded": "no (use --all)"}))
    return node


def _output_node(path: Path, kind: str, verify: bool, expand_all: bool) -> ProvenanceNode:
    """A table or figure: traced through its architecture's similarity files, the primary one first."""
    node = ProvenanceNode(str(path), kind, status="ok" if path.exists() else "missing")
    similarity_dir = path.parent.parent / "similarity"
    sources = sorted(p for p in similarity_dir.glob("*.h5") if not p.name.endswith(".groups.h5"))
    primary = similarity_dir / "primary.h5"
    if primary.exists():
        sources = [primary] + [p for p in sources if p != primary]
    for index, source in enumerate(sources):
        if index == 0 or expand_all:
            node.inputs.append(_result_node(source, verify, expand_all))
        else:
            node.inputs.append(ProvenanceNode(str(source), "pair similarity", {"expanded": "no (use --all)"}))
    if not sources:
        node.details["note"] = f"no similarity files under {similarity_dir}"
    return node


def trace(path: str | Path, verify: bool = False, expand_all: bool = False) -> ProvenanceNode:
    """The chain of files behind a file of the workflow, back to the corpus shards.

    Knows every kind of file the workflow writes under results_dir (headstab.plan.layout.file_kind): checkpoints
    (final.pt, meta.json, train_log.csv), full-state checkpoints, snapshot weights, activation caches,
    similarity and prompt-group similarity files, token shards, corpus metas, tokenizers, and tables and
    figures (traced through their architecture's primary similarity file); files no record covers (logs,
    benchmarks, report pages, the configuration, the corpus text) are listed as such. verify=True recomputes
    every recorded sha256, checks every HDF5 file's attribute digests and reads it in full, which checks its
    fletcher32 checksums (slow for big files); otherwise hashes are only listed.
    """
    from headstab.plan.layout import file_kind

    path = Path(path)
    kind = file_kind(path)
    if kind in ("checkpoint", "snapshot weights"):
        return _checkpoint_node(path.parent / "final.pt", None, verify)
    if kind in ("pair similarity", "prompt-group similarity"):
        return _result_node(path, verify, expand_all)
    if kind in ("table", "figure"):
        return _output_node(path, kind, verify, expand_all)
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


def _as_dict(node: ProvenanceNode) -> dict[str, Any]:
    return {**asdict(node), "inputs": [_as_dict(child) for child in node.inputs]}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m headstab.provenance",
        description="Print the chain from a workflow output back to the corpus shards.",
    )
    parser.add_argument("output", help="a file the workflow wrote: final.pt, a cache, a similarity file, a table ...")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="recompute every recorded sha256, check the attribute digests of every HDF5 file and read it in "
        "full (its checksums; slow for big files)",
    )
    parser.add_argument("--all", action="store_true", help="expand every refit, not only the first")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a tree")
    args = parser.parse_args(argv)
    try:
        chain = trace(args.output, verify=args.verify, expand_all=args.all)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(_as_dict(chain), indent=2, default=str) if args.json else format_chain(chain))
    return 1 if any(node.status in FAILED for node in _walk(chain)) else 0


def _walk(node: ProvenanceNode):
    yield node
    for child in node.inputs:
        yield from _walk(child)


if __name__ == "__main__":
    sys.exit(main())
