"""Small HDF5 helpers of the cache reader: attribute decoding and a dataset opened with its own chunk cache."""

from __future__ import annotations

import json
from typing import Any

import h5py
import numpy as np

__all__ = ["decode_attr", "with_chunk_cache"]


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
