"""A digest of a model's weights: what the provenance audit (headstab.refits.audit) compares checkpoints by.

`digest_weights(state)` reads a state dict once and keeps, per tensor, the sha256 of its values and its sum
and sum of squares, and for the whole model a CountSketch (Charikar et al. 2002) of the concatenated weights:
every value is added, with a random sign, to one of `buckets` random buckets, the same bucket and sign for the
same tensor name and shape in every model. The sketch is linear, so the sketch of a difference is the
difference of the sketches, and its squared norm estimates the squared L2 distance without bias, with a
relative standard deviation of at most sqrt(2 / buckets) (0.55% at 65,536 buckets, so 0.28% on a distance).
A digest is small (a 160M-parameter model gives 0.5 MB), so a checkpoint can be digested where it is
downloaded and discarded, and any two digests compared later.

Values are compared as float32 with -0.0 read as 0.0: the same weights stored in float16 and in float32, or
differing only in the sign of zeros, have one sha256. Pure numpy: the caller turns tensors into float32 arrays.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

SKETCH_BUCKETS = 1 << 16
SKETCH_CHUNK = 1 << 22  # values hashed per draw: bounds the memory of a large embedding's buckets


@dataclass(frozen=True)
class TensorDigest:
    """One tensor: its name, shape, the sha256 of its float32 values, their sum and sum of squares."""

    name: str
    shape: tuple[int, ...]
    sha256: str
    total: float
    sum_of_squares: float

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def variance(self) -> float:
        """The population variance of the tensor's values."""
        mean = self.total / max(self.numel, 1)
        return max(self.sum_of_squares / max(self.numel, 1) - mean * mean, 0.0)


@dataclass(frozen=True, eq=False)
class WeightDigest:
    """A model's weights: sha256 over every tensor's name, shape and values; per-tensor digests; sketch [bucket]."""

    sha256: str
    tensors: tuple[TensorDigest, ...]
    sketch: np.ndarray

    @property
    def sum_of_squares(self) -> float:
        return float(sum(tensor.sum_of_squares for tensor in self.tensors))

    @property
    def layout(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(name, shape) of every tensor: two digests are comparable when their layouts are equal."""
        return tuple((tensor.name, tensor.shape) for tensor in self.tensors)


@dataclass(frozen=True)
class Checkpoint:
    """One seed's weights at one revision: `identity` says where they came from (hub id@revision or directory)."""

    seed: int
    revision: str
    identity: str
    digest: WeightDigest

    @property
    def label(self) -> str:
        return f"seed{self.seed}@{self.revision}"


def canonical_values(values: np.ndarray) -> np.ndarray:
    """`values` as contiguous little-endian float32 with every -0.0 made 0.0 (equal values, equal bytes)."""
    flat = np.ascontiguousarray(values, dtype="<f4").reshape(-1)
    return flat + np.float32(0.0)  # IEEE: -0.0 + 0.0 = +0.0; every other value is unchanged


def _sketch_seed(name: str, shape: tuple[int, ...], chunk: int) -> int:
    key = f"{name}|{','.join(map(str, shape))}|{chunk}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little")


def _digest_tensor(sketch: np.ndarray, name: str, flat: np.ndarray, shape: tuple[int, ...]) -> TensorDigest:
    """One tensor's digest [value], its values added into `sketch` [bucket] chunk by chunk, each chunk's buckets
    and signs drawn from a generator seeded by the tensor's name, shape and the chunk's index."""
    total = squares = 0.0
    for chunk, start in enumerate(range(0, flat.size, SKETCH_CHUNK)):
        values = flat[start : start + SKETCH_CHUNK].astype(np.float64)
        total, squares = total + float(values.sum()), squares + float(np.dot(values, values))
        rng = np.random.default_rng(_sketch_seed(name, shape, chunk))
        buckets = rng.integers(0, sketch.size, size=values.size)
        signs = rng.integers(0, 2, size=values.size) * 2.0 - 1.0
        sketch += np.bincount(buckets, weights=signs * values, minlength=sketch.size)
    return TensorDigest(name, shape, hashlib.sha256(flat.tobytes()).hexdigest(), total, squares)


def digest_weights(state: Mapping[str, np.ndarray], buckets: int = SKETCH_BUCKETS) -> WeightDigest:
    """The digest of a state dict {name: float32 array}; floating-point tensors only, in name order."""
    sketch = np.zeros(buckets, dtype=np.float64)
    tensors = []
    for name in sorted(state):
        array = np.asarray(state[name])
        if np.issubdtype(array.dtype, np.floating):
            shape = tuple(int(n) for n in array.shape)
            tensors.append(_digest_tensor(sketch, name, canonical_values(array), shape))
    whole = hashlib.sha256("\n".join(f"{t.name} {t.shape} {t.sha256}" for t in tensors).encode()).hexdigest()
    return WeightDigest(whole, tuple(tensors), sketch)


def _check_comparable(a: WeightDigest, b: WeightDigest) -> None:
    if a.layout != b.layout or a.sketch.size != b.sketch.size:
        differ = sorted(set(a.layout) ^ set(b.layout))[:3]
        raise ValueError(
            f"two digests of different weights layouts cannot be compared (tensors {differ}, sketches of "
            f"{a.sketch.size} and {b.sketch.size} buckets): compare checkpoints of one architecture"
        )


def relative_l2(a: WeightDigest, b: WeightDigest) -> float:
    """||a - b|| / sqrt((||a||^2 + ||b||^2) / 2), the distance estimated from the sketches (exactly 0 for equal
    weights); in [0, 2], 1.41 for independent vectors of mean zero and equal norm."""
    _check_comparable(a, b)
    if a.sha256 == b.sha256:
        return 0.0
    scale = (a.sum_of_squares + b.sum_of_squares) / 2
    difference = a.sketch - b.sketch
    return float(np.sqrt(np.dot(difference, difference) / scale)) if scale > 0 else 0.0


def exact_relative_l2(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> float:
    """relative_l2 computed from two state dicts {name: array} of the same names and shapes, exactly."""
    squared = norm_a = norm_b = 0.0
    for name in sorted(a):
        x, y = np.asarray(a[name], np.float64).ravel(), np.asarray(b[name], np.float64).ravel()
        squared += float(np.dot(x - y, x - y))
        norm_a, norm_b = norm_a + float(np.dot(x, x)), norm_b + float(np.dot(y, y))
    scale = (norm_a + norm_b) / 2
    return float(np.sqrt(squared / scale)) if scale > 0 else 0.0


def independent_draw_distance(digest: WeightDigest) -> float:
    """The expected relative_l2 between these weights and an independent draw of each tensor's values from
    the same distribution (mean and variance per tensor): sqrt(2 sum_T n_T var_T / ||w||^2). For step-0
    weights it is the seed-to-seed distance at step 0 that independent initialisations have."""
    spread = sum(tensor.numel * tensor.variance for tensor in digest.tensors)
    norm = digest.sum_of_squares
    return float(np.sqrt(2 * spread / norm)) if norm > 0 else 0.0


def identical_tensors(a: WeightDigest, b: WeightDigest) -> list[str]:
    """The names of the tensors whose values are equal in `a` and `b`."""
    _check_comparable(a, b)
    return [x.name for x, y in zip(a.tensors, b.tensors, strict=True) if x.sha256 == y.sha256]


def digest_to_dict(digest: WeightDigest) -> dict[str, Any]:
    """Plain JSON data (the sketch as base64 of its float64 bytes); `digest_from_dict` reads it back."""
    return {
        "sha256": digest.sha256,
        "tensors": [[t.name, list(t.shape), t.sha256, t.total, t.sum_of_squares] for t in digest.tensors],
        "sketch_float64": base64.b64encode(digest.sketch.astype("<f8").tobytes()).decode("ascii"),
    }


def digest_from_dict(values: Mapping[str, Any]) -> WeightDigest:
    tensors = tuple(
        TensorDigest(str(name), tuple(int(n) for n in shape), str(sha), float(total), float(squares))
        for name, shape, sha, total, squares in values["tensors"]
    )
    sketch = np.frombuffer(base64.b64decode(values["sketch_float64"]), dtype="<f8").astype(np.float64)
    return WeightDigest(str(values["sha256"]), tensors, sketch)
