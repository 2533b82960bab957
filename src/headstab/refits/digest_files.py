"""The workflow's weights digest files (rules digest_revision, digest_refit; read by rule audit_family): one JSON
file per checkpoint, with where its weights came from. No torch: the audit job reads digests only."""

from __future__ import annotations

from pathlib import Path

from headstab.fileio import read_json, write_json_atomic
from headstab.refits.weight_digest import Checkpoint, WeightDigest, digest_from_dict, digest_to_dict

DIGEST_FORMAT = 1


def save_digest(digest: WeightDigest, path: str | Path, identity: str) -> None:
    """Write `digest` of the weights at `identity` (hub id@revision or a file) to `path`."""
    write_json_atomic(path, {"format": DIGEST_FORMAT, "identity": identity, **digest_to_dict(digest)})


def load_digest(path: str | Path) -> tuple[WeightDigest, str]:
    """(digest, identity) from a file save_digest wrote; ValueError naming the file and the fix otherwise."""
    values = read_json(path, "weights digest")
    if values.get("format") != DIGEST_FORMAT:
        raise ValueError(
            f"weights digest {path} has format {values.get('format')!r}, not {DIGEST_FORMAT}; delete it and rerun "
            "snakemake (rules digest_revision, digest_refit)"
        )
    return digest_from_dict(values), str(values["identity"])


def checkpoints_from_files(files: list[tuple[int, str, str]]) -> list[Checkpoint]:
    """The checkpoints of (seed, revision, digest file) rows, in their order."""
    checkpoints = []
    for seed, revision, path in files:
        digest, identity = load_digest(path)
        checkpoints.append(Checkpoint(int(seed), str(revision), identity, digest))
    return checkpoints
