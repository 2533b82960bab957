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
    status: str = "ok"  # ok | missing | sha256 mismatch | checksum mismatch | unverified
    inputs: list[ProvenanceNode] = field(default_factory=list)


def _check(path: Path, expected_sha256: str | None, verify: bool) -> str:
    if not path.exists():
        return "missing"
    if expected_sha256 is None:
        return "ok"
    if not verify:
        return "unverified"
    return "ok" if sha256_file(path) == expected_sha256 else "sha256 mismatch"


def _corpus_node(meta_path: Path, expected_sha256: str | None, verify: bool) -> ProvenanceNode:
    node = ProvenanceNode(str(meta_path), "corpus meta", status=_check(meta_path, expected_sha256, verify))
    if node.status == "missing":
        return node
    meta = read_json(meta_path, "corpus metadata")
    node.details = {key: meta.get(key) for key in ("corpus", "n_tokens", "n_documents", "source") if key in meta}
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


def _checkpoint_node(weights: Path, expected_sha256: str | None, verify: bool) -> ProvenanceNode:
    node = ProvenanceNode(str(weights), "checkpoint", status=_check(weights, expected_sha256, verify))
    meta_path = weights.parent / "meta.json"
    if not meta_path.exists():
        node.details["meta"] = f"{meta_path} missing"
        return node
    meta = read_json(meta_path, "training metadata")
    arch = meta.get("architecture", {})
    node.details = {
        "architecture": arch.get("name"),
        "seed": meta.get("seed"),
        "steps": meta.get("steps"),
        "tokens_trained": meta.get("tokens_trained"),
        "final_loss": meta.get("final_loss"),
        "git_commit": meta.get("environment", {}).get("git_commit"),
        "device": meta.get("environment", {}).get("device"),
        "host": meta.get("environment", {}).get("host"),
    }
    if node.status != "missing" and meta.get("final_weights_sha256") and verify:
        if sha256_file(weights) != meta["final_weights_sha256"]:
            node.status = "sha256 mismatch"
    corpus = meta.get("corpus", {})
    if corpus.get("meta"):
        node.inputs.append(_corpus_node(Path(corpus["meta"]), corpus.get("meta_sha256"), verify))
    return node


def _cache_node(path: Path, verify: bool) -> ProvenanceNode:
    from headstab.activations.reader import CacheChecksumError, open_cache

    node = ProvenanceNode(str(path), "activation cache")
    if not path.exists():
        node.status = "missing"
        return node
    with open_cache(path) as cache:
        attrs = cache.attrs
        node.details = {
            "architecture": attrs.get("architecture"),
            "seed": attrs.get("seed"),
            "prompt_sets": attrs.get("prompt_sets"),
            "cache_dtype": attrs.get("cache_dtype"),
            "git_commit": (attrs.get("environment") or {}).get("git_commit"),
        }
        prompt_files = attrs.get("prompt_file_sha256") or {}
        if verify:
            try:
                cache.verify()  # reads every dataset in full: every fletcher32 checksum
            except CacheChecksumError as error:
                node.status = "checksum mismatch"
                node.details["error"] = str(error)
    if attrs.get("checkpoint"):
        node.inputs.append(_checkpoint_node(Path(attrs["checkpoint"]), attrs.get("checkpoint_sha256"), verify))
    for name, digest in prompt_files.items():
        node.inputs.append(ProvenanceNode(name, "prompt file", {"sha256": digest}))
    return node


def _similarity_node(path: Path, verify: bool, expand_all: bool) -> ProvenanceNode:
    import h5py

    from headstab.similarity.pairs import SimilarityChecksumError, SimilarityFileError, read_pair_similarity

    node = ProvenanceNode(str(path), "pair similarity")
    if not path.exists():
        node.status = "missing"
        return node
    try:
        with h5py.File(path, "r") as handle:
            attrs = {key: handle.attrs[key] for key in handle.attrs}
    except OSError as error:
        node.status, node.details["error"] = "unreadable", str(error)
        return node
    if verify:
        try:
            read_pair_similarity(path)  # reads the data in full: its fletcher32 checksums
        except SimilarityFileError as error:
            node.status = "checksum mismatch" if isinstance(error, SimilarityChecksumError) else "unreadable"
            node.details["error"] = str(error)
    inputs = json.loads(attrs.get("inputs", "{}"))
    environment = json.loads(attrs.get("environment", "{}"))
    node.details |= {
        "architecture": attrs.get("architecture"),
        "promptset": attrs.get("promptset"),
        "seeds": [int(s) for s in attrs.get("seeds", [])],
        "git_commit": environment.get("git_commit"),
    }
    for index, cache_path in enumerate(inputs):
        if index == 0 or expand_all:
            node.inputs.append(_cache_node(Path(cache_path), verify))
        else:
            node.inputs.append(ProvenanceNode(cache_path, "activation cache", {"expanded": "no (use --all)"}))
    return node


def trace(path: str | Path, verify: bool = False, expand_all: bool = False) -> ProvenanceNode:
    """The chain of files behind an output of the workflow, back to the corpus shards.

    Knows checkpoints (final.pt + meta.json), activation caches, similarity files, corpus metas, and
    tables/figures of an architecture (traced through that architecture's primary similarity file).
    verify=True recomputes every recorded sha256 and reads caches and similarity files in full, which
    checks their fletcher32 checksums (slow for big files); otherwise hashes are only listed.
    """
    path = Path(path)
    name = path.name
    if name == "final.pt" or name in ("meta.json", "train_log.csv") and path.parent.name.startswith("seed"):
        return _checkpoint_node(path.parent / "final.pt", None, verify)
    if path.suffix == ".h5" and path.parent.name == "caches":
        return _cache_node(path, verify)
    if path.suffix == ".h5" and path.parent.name == "similarity":
        return _similarity_node(path, verify, expand_all)
    if name == "meta.json" and path.parent.parent.name == "data":
        return _corpus_node(path, None, verify)
    if path.parent.name in ("tables", "figures") and path.suffix in (".csv", ".png"):
        node = ProvenanceNode(
            str(path), "table" if path.suffix == ".csv" else "figure", status="ok" if path.exists() else "missing"
        )
        similarity_dir = path.parent.parent / "similarity"
        sources = sorted(similarity_dir.glob("*.h5"))
        primary = similarity_dir / "primary.h5"
        if primary.exists():
            sources = [primary] + [p for p in sources if p != primary]
        for index, source in enumerate(sources):
            if index == 0 or expand_all:
                node.inputs.append(_similarity_node(source, verify, expand_all))
            else:
                node.inputs.append(ProvenanceNode(str(source), "pair similarity", {"expanded": "no (use --all)"}))
        if not sources:
            node.details["note"] = f"no similarity files under {similarity_dir}"
        return node
    raise ValueError(
        f"don't know how to trace {path}: expected a final.pt, a cache (caches/*.h5), a similarity file "
        "(similarity/*.h5), a corpus meta.json (data/<corpus>/meta.json) or an architecture's table/figure"
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
    parser.add_argument(
        "output", help="final.pt, caches/seed*.h5, similarity/*.h5, data/<corpus>/meta.json, or a table/figure"
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="recompute every recorded sha256 and read every cache and similarity file in full "
        "(checks their checksums; slow for big files)",
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
    bad = [n for n in _walk(chain) if n.status in ("missing", "sha256 mismatch", "checksum mismatch", "unreadable")]
    return 1 if bad else 0


def _walk(node: ProvenanceNode):
    yield node
    for child in node.inputs:
        yield from _walk(child)


if __name__ == "__main__":
    sys.exit(main())
