"""Small HDF5 helpers of the workflow's readers and writers: attribute decoding, the attributes' digests, and
a dataset opened with its own chunk cache."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import h5py
import numpy as np

from headstab.plan.formats import ATTRS_DIGEST

__all__ = [
    "ATTRS_DIGEST",
    "attribute_digest_mismatches",
    "attribute_digests",
    "decode_attr",
    "seal",
    "stamp_attribute_digests",
    "with_chunk_cache",
]
# Not digested: the digest itself, and `complete`, which a writer sets after it (readers check it apart).
UNDIGESTED = (ATTRS_DIGEST, "complete")


def decode_attr(value: Any) -> Any:
    """An HDF5 attribute as Python data: bytes decoded, JSON lists and dicts parsed, numpy scalars unwrapped."""
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value.item() if isinstance(value, np.generic) else value


def with_chunk_cache(group: h5py.Group, name: str, n_chunks: int) -> h5py.Dataset:
    """Dataset `name` of `group` opened with a chunk cache of `n_chunks` of its chunks.

    hook_pattern needs n_layers + 2: a prompt range of all layers ends in one chunk per layer that the
    next range starts in, plus room for the chunks it passes through; with fewer, those chunks are read
    and verified twice. w0 keeps HDF5's default (with w0 = 1 HDF5 2.0 kept every partly read chunk).
    """
    dataset = group[name]
    if dataset.chunks is None:
        return dataset
    chunk_bytes = int(np.prod(dataset.chunks)) * dataset.dtype.itemsize
    del dataset  # HDF5 applies a chunk cache only when it opens a dataset that no handle holds open
    access = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    nslots, _, w0 = access.get_chunk_cache()
    access.set_chunk_cache(nslots, n_chunks * chunk_bytes, w0)
    return h5py.Dataset(h5py.h5d.open(group.id, name.encode(), dapl=access))


def _canonical(value: Any) -> Any:
    """An attribute value as h5py reads it, as JSON data that tells its type apart (1, 1.0, True, "1" differ)."""
    if isinstance(value, np.ndarray):
        return ["array", value.dtype.str, list(value.shape), [_canonical(item) for item in value.ravel().tolist()]]
    if isinstance(value, bytes):
        return ["bytes", value.hex()]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, bool | np.bool_):
        return ["bool", bool(value)]
    if isinstance(value, int | np.integer):
        return ["int", int(value)]
    if isinstance(value, float | np.floating):
        return ["float", float(value).hex()]  # exact, NaN and infinities included
    return ["repr", repr(value)]


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(_canonical(value), separators=(",", ":")).encode()).hexdigest()


def attribute_digests(handle: h5py.File) -> dict[str, dict[str, str]]:
    """{object name ("/", "/primary", "/primary/hook_pattern"): {attribute: sha256 of its canonical value}}
    of every attribute of the file, its groups and datasets, but `complete` and the digest attribute."""
    objects: dict[str, Any] = {"/": handle}

    def collect(name: str, obj: Any) -> None:
        objects[f"/{name}"] = obj

    handle.visititems(collect)
    digests = {}
    for name, obj in objects.items():
        values = {key: _digest(obj.attrs[key]) for key in obj.attrs if not (name == "/" and key in UNDIGESTED)}
        if values:
            digests[name] = values
    return digests


def stamp_attribute_digests(handle: h5py.File) -> None:
    """Store the digest of every attribute written so far (call it after the last one but `complete`)."""
    handle.attrs[ATTRS_DIGEST] = json.dumps(attribute_digests(handle), sort_keys=True)


def seal(handle: h5py.File) -> None:
    """Finish a file being written: the digests of its attributes, then `complete = True`, last (a file
    without it was interrupted; readers require it)."""
    stamp_attribute_digests(handle)
    handle.attrs["complete"] = True


def _where(name: str, key: str) -> str:
    return f"attribute {key}" if name == "/" else f"attribute {key} of {name}"


def attribute_digest_mismatches(handle: h5py.File) -> list[str]:
    """What differs from the digests `stamp_attribute_digests` stored, e.g. ["attribute seed"] for a changed
    or removed one, ["attribute x (not digested)"] for one added; [] when every attribute matches."""
    if ATTRS_DIGEST not in handle.attrs:
        return [f"attribute {ATTRS_DIGEST} (missing)"]
    try:
        stored = json.loads(_text(handle.attrs[ATTRS_DIGEST]))
    except (ValueError, UnicodeDecodeError):
        return [f"attribute {ATTRS_DIGEST} (not a JSON record)"]
    if not isinstance(stored, dict):
        return [f"attribute {ATTRS_DIGEST} (not a JSON record)"]
    found = attribute_digests(handle)
    bad = []
    for name in sorted(set(stored) | set(found)):
        expected, actual = stored.get(name) or {}, found.get(name) or {}
        for key in sorted(set(expected) | set(actual)):
            if key not in actual:
                bad.append(f"{_where(name, key)} (removed)")
            elif key not in expected:
                bad.append(f"{_where(name, key)} (not digested)")
            elif expected[key] != actual[key]:
                bad.append(_where(name, key))
    return bad


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
