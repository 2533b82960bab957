"""The validated reader: slices, packed patterns read into place, residual hooks, checksums, and what
it says about a missing, truncated, foreign, incomplete, older or inconsistent file."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from helpers.reference import pack_lower_triangle

from activations.conftest import D_MODEL, N_HEADS, N_LAYERS, edited_copy, make_model
from headstab.activations.reader import (
    CacheChecksumError,
    CacheError,
    check_consistent_shapes,
    open_cache,
    rebuild_command,
)
from headstab.activations.writer import CacheOptions, write_activation_cache
from headstab.similarity.pairs import pair_similarity_from_caches


def test_one_layer_read_alone_equals_slice_of_full_read(cache_path):
    with open_cache(cache_path) as cache:
        readers = {
            "hook_pattern": cache.hook_pattern,
            "hook_z": cache.hook_z,
            "hook_resid_mid": lambda *args, **kw: cache.resid(args[0], "hook_resid_mid", *args[1:], **kw),
        }
        for read in readers.values():
            full = read("primary")
            np.testing.assert_array_equal(read("primary", layer=1), full[1])
            np.testing.assert_array_equal(read("primary", layer=0, prompts=slice(2, 5)), full[0, 2:5])
        assert (cache.n_layers, cache.n_heads) == (N_LAYERS, N_HEADS)
        with pytest.raises(IndexError, match="layer 5"):
            cache.hook_pattern("primary", layer=5)
        with pytest.raises(IndexError, match="layer 2"):
            cache.hook_z("primary", layer=2)
        with pytest.raises(KeyError, match="no prompt set 'nope'"):
            cache.lengths("nope")


def test_packed_pattern_round_trip_slices_and_reading_into_place(cache_path):
    with open_cache(cache_path) as cache:
        lengths, offsets = cache.lengths("primary"), cache.pattern_offsets("primary")
        full = cache.hook_pattern("primary")  # [layer, prompt, head, q, k]
        packed = cache.hook_pattern_lower("primary")
        for prompt, n in enumerate(lengths):
            np.testing.assert_array_equal(
                packed[..., offsets[prompt] : offsets[prompt + 1]], pack_lower_triangle(full[:, prompt], int(n))
            )
        # A layer and a contiguous prompt range, read into a given array.
        out = np.full((N_HEADS, offsets[5] - offsets[2]), np.nan, dtype=np.float32)
        assert cache.hook_pattern_lower("primary", layer=1, prompts=slice(2, 5), out=out) is out
        np.testing.assert_array_equal(out, packed[1, :, offsets[2] : offsets[5]])
        np.testing.assert_array_equal(cache.hook_pattern("primary", layer=1, prompts=[4, 0]), full[1, [4, 0]])
        with pytest.raises(ValueError, match="contiguous slice of prompts"):
            cache.hook_pattern_lower("primary", prompts=slice(0, 5, 2))
        with pytest.raises(ValueError, match=r"out must be a C-contiguous float32 array of shape \(4, "):
            cache.hook_pattern_lower("primary", layer=0, out=np.zeros((N_HEADS, 3), dtype=np.float32))


def test_packed_patterns_read_into_place_in_float32_and_float16(tmp_path, cache_path, model, token_sets):
    with open_cache(cache_path) as cache:
        offsets = cache.pattern_offsets("primary")
        expected = cache.hook_pattern_lower("primary", layer=1)
        out = np.empty((N_HEADS, int(offsets[-1])), dtype=np.float32)
        np.testing.assert_array_equal(cache.hook_pattern_lower("primary", layer=1, out=out), expected)
    half_path = write_activation_cache(
        tmp_path / "half.h5",
        model,
        token_sets,
        pad_token_id=0,
        options=CacheOptions(dtype="float16", show_progress=False),
    )
    with open_cache(half_path) as half:
        out = np.empty((N_LAYERS, N_HEADS, int(offsets[-1])), dtype=np.float32)
        # float16 keeps 11 significant bits and patterns lie in [0, 1]: absolute error <= 2^-11
        np.testing.assert_allclose(half.hook_pattern_lower("primary", out=out)[1], expected, atol=2.0**-11, rtol=0)
        pattern = half.hook_pattern("primary", prompts=slice(1, 3))
        assert pattern.flags.c_contiguous and pattern.shape == (N_LAYERS, 2, N_HEADS, 12, 12)


def test_resid_hook_missing_from_the_cache_names_file_dataset_and_cka_hook(cache_path):
    with open_cache(cache_path) as cache:
        assert cache.attrs["extra_resid_hooks"] == [] and cache.resid_hooks() == ["hook_resid_mid"]
        assert cache.resid("primary", "hook_resid_mid", layer=0).shape == (7, 12, D_MODEL)
        for hook in ("hook_resid_pre", "hook_resid_post"):
            with pytest.raises(CacheError) as error:
                cache.resid("primary", hook)
            message = str(error.value)
            assert str(cache_path) in message and f"/primary/{hook}" in message
            assert f"analysis.cka_hook: {hook}" in message
            assert f"snakemake {cache_path} --forcerun cache_activations" in message
        with pytest.raises(ValueError, match="hook_resid_final.*analysis.cka_hook"):
            cache.resid("primary", "hook_resid_final")


def test_promised_or_misshapen_resid_pre_is_rejected(tmp_path, resid_pre_cache_path):
    def drop(handle):
        del handle["len5/hook_resid_pre"]

    def misshape(handle):
        drop(handle)
        handle["len5"].create_dataset("hook_resid_pre", data=np.zeros((N_LAYERS, 3, 4, D_MODEL), dtype=np.float32))

    gutted = edited_copy(resid_pre_cache_path, tmp_path / "gutted.h5", drop)
    with pytest.raises(
        CacheError,
        match=rf"{gutted} lacks the datasets /len5/hook_resid_pre.*snakemake {gutted} --forcerun cache_activations",
    ):
        open_cache(gutted)
    misshapen = edited_copy(resid_pre_cache_path, tmp_path / "misshapen.h5", misshape)
    with pytest.raises(CacheError, match=r"/len5/hook_resid_pre of shape \(2, 3, 4, 32\), expected \(2, 3, 5, 32\)"):
        open_cache(misshapen)


def test_missing_file_names_file_and_build_command(tmp_path):
    path = tmp_path / "results" / "tiny" / "caches" / "seed9.h5"
    with pytest.raises(CacheError, match=rf"{path} does not exist.*snakemake {path}"):
        open_cache(path)


def test_truncated_file_names_file_and_rebuild_command(tmp_path, cache_path):
    truncated = tmp_path / "seed1.h5"
    data = cache_path.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        CacheError,
        match=rf"{truncated} is not a readable HDF5 file.*snakemake {truncated} --forcerun cache_activations",
    ):
        open_cache(truncated)


def test_foreign_hdf5_names_file_and_rebuild_command(tmp_path):
    foreign = tmp_path / "seed3.h5"
    with h5py.File(foreign, "w") as handle:
        handle.create_dataset("activations", data=np.zeros((2, 3)))
    with pytest.raises(CacheError, match=rf"{foreign} is not a headstab activation cache.*snakemake {foreign}"):
        open_cache(foreign)


def test_incomplete_or_gutted_cache_is_rejected(tmp_path, cache_path):
    incomplete = edited_copy(
        cache_path, tmp_path / "incomplete.h5", lambda handle: handle.attrs.modify("complete", False)
    )
    with pytest.raises(CacheError, match="incomplete.*--forcerun cache_activations"):
        open_cache(incomplete)
    gutted = edited_copy(cache_path, tmp_path / "gutted.h5", lambda handle: handle["len5"].pop("hook_z"))
    with pytest.raises(CacheError, match=r"lacks the datasets /len5/hook_z"):
        open_cache(gutted)


def test_offsets_that_disagree_with_lengths_are_rejected(tmp_path, cache_path):
    def shift(handle):
        handle["primary/pattern_offsets"][1] += 1

    broken = edited_copy(cache_path, tmp_path / "broken.h5", shift)
    with pytest.raises(CacheError, match=rf"{broken} has /primary/pattern_offsets that do not match its lengths"):
        open_cache(broken)


def test_consistent_caches_pass_and_mismatched_shapes_name_both_files(tmp_path, cache_path, token_sets):
    other_seed = tmp_path / "seed2.h5"
    write_activation_cache(
        other_seed,
        make_model(seed=2),
        token_sets,
        pad_token_id=0,
        options=CacheOptions(batch_size=3, show_progress=False),
    )
    shapes = check_consistent_shapes([cache_path, other_seed])
    n_lower = sum(len(ids) * (len(ids) + 1) // 2 for ids in token_sets["primary"])
    assert shapes["primary"]["hook_pattern"] == (N_LAYERS, N_HEADS, n_lower)
    assert shapes["primary"]["tokens"] == (7, 12)
    wider = tmp_path / "seed3.h5"
    write_activation_cache(
        wider, make_model(n_heads=2), token_sets, pad_token_id=0, options=CacheOptions(show_progress=False)
    )
    with pytest.raises(CacheError, match=rf"{cache_path} and {wider} disagree on /primary/hook_pattern"):
        check_consistent_shapes([cache_path, wider])
    fewer = tmp_path / "seed4.h5"
    write_activation_cache(
        fewer,
        make_model(),
        {"primary": token_sets["primary"][:5], "len5": token_sets["len5"]},
        pad_token_id=0,
        options=CacheOptions(show_progress=False),
    )
    with pytest.raises(CacheError, match=rf"{cache_path} and {fewer} disagree on /primary/tokens"):
        check_consistent_shapes([cache_path, fewer])


def _bytes_read() -> int:
    """Bytes this process has read through read(2)/pread(2), page cache included (Linux)."""
    return int(re.search(r"^rchar: (\d+)", Path("/proc/self/io").read_text(), re.M).group(1))


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io")
def test_consecutive_prompt_ranges_read_each_pattern_chunk_once(tmp_path, model, token_sets, monkeypatch):
    import headstab.activations.writer as writer

    monkeypatch.setattr(writer, "PATTERN_CHUNK_BYTES", N_HEADS * 4 * 37)
    path = write_activation_cache(
        tmp_path / "small_chunks.h5", model, token_sets, pad_token_id=0, options=CacheOptions(show_progress=False)
    )
    with open_cache(path) as cache, h5py.File(path) as handle:
        stored = handle["primary/hook_pattern"].id.get_storage_size()
        cache.hook_pattern_lower("primary", prompts=slice(0, 1))  # B-tree and first chunks: not what is measured
        before = _bytes_read()
        for prompt in range(1, 7):  # one prompt at a time: every chunk is touched by several reads
            cache.hook_pattern_lower("primary", prompts=slice(prompt, prompt + 1))
        assert _bytes_read() - before <= stored  # with a too small chunk cache: about 3x


def flip_byte_in_chunk(path: Path, dataset: str, coord: tuple[int, ...]) -> None:
    """Flip one bit of the byte in the middle of the stored chunk of `dataset` at `coord` (before its 4-byte checksum)."""
    with h5py.File(path) as handle:
        info = handle[dataset].id.get_chunk_info_by_coord(coord)
    offset = info.byte_offset + (info.size - 4) // 2
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([byte ^ 0x10]))


CORRUPTIBLE = [
    ("hook_pattern", (1, 0, 0), lambda cache: cache.hook_pattern_lower("primary", layer=1)),
    (
        "hook_resid_mid",
        (0, 2, 0, 0),
        lambda cache: cache.resid("primary", "hook_resid_mid", layer=0, prompts=slice(2, 3)),
    ),  # gzip
]


@pytest.mark.parametrize(("dataset", "coord", "read"), CORRUPTIBLE, ids=[c[0] for c in CORRUPTIBLE])
def test_a_flipped_byte_fails_the_checksum_naming_file_dataset_and_rebuild(tmp_path, cache_path, dataset, coord, read):
    damaged = tmp_path / "seed1.h5"
    shutil.copyfile(cache_path, damaged)
    with open_cache(damaged) as cache:
        read(cache)  # the same read succeeds before the flip
    flip_byte_in_chunk(damaged, f"primary/{dataset}", coord)
    with open_cache(damaged) as cache:
        with pytest.raises(CacheChecksumError) as error:
            read(cache)
        with pytest.raises(CacheChecksumError, match=f"/primary/{dataset} is corrupt"):
            cache.verify()
    message = str(error.value)
    assert f"activation cache {damaged}: dataset /primary/{dataset} is corrupt (checksum mismatch" in message
    assert f"`{rebuild_command(damaged)}`" in message
    if dataset == "hook_pattern":  # what the similarity stage reads
        with pytest.raises(CacheChecksumError, match=rf"{damaged}: dataset /primary/hook_pattern is corrupt"):
            pair_similarity_from_caches([cache_path, damaged], "primary", progress=False)


def test_without_checksums_a_flipped_byte_goes_unnoticed(tmp_path, model, token_sets):
    # What the checksums prevent: the same flip in a file written without fletcher32 silently changes one value.
    path = write_activation_cache(
        tmp_path / "seed1.h5",
        model,
        token_sets,
        pad_token_id=0,
        options=CacheOptions(checksum=False, show_progress=False),
    )
    with open_cache(path) as cache:
        assert cache.attrs["checksum"] == "none"
        before = cache.hook_pattern_lower("primary", layer=1)
    with h5py.File(path) as handle:
        assert not handle["primary/hook_pattern"].fletcher32
    flip_byte_in_chunk(path, "primary/hook_pattern", (1, 0, 0))
    with open_cache(path) as cache:
        after = cache.hook_pattern_lower("primary", layer=1)
        cache.verify()
    assert np.count_nonzero(after != before) == 1


def test_verify_reads_a_sound_cache_without_complaint(cache_path, resid_pre_cache_path):
    for path in (cache_path, resid_pre_cache_path):
        with open_cache(path) as cache:
            cache.verify()


@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda handle: handle.attrs.modify("seed", 3), "attribute seed"),
        (
            lambda handle: handle["primary"].attrs.modify("prompt_file_sha256", "cd" * 32),
            "attribute prompt_file_sha256 of /primary",
        ),
        (
            lambda handle: handle["primary/hook_pattern"].attrs.modify("dims", "layer"),
            "attribute dims of /primary/hook_pattern",
        ),
        (lambda handle: handle.attrs.__delitem__("attrs_sha256"), "attribute attrs_sha256 (missing)"),
    ],
)
def test_an_attribute_changed_after_writing_fails_its_digest_naming_file_attribute_and_rule(
    tmp_path, cache_path, edit, named
):
    for where, rule in (
        ("l2_h4/caches", "cache_activations"),
        ("l2_h4/snapshots/step0/caches", "cache_snapshot_activations"),
    ):
        (tmp_path / where).mkdir(parents=True, exist_ok=True)
        damaged = edited_copy(cache_path, tmp_path / where / "seed1.h5", edit, restamp=False)
        with pytest.raises(CacheError) as error:
            open_cache(damaged)
        assert str(error.value) == (
            f"activation cache {damaged} has {named} failing the digest in attribute attrs_sha256 (changed after the "
            f"file was written); rebuild it with `{rebuild_command(damaged)}` (rule {rule}; with the "
            "--configfile/--profile of the run that made it)"
        )


def test_an_older_format_cache_is_rejected_with_the_rebuild_command(tmp_path, cache_path):
    old = edited_copy(cache_path, tmp_path / "old.h5", lambda handle: handle.attrs.modify("format_version", 3))
    with pytest.raises(CacheError) as error:
        open_cache(old)
    message = str(error.value)
    assert f"activation cache {old} has format_version 3; this code reads version 5" in message
    assert f"`{rebuild_command(old)}`" in message


def commands_in(message: str) -> list[list[list[str]]]:
    """Each backquoted command of a message as shell words, split into its `&&`-joined parts."""
    commands = []
    for command in re.findall(r"`([^`]*)`", message):
        parts, words = [[]], shlex.split(command)
        for word in words:
            parts.append([]) if word == "&&" else parts[-1].append(word)
        commands.append(parts)
    return commands


def test_printed_commands_quote_paths_with_spaces(tmp_path, cache_path):
    directory = tmp_path / "results dir" / "l2 h4; echo" / "caches"
    directory.mkdir(parents=True)
    truncated = directory / "seed 1.h5"
    truncated.write_bytes(cache_path.read_bytes()[:1000])
    with pytest.raises(CacheError) as error:
        open_cache(truncated)
    assert commands_in(str(error.value))[0] == [["snakemake", str(truncated), "--forcerun", "cache_activations"]]
    with pytest.raises(CacheError) as error:
        open_cache(directory / "missing.h5")
    assert commands_in(str(error.value)) == [[["snakemake", str(directory / "missing.h5")]]]
    sound = directory / "seed 2.h5"
    shutil.copyfile(cache_path, sound)
    with open_cache(sound) as cache, pytest.raises(CacheError) as error:
        cache.resid("primary", "hook_resid_pre")
    assert commands_in(str(error.value)) == [[["snakemake", str(sound), "--forcerun", "cache_activations"]]]
