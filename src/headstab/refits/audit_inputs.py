"""The checkpoints a provenance audit reads (headstab.refits.audit), digested from the models: a family's
revisions from the hub or a local directory, and the refits trained here.

Every model is read as the analyses read it: transformers with trust_remote_code=False and weights_only
loading (headstab.refits.hub_models.load_hf_model), a checkpoint of ours checked against the sha256 its
meta.json records. A hub download goes to a temporary folder and is deleted once digested.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch

from headstab.plan.family_audit import AuditSettings
from headstab.plan.hub_families import FamilyModel, FamilySource
from headstab.plan.layout import Layout
from headstab.plan.spec import ArchitectureSpec
from headstab.refits.hub_models import check_dimensions, download_family_model, load_hf_model
from headstab.refits.models import load_verified_state_dict
from headstab.refits.weight_digest import Checkpoint, WeightDigest, digest_weights


def state_digest(state: Mapping[str, torch.Tensor]) -> WeightDigest:
    """The digest of a torch state dict (its floating-point tensors, read as float32)."""
    return digest_weights(
        {name: t.detach().to("cpu", torch.float32).numpy() for name, t in state.items() if t.is_floating_point()}
    )


def digest_model(model: FamilyModel, spec: ArchitectureSpec, where: str, scratch: str | Path) -> WeightDigest:
    """The digest of one seed's model at model.revision: its local directory, or downloaded into `scratch`."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per checkpoint would bury the audit's numbers
    if model.directory is not None:
        hf_model = load_hf_model(model.directory, where)
    else:
        with tempfile.TemporaryDirectory(dir=scratch, prefix=".download_") as download_dir:
            hf_model = load_hf_model(download_family_model(model, Path(download_dir)), where)
    check_dimensions(hf_model.config.to_dict(), spec, model.identity)
    return state_digest(hf_model.state_dict())


def model_checkpoints(
    family: str, source: FamilySource, spec: ArchitectureSpec, scratch: str | Path
) -> list[Checkpoint]:
    """Every checkpoint of a family, digested from the models themselves (the command line's audit)."""
    checkpoints = []
    for seed, model in source.models:
        for revision in (*source.audit.revisions, model.revision_name):
            at = model.at(revision) if revision in source.audit.revisions else model
            where = f"model {at.identity} (seed {seed} of '{family}')"
            checkpoints.append(Checkpoint(seed, revision, at.identity, digest_model(at, spec, where, scratch)))
    return checkpoints


def trained_checkpoints(
    layout: Layout, spec: ArchitectureSpec, steps: tuple[int, ...]
) -> tuple[list[Checkpoint], AuditSettings]:
    """The refits trained here: each seed's weights at the snapshot `steps` (step 0: the initialisation rebuilt
    from its seed; step 1, when kept, the first step) and final.pt, each checked against its meta.json; and the
    settings that fit them (one init seed per refit; the data order per refit too unless data_order is shared)."""
    checkpoints = []
    for seed in spec.seeds:
        files = [(f"step{step}", layout.snapshot_weights(spec.name, step, seed)) for step in steps]
        files.append(("final", layout.final_weights(spec.name, seed)))
        for revision, path in files:
            digest = state_digest(load_verified_state_dict(path))
            checkpoints.append(Checkpoint(int(seed), revision, path, digest))
    axis = "init_seed" if spec.data_order == "shared" else "both"
    return checkpoints, AuditSettings(axis, tuple(f"step{step}" for step in steps))
