"""Attention-pattern similarity between heads of refits (paper Eq. 1-2, §3.2-3.3, §A.6): the engine the
workflow runs, from activation caches to pair-similarity files.

Head (l, i) of refit a and head (l', j) of refit b are compared by the cosine of their lower-triangular
(causal, diagonal included) post-softmax patterns on one prompt, averaged over prompts. Each
(head, prompt) segment of the caches' packed `hook_pattern` is scaled to norm 1/sqrt(n_prompts), so
one dot product of two heads' concatenated segments is that mean, and all heads of all refits are
compared at once by one Gram matrix `X @ X.T`. Reference implementations (a plain loop, patterns in
memory) live in tests/helpers/reference.py as oracles; measurements in benchmarks/README.md.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from headstab.activations.h5util import attribute_digest_mismatches, decode_attr, seal
from headstab.activations.reader import check_consistent_shapes, is_filter_failure, open_cache
from headstab.fileio import atomic_path
from headstab.plan.formats import SIMILARITY_FORMAT, SIMILARITY_FORMAT_VERSION
from headstab.plan.layout import writer_rule

__all__ = [
    "SIMILARITY_SCOPES",
    "GramAccumulator",
    "SimilarityChecksumError",
    "SimilarityFileError",
    "gram_to_pair_similarity",
    "finish_result_file",
    "normalize_lower_features",
    "open_result_file",
    "pair_similarity_from_caches",
    "promptset_pattern_shape",
    "read_pair_similarity",
    "read_pair_similarity_null",
    "rebuild_hint",
    "write_pair_similarity",
]

SIMILARITY_SCOPES = ("cross_layer", "same_layer")
# Diagonal blocks of the symmetric product recurse until they have fewer than 2 * GRAM_BLOCK_ROWS rows:
# smaller blocks lose GEMM speed, larger ones compute more of the mirrored half.
GRAM_BLOCK_ROWS = 200


def _symmetric_product(x):  # torch [row, feature] -> [row, row], exactly symmetric
    n_rows = x.shape[0]
    if n_rows < 2 * GRAM_BLOCK_ROWS:
        leaf = x @ x.T
        return (leaf + leaf.T) * 0.5  # one GEMM's diagonal block need not be bit-symmetric
    half = n_rows // 2
    out = x.new_empty((n_rows, n_rows))
    out[:half, :half] = _symmetric_product(x[:half])
    out[half:, half:] = _symmetric_product(x[half:])
    corner = x[:half] @ x[half:].T
    out[:half, half:] = corner
    out[half:, :half] = corner.T
    return out


class GramAccumulator:
    """Running symmetric Gram matrix, the sum over chunks of `chunk @ chunk.T` ([row, feature] chunks
    of the same rows): float32 products through torch (its GEMM outran numpy's syrk here), halved
    recursively so mirrored blocks are computed once, summed in float64 so the error does not grow
    with the number of chunks."""

    def __init__(self, n_rows: int) -> None:
        self.gram = np.zeros((n_rows, n_rows), dtype=np.float64)
        self.n_chunks = 0

    def add(self, chunk: np.ndarray) -> None:
        import torch

        chunk = np.ascontiguousarray(chunk, dtype=np.float32)
        if chunk.ndim != 2 or chunk.shape[0] != self.gram.shape[0]:
            raise ValueError(f"chunk must be [{self.gram.shape[0]}, feature]; got shape {chunk.shape}")
        self.gram += _symmetric_product(torch.from_numpy(chunk)).numpy()
        self.n_chunks += 1


def gram_to_pair_similarity(gram: np.ndarray, n_seeds: int, n_layers: int, n_heads: int) -> np.ndarray:
    """[seed * layer * head]^2 Gram (rows ordered seed, layer, head) -> float32 S [seed_a, seed_b, layer_a,
    head_a, layer_b, head_b] (Eq. 2)."""
    n_rows = n_seeds * n_layers * n_heads
    if gram.shape != (n_rows, n_rows):
        raise ValueError(
            f"gram must be [{n_rows}, {n_rows}] for {n_seeds} seeds x {n_layers} layers x {n_heads} heads; "
            f"got shape {gram.shape}"
        )
    blocks = gram.reshape(n_seeds, n_layers, n_heads, n_seeds, n_layers, n_heads)
    return np.ascontiguousarray(blocks.transpose(0, 3, 1, 2, 4, 5), dtype=np.float32)


def normalize_lower_features(features: np.ndarray, offsets: np.ndarray, n_prompts_total: int) -> np.ndarray:
    """Scale packed lower triangles in place so dot products give the mean-over-prompts cosine (Eq. 1-2).

    features: C-contiguous float32 [row, entry], each row one head's packed triangles of consecutive
        prompts (the caches' `hook_pattern` layout); offsets: [k + 1] where each of the k prompts
        starts, relative to column 0 (offsets[-1] == entries).
    Each (row, prompt) segment gets norm 1/sqrt(n_prompts_total); an all-zero segment stays zero.
    Returns `features`.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    if features.ndim != 2 or features.dtype != np.float32 or not features.flags.c_contiguous:
        raise ValueError(
            f"features must be a C-contiguous float32 [row, entry] array; got {features.dtype} {features.shape}"
        )
    if (
        offsets.ndim != 1
        or offsets.size < 1
        or offsets[0] != 0
        or offsets[-1] != features.shape[1]
        or np.any(np.diff(offsets) < 0)
    ):
        raise ValueError(
            f"offsets must rise from 0 to the number of entries ({features.shape[1]}); got {offsets[:3]}...{offsets[-2:]}"
        )
    if n_prompts_total < offsets.size - 1:
        raise ValueError(
            f"n_prompts_total ({n_prompts_total}) must be >= the number of prompts here ({offsets.size - 1})"
        )
    root = np.sqrt(float(n_prompts_total))
    for start, stop in zip(offsets[:-1], offsets[1:]):
        segment = features[:, start:stop]
        # float32 BLAS dot products: within a few ulps of float64 norms at a tenth of the cost.
        norms = np.sqrt(np.vecdot(segment, segment), dtype=np.float64)
        scale = np.divide(1.0, norms * root, out=np.zeros_like(norms), where=norms > 0)
        segment *= scale[:, None].astype(np.float32)
    return features


def _units(scope: str, n_layers: int, n_prompts: int, prompt_chunk: int) -> list[tuple[int | None, slice]]:
    """The blocks read at once: (a layer, all prompts) for same_layer; (all layers, prompt_chunk
    consecutive prompts) for cross_layer."""
    if scope == "same_layer":
        return [(layer, slice(0, n_prompts)) for layer in range(n_layers)]
    return [(None, slice(start, min(start + prompt_chunk, n_prompts))) for start in range(0, n_prompts, prompt_chunk)]


def promptset_pattern_shape(cache_paths: Sequence[str | Path], promptset: str) -> tuple[int, int, int]:
    """(refits, layers, heads) of `promptset`'s attention patterns in caches that agree on their shapes;
    KeyError naming the prompt sets the caches hold when `promptset` is not one of them."""
    shapes = check_consistent_shapes(cache_paths)
    if promptset not in shapes:
        raise KeyError(f"prompt set '{promptset}' is not in the caches ({', '.join(shapes)})")
    n_layers, n_heads = shapes[promptset]["hook_pattern"][:2]
    return len(cache_paths), n_layers, n_heads


def pair_similarity_from_caches(
    cache_paths: Sequence[str | Path],
    promptset: str,
    prompt_chunk: int = 10,
    progress: bool = True,
    scope: str = "cross_layer",
) -> np.ndarray:
    """The pair-similarity tensor (Eq. 2) of one architecture's refits, streamed from their caches.

    cache_paths: one activation cache per refit, in seed order (checked for matching shapes). A block
    of packed patterns is read straight into the feature matrix (every read verifies the checksums)
    and normalised; no padding, no gather.
    scope "cross_layer": all layers at once, `prompt_chunk` consecutive prompts of every refit at a
        time (memory: one such block); float32 S [seed_a, seed_b, layer_a, head_a, layer_b, head_b]
        (§3.3; its same-layer blocks serve §3.2).
    scope "same_layer": one layer at a time, all prompts (memory: one layer's patterns of all refits);
        n_layers times less work; float32 S [seed_a, seed_b, layer, head_a, head_b].
    A corrupt cache raises CacheError naming the file, the dataset and the rebuild command.
    """
    from tqdm.auto import tqdm

    if prompt_chunk < 1:
        raise ValueError(f"prompt_chunk must be >= 1, got {prompt_chunk}")
    if scope not in SIMILARITY_SCOPES:
        raise ValueError(f"scope must be one of {list(SIMILARITY_SCOPES)}; got {scope!r}")
    n_seeds, n_layers, n_heads = promptset_pattern_shape(cache_paths, promptset)
    readers = [open_cache(path) for path in cache_paths]
    try:
        offsets = readers[0].pattern_offsets(promptset)
        n_prompts = offsets.size - 1
        if n_prompts == 0:
            raise ValueError(
                f"prompt set '{promptset}' of {cache_paths[0]} has no prompts; there is nothing to compare"
            )
        units = _units(scope, n_layers, n_prompts, prompt_chunk)
        refit_shape = (n_heads,) if scope == "same_layer" else (n_layers, n_heads)
        rows = int(np.prod(refit_shape))
        widest = max(int(offsets[prompts.stop] - offsets[prompts.start]) for _, prompts in units)
        buffer = np.empty(n_seeds * rows * widest, dtype=np.float32)  # reused: fresh pages cost time
        grams, accumulator = [], GramAccumulator(n_seeds * rows)
        for layer, prompts in tqdm(units, desc=f"similarity {promptset} ({scope})", unit="block", disable=not progress):
            width = int(offsets[prompts.stop] - offsets[prompts.start])
            block = buffer[: n_seeds * rows * width].reshape(n_seeds * rows, width)
            for refit, reader in enumerate(readers):
                part = block[refit * rows : (refit + 1) * rows]
                reader.hook_pattern_lower(
                    promptset, layer=layer, prompts=prompts, out=part.reshape(*refit_shape, width)
                )
                normalize_lower_features(
                    part, offsets[prompts.start : prompts.stop + 1] - offsets[prompts.start], n_prompts
                )
            accumulator.add(block)
            if scope == "same_layer":
                grams.append(accumulator.gram)
                accumulator = GramAccumulator(n_seeds * rows)
    finally:
        for reader in readers:
            reader.close()
    if scope == "cross_layer":
        return gram_to_pair_similarity(accumulator.gram, n_seeds, n_layers, n_heads)
    out = np.empty((n_seeds, n_seeds, n_layers, n_heads, n_heads), dtype=np.float32)
    for layer, gram in enumerate(grams):
        out[:, :, layer] = gram.reshape(n_seeds, n_heads, n_seeds, n_heads).transpose(0, 2, 1, 3)
    return out


# ---------------------------------------------------------------- pair-similarity files
class SimilarityFileError(ValueError):
    """A pair-similarity file is missing, incomplete, corrupt or not ours; the message names it and the fix."""


class SimilarityChecksumError(SimilarityFileError):
    """A pair-similarity file's data fails its fletcher32 checksum: the file is corrupt."""


def rebuild_hint(path: Path, rule: str = "pair_similarity") -> str:
    """How to rebuild the result file `path`: remove it and ask for it again, or force the rule that writes
    such a path (headstab.plan.layout.writer_rule; `rule` where the path does not say)."""
    quoted = shlex.quote(str(path))
    rule = writer_rule(path) or rule
    return f"rebuild it with `rm -f {quoted} && snakemake {quoted}` (or `snakemake {quoted} --forcerun {rule}`)"


def finish_result_file(handle, file_format: str, version: int, seeds: Sequence[int], attrs: dict | None) -> None:
    """Label an HDF5 result file being written (h5py handle): its seeds, format and version, the job's attrs
    (JSON unless a scalar), the digest of every attribute, and last `complete`, which readers require
    (`open_result_file`)."""
    handle.attrs["seeds"] = np.asarray(seeds, dtype=np.int64)
    handle.attrs["format"] = file_format
    handle.attrs["format_version"] = version
    for key, value in (attrs or {}).items():
        handle.attrs[key] = value if isinstance(value, (int, float, str)) else json.dumps(value, default=str)
    seal(handle)


def open_result_file(
    path: Path,
    file_format: str,
    version: int,
    required: Sequence[str],
    what: str,
    error: type[Exception],
    rule: str = "pair_similarity",
):
    """An open h5py handle on the result file `path` that `finish_result_file` completed, with the datasets
    `required`; raises `error` naming the file (described as `what`) and the command that rebuilds it
    with the rule of its path (`rule` where the path does not say) when it is missing, unreadable, not of `file_format` and
    `version`, incomplete, or an attribute fails its digest."""
    import h5py

    if not path.is_file():
        raise error(f"{what} file {path} does not exist; build it with `snakemake {shlex.quote(str(path))}`")
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise error(f"{what} file {path} is not a readable HDF5 file ({err}); {rebuild_hint(path, rule)}") from err
    problem = None
    if handle.attrs.get("format") != file_format or any(name not in handle for name in required):
        problem = f"{path} is not a headstab {what} file"
    elif (found := decode_attr(handle.attrs.get("format_version"))) != version:
        problem = f"{what} file {path} has format_version {found!r}; this code reads version {version}"
    elif not bool(handle.attrs.get("complete", False)):
        problem = f"{what} file {path} is incomplete (interrupted write)"
    elif mismatches := attribute_digest_mismatches(handle):
        problem = (
            f"{what} file {path}: {', '.join(mismatches)} fails the digest in attribute attrs_sha256 (changed "
            "after the file was written)"
        )
    if problem is not None:
        handle.close()
        raise error(f"{problem}; {rebuild_hint(path, rule)}")
    return handle


def write_pair_similarity(
    path: str | Path,
    similarity: np.ndarray,
    seeds: Sequence[int],
    attrs: dict | None = None,
    null: np.ndarray | None = None,
    partners: np.ndarray | None = None,
) -> None:
    """Write S [seed_a, seed_b, layer_a, head_a, layer_b, head_b] as dataset `pair_similarity`
    (attribute `seeds`, a fletcher32 checksum per chunk), through a temporary file and a rename; with null, the
    same tensor under the prompt-permutation null (`headstab.similarity.null_pairs`) as `pair_similarity_null`
    and its prompt pairing `partners` [prompt]."""
    import h5py

    path = Path(path)
    if similarity.ndim != 6 or similarity.shape[:2] != (len(seeds), len(seeds)):
        raise ValueError(
            f"similarity must be [seed, seed, layer, head, layer, head] for {len(seeds)} seeds; got {similarity.shape}"
        )
    if null is not None and (null.shape != similarity.shape or partners is None):
        raise ValueError(
            f"the null must come with its partners and have the shape {similarity.shape}; got {null.shape}"
        )
    tensors = {"pair_similarity": similarity, **({} if null is None else {"pair_similarity_null": null})}
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as handle:
        n_seeds, _, n_layers, n_heads = similarity.shape[:4]
        for name, values in tensors.items():
            handle.create_dataset(
                name,
                data=values.astype(np.float32),
                chunks=(1, n_seeds, n_layers, n_heads, n_layers, n_heads),
                fletcher32=True,
            )
            handle[name].attrs["dims"] = "seed_a,seed_b,layer_a,head_a,layer_b,head_b"
        if null is not None:
            handle.create_dataset("partners", data=np.asarray(partners, dtype=np.int64), fletcher32=True)
        finish_result_file(handle, SIMILARITY_FORMAT, SIMILARITY_FORMAT_VERSION, seeds, attrs)


def _read_tensor(handle, name: str, path: Path) -> np.ndarray:
    """One dataset of an open pair-similarity file, a checksum failure or read error naming the file."""
    try:
        return handle[name][()]
    except OSError as err:
        if is_filter_failure(err):
            raise SimilarityChecksumError(
                f"pair-similarity file {path} is corrupt (checksum mismatch; HDF5: {err}); {rebuild_hint(path)}"
            ) from err
        raise SimilarityFileError(f"pair-similarity file {path} is damaged ({err}); {rebuild_hint(path)}") from err


def _open_pair_similarity(path: Path):
    return open_result_file(
        path, SIMILARITY_FORMAT, SIMILARITY_FORMAT_VERSION, ["pair_similarity"], "pair-similarity", SimilarityFileError
    )


def read_pair_similarity(path: str | Path) -> tuple[np.ndarray, list[int]]:
    """Read (S, seeds) from a pair-similarity file, failing with the file's name and the rebuild command."""
    path = Path(path)
    with _open_pair_similarity(path) as handle:
        seeds = [int(s) for s in handle.attrs["seeds"]]
        similarity = _read_tensor(handle, "pair_similarity", path)
    if similarity.shape[:2] != (len(seeds), len(seeds)):
        raise SimilarityFileError(
            f"pair-similarity file {path}: shape {similarity.shape} does not match seeds {seeds}; {rebuild_hint(path)}"
        )
    return similarity, seeds


def read_pair_similarity_null(path: str | Path) -> tuple[np.ndarray, np.ndarray] | None:
    """Read (S0, partners) of a pair-similarity file (`write_pair_similarity`'s null), or None when the file holds
    no null (a prompt set it is not computed for); fails with the file's name and the rebuild command."""
    path = Path(path)
    with _open_pair_similarity(path) as handle:
        if "pair_similarity_null" not in handle:
            return None
        shape = handle["pair_similarity"].shape
        null, partners = _read_tensor(handle, "pair_similarity_null", path), _read_tensor(handle, "partners", path)
    if null.shape != shape:
        raise SimilarityFileError(
            f"pair-similarity file {path}: the null's shape {null.shape} is not the tensor's {shape}; {rebuild_hint(path)}"
        )
    return null, partners
