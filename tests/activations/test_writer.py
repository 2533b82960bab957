"""Writing a cache: the HDF5 contract (format 4), exact values on real tokens, zero padding, float16,
optional residual hooks, attention-only models, and no file left by a failed write."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch
from helpers.tolerances import reduction_atol

from activations.conftest import D_HEAD, D_MODEL, N_CTX, N_HEADS, N_LAYERS, forward_atol, make_model
from activations.test_capture import single_prompt_activations
from headstab.activations.reader import check_consistent_shapes, open_cache
from headstab.activations.writer import PATTERN_CHUNK_BYTES, POSITION_CHUNK, CacheOptions, write_activation_cache
from headstab.fileio import temporary_path
from headstab.plan.formats import CACHE_FORMAT_VERSION

PER_TOKEN = ("hook_z", "hook_resid_mid")


def read_all(cache, promptset="primary"):
    return {
        "hook_pattern": cache.hook_pattern(promptset),
        "hook_z": cache.hook_z(promptset),
        "hook_resid_mid": cache.resid(promptset, "hook_resid_mid"),
    }


def test_contract_shapes_dtypes_and_attributes(cache_path, token_sets):
    with open_cache(cache_path) as cache:
        assert cache.prompt_sets() == ["primary", "len5"]
        assert cache.attrs["architecture"] == "tiny" and cache.attrs["seed"] == 1
        assert cache.attrs["packages"] == {"h5py": h5py.__version__}
        assert cache.attrs["complete"] is True and cache.attrs["cache_dtype"] == "float32"
        assert cache.group_attrs("primary")["prompt_file_sha256"] == "ab" * 32
        assert cache.prompts("len5") == ["a b", "c d", "ünï"]
        lengths = [len(ids) for ids in token_sets["primary"]]
        assert cache.lengths("primary").tolist() == lengths
        tokens = cache.tokens("primary")
        assert tokens.dtype == np.int32 and tokens.shape == (7, 12)
        for row, ids in enumerate(token_sets["primary"]):
            assert tokens[row, : len(ids)].tolist() == ids and (tokens[row, len(ids) :] == 0).all()
    with h5py.File(cache_path) as handle:
        group = handle["primary"]
        assert sorted(group) == [
            "hook_pattern",
            "hook_resid_mid",
            "hook_z",
            "lengths",
            "pattern_offsets",
            "prompts",
            "tokens",
        ]
        n_lower = sum(n * (n + 1) // 2 for n in lengths)  # packed lower triangles, prompts in file order
        assert group["hook_pattern"].shape == (N_LAYERS, N_HEADS, n_lower)
        assert (
            group["pattern_offsets"][()].tolist()
            == np.concatenate([[0], np.cumsum([n * (n + 1) // 2 for n in lengths])]).tolist()
        )
        assert group["hook_pattern"].dtype == np.float32 and group["hook_pattern"].compression is None
        assert group["hook_resid_mid"].shape == (N_LAYERS, 7, 12, D_MODEL)
        assert group["hook_z"].shape == (N_LAYERS, 7, 12, N_HEADS, D_HEAD)
        for key in PER_TOKEN:
            assert group[key].dtype == np.float32
            assert group[key].chunks[:3] == (1, 1, min(12, POSITION_CHUNK))  # one layer of one prompt per chunk
            assert group[key].compression == "gzip" and group[key].shuffle
        assert group["lengths"].dtype == np.int32
        assert group["hook_pattern"].attrs["hook"] == "blocks.{layer}.attn.hook_pattern"
        assert group["hook_z"].attrs["hook"] == "blocks.{layer}.attn.hook_z"
        assert group["hook_resid_mid"].attrs["hook"] == "blocks.{layer}.hook_resid_mid"
        assert group["hook_resid_mid"].attrs["dims"] == "layer,prompt,pos,d_model"
        for key in group:  # every dataset carries a checksum (which needs chunks), prompts as fixed-width bytes
            assert group[key].fletcher32 and group[key].chunks is not None, key
        assert group["prompts"].dtype.kind == "S"
        # A chunk is PATTERN_CHUNK_BYTES of all heads of one layer; this tiny set fits in one.
        assert group["hook_pattern"].chunks == (1, N_HEADS, min(n_lower, PATTERN_CHUNK_BYTES // (N_HEADS * 4)))
        assert handle.attrs["checksum"] == "fletcher32" and handle.attrs["format_version"] == CACHE_FORMAT_VERSION == 5
        assert handle.attrs["resid_hook"] == "hook_resid_mid"


def test_everything_outside_real_tokens_is_exactly_zero(cache_path):
    with open_cache(cache_path) as cache:
        lengths = cache.lengths("primary")
        stored = read_all(cache)
    pattern, resid, hook_z = stored["hook_pattern"], stored["hook_resid_mid"], stored["hook_z"]
    for row, n in enumerate(lengths):
        block = pattern[:, row]
        assert (block[:, :, n:, :] == 0.0).all() and (block[:, :, :, n:] == 0.0).all()
        assert (resid[:, row, n:] == 0.0).all() and (hook_z[:, row, n:] == 0.0).all()
        # real queries: causal rows of a softmax sum to one
        np.testing.assert_allclose(block[:, :, :n, :n].sum(-1), 1.0, atol=reduction_atol(np.float32, int(n)))
        assert (np.triu(block[:, :, :n, :n], k=1) == 0.0).all()
        assert np.abs(resid[:, row, :n]).min(axis=-1).max() > 0


def test_padding_is_not_stored(tmp_path, model):
    # 40 positions: a 3-token prompt's chunks beyond its first POSITION_CHUNK positions are never written.
    tokens = {"primary": [[1] * 40, [1, 2, 3]]}
    big = make_model(n_ctx=64)
    path = write_activation_cache(
        tmp_path / "seed1.h5", big, tokens, pad_token_id=0, options=CacheOptions(show_progress=False)
    )
    with h5py.File(path) as handle:
        dataset = handle["primary/hook_z"]
        assert dataset.chunks[2] == POSITION_CHUNK and dataset.id.get_num_chunks() == N_LAYERS * (2 + 1)
    with open_cache(path) as cache:
        assert (cache.hook_z("primary")[:, 1, 3:] == 0).all()


def test_batched_cache_equals_one_prompt_at_a_time(cache_path, model, token_sets):
    with open_cache(cache_path) as cache:
        stored = read_all(cache)
    for row, ids in enumerate(token_sets["primary"]):
        alone = single_prompt_activations(model, ids)
        n = len(ids)
        for key in ("hook_pattern", *PER_TOKEN):
            single = np.stack(alone[key])[:, 0]
            batched = stored[key][:, row, :, :n, :n] if key == "hook_pattern" else stored[key][:, row, :n]
            np.testing.assert_allclose(batched, single, atol=forward_atol(single), rtol=0)


def test_float16_switch_stores_float16_close_to_float32(tmp_path, cache_path, model, token_sets):
    path16 = tmp_path / "seed1_f16.h5"
    write_activation_cache(
        path16,
        model,
        token_sets,
        pad_token_id=0,
        options=CacheOptions(batch_size=3, dtype="float16", show_progress=False),
    )
    with h5py.File(path16) as handle:
        assert all(handle["primary"][key].dtype == np.float16 for key in ("hook_pattern", *PER_TOKEN))
    with open_cache(path16) as half, open_cache(cache_path) as full:
        assert half.attrs["cache_dtype"] == "float16"
        values16, reference = read_all(half), read_all(full)
        for key, values in values16.items():
            assert values.dtype == np.float32  # the reader hands out float32 whatever is stored
            # float16 keeps 11 significant bits (rounding errs by <= 2^-11 relative); values below its
            # smallest normal (6.1e-5) keep fewer, so an absolute floor of that size
            np.testing.assert_allclose(
                values, reference[key], atol=float(np.finfo(np.float16).tiny), rtol=float(np.finfo(np.float16).eps)
            )
        assert (values16["hook_pattern"][:, 1, :, 3:, :] == 0.0).all()


def test_uncompressed_default_round_trips(tmp_path, cache_path, model, token_sets):
    path = tmp_path / "raw.h5"
    write_activation_cache(
        path, model, token_sets, pad_token_id=0, options=CacheOptions(batch_size=3, show_progress=False)
    )
    with open_cache(path) as raw, open_cache(cache_path) as compressed:
        assert raw.attrs["compression"] == "none"
        for key, values in read_all(raw).items():
            np.testing.assert_array_equal(values, read_all(compressed)[key])
    with h5py.File(path) as handle:
        assert handle["primary/hook_z"].compression is None and handle["primary/hook_z"].fletcher32


def test_compressed_patterns_round_trip_exactly_and_take_less_disk(tmp_path, cache_path, model, token_sets):
    path = tmp_path / "patterns_gzip.h5"
    write_activation_cache(path, model, token_sets, pad_token_id=0, options=CacheOptions(batch_size=3, compression_level=1, pattern_compression_level=1, show_progress=False))  # fmt: skip
    with open_cache(path) as packed, open_cache(cache_path) as plain:
        assert packed.attrs["pattern_compression"] == "shuffle+gzip1" and plain.attrs["pattern_compression"] == "none"
        for key, values in read_all(plain).items():  # lossless: every dataset bit for bit
            np.testing.assert_array_equal(read_all(packed)[key], values)
        np.testing.assert_array_equal(packed.hook_pattern_lower("primary"), plain.hook_pattern_lower("primary"))
    with h5py.File(path) as handle, h5py.File(cache_path) as reference:
        pattern = handle["primary/hook_pattern"]
        assert pattern.compression == "gzip" and pattern.shuffle and pattern.fletcher32
        assert pattern.id.get_storage_size() < reference["primary/hook_pattern"].id.get_storage_size()


def test_pattern_compression_level_out_of_range_names_the_config_key(tmp_path, model, token_sets):
    with pytest.raises(
        ValueError, match=r"pattern_compression_level must be 1-9.*got 0.*cache\.pattern_compression_level"
    ):
        write_activation_cache(tmp_path / "x.h5", model, token_sets, pad_token_id=0, options=CacheOptions(pattern_compression_level=0, show_progress=False))  # fmt: skip
    assert not (tmp_path / "x.h5").exists()


def test_prompt_longer_than_context_names_set_index_and_length(tmp_path, model):
    too_long = {"primary": [[1, 2, 3], [1] * (N_CTX + 1)]}
    with pytest.raises(ValueError, match=rf"prompt set 'primary'.*prompt 1 has {N_CTX + 1} tokens.*n_ctx={N_CTX}"):
        write_activation_cache(
            tmp_path / "x.h5", model, too_long, pad_token_id=0, options=CacheOptions(show_progress=False)
        )
    assert not (tmp_path / "x.h5").exists()


def test_a_prompt_set_without_prompts_fails_before_writing(tmp_path, model):
    with pytest.raises(ValueError, match="prompt set 'empty' has no prompts"):
        write_activation_cache(
            tmp_path / "seed1.h5",
            model,
            {"primary": [[1, 2, 3]], "empty": []},
            pad_token_id=0,
            options=CacheOptions(show_progress=False),
        )
    assert not list(tmp_path.iterdir())


def test_attention_only_model_caches_resid_post_under_its_name(tmp_path, token_sets):
    attn_only = make_model(attn_only=True)
    path = tmp_path / "attn.h5"
    write_activation_cache(
        path, attn_only, {"len5": token_sets["len5"]}, pad_token_id=0, options=CacheOptions(show_progress=False)
    )
    ids = token_sets["len5"][0]
    with torch.inference_mode():
        _, reference = attn_only.run_with_cache(torch.tensor([ids]))
    with h5py.File(path) as handle:
        assert "hook_resid_mid" not in handle["len5"]
        assert handle["len5/hook_resid_post"].attrs["hook"] == "blocks.{layer}.hook_resid_post"
    with open_cache(path) as cache:
        assert cache.resid_hook == "hook_resid_post" and cache.resid_hooks() == ["hook_resid_mid", "hook_resid_post"]
        np.testing.assert_allclose(
            cache.resid("len5", "hook_resid_post", layer=1)[0],
            reference["blocks.1.hook_resid_post"][0].numpy(),
            atol=forward_atol(reference["blocks.1.hook_resid_post"].numpy()),
        )
        # without an MLP hook_resid_mid is hook_resid_post: the reader hands out the stored tensor
        np.testing.assert_array_equal(cache.resid("len5", "hook_resid_mid"), cache.resid("len5", "hook_resid_post"))


def test_extra_resid_pre_matches_transformer_lens_and_is_zero_padded(
    resid_pre_cache_path, cache_path, model, token_sets
):
    with h5py.File(resid_pre_cache_path) as handle:
        group = handle["primary"]
        assert "hook_resid_post" not in group
        pre, mid = group["hook_resid_pre"], group["hook_resid_mid"]
        assert pre.shape == mid.shape == (N_LAYERS, 7, 12, D_MODEL)
        assert pre.dtype == mid.dtype and pre.chunks == mid.chunks
        assert pre.compression == mid.compression == "gzip" and pre.shuffle
        assert pre.attrs["hook"] == "blocks.{layer}.hook_resid_pre" and pre.attrs["dims"] == mid.attrs["dims"]
    with open_cache(resid_pre_cache_path) as cache:
        assert cache.attrs["extra_resid_hooks"] == ["hook_resid_pre"]
        assert cache.resid_hooks() == ["hook_resid_pre", "hook_resid_mid"]
        assert "hook_resid_pre" in cache.shapes("primary")
    # caches with and without the optional dataset agree on everything they share
    assert "hook_resid_pre" not in check_consistent_shapes([cache_path, resid_pre_cache_path])["primary"]
    with open_cache(resid_pre_cache_path) as cache, open_cache(cache_path) as plain:
        lengths = cache.lengths("primary")
        resid_pre = cache.resid("primary", "hook_resid_pre")
        # hook_resid_mid is unchanged by the extra hook
        np.testing.assert_array_equal(
            cache.resid("primary", "hook_resid_mid"), plain.resid("primary", "hook_resid_mid")
        )
        np.testing.assert_array_equal(
            cache.resid("primary", "hook_resid_pre", layer=1, prompts=slice(2, 5)), resid_pre[1, 2:5]
        )
    for row, ids in enumerate(token_sets["primary"]):
        n = int(lengths[row])
        assert n == len(ids) and (resid_pre[:, row, n:] == 0.0).all()
        assert np.abs(resid_pre[:, row, :n]).min(axis=-1).max() > 0
    for row in (0, 5):  # padded in their batches (length 7 with 9 and 11; length 2 with 3 and 5)
        ids = token_sets["primary"][row]
        with torch.inference_mode():
            _, reference = model.run_with_cache(torch.tensor([ids]))
        for layer in range(N_LAYERS):
            np.testing.assert_allclose(
                resid_pre[layer, row, : len(ids)],
                reference[f"blocks.{layer}.hook_resid_pre"][0].numpy(),
                atol=forward_atol(reference[f"blocks.{layer}.hook_resid_pre"].numpy()),
            )


def test_unknown_extra_resid_hook_fails_before_writing(tmp_path, model, token_sets):
    with pytest.raises(ValueError, match="'hook_resid_final' is not one of.*analysis.cka_hook"):
        write_activation_cache(
            tmp_path / "x.h5",
            model,
            token_sets,
            pad_token_id=0,
            options=CacheOptions(extra_resid_hooks=("hook_resid_final",), show_progress=False),
        )
    assert not (tmp_path / "x.h5").exists()


def test_attention_only_resid_post_serves_resid_mid_and_resid_pre_is_stored(tmp_path, token_sets):
    attn_only = make_model(attn_only=True)
    path = tmp_path / "attn.h5"
    write_activation_cache(
        path,
        attn_only,
        {"len5": token_sets["len5"]},
        pad_token_id=0,
        options=CacheOptions(
            extra_resid_hooks=("hook_resid_mid", "hook_resid_post", "hook_resid_pre"), show_progress=False
        ),
    )
    ids = token_sets["len5"][0]
    with torch.inference_mode():
        _, reference = attn_only.run_with_cache(torch.tensor([ids]))
    with h5py.File(path) as handle:
        assert sorted(k for k in handle["len5"] if k.startswith("hook_resid")) == ["hook_resid_post", "hook_resid_pre"]
    with open_cache(path) as cache:
        assert cache.attrs["extra_resid_hooks"] == ["hook_resid_pre"]
        assert cache.resid_hooks() == ["hook_resid_pre", "hook_resid_mid", "hook_resid_post"]
        for hook in ("hook_resid_mid", "hook_resid_post"):
            np.testing.assert_array_equal(cache.resid("len5", hook), cache.resid("len5", "hook_resid_post"))
        np.testing.assert_allclose(
            cache.resid("len5", "hook_resid_pre", layer=1)[0],
            reference["blocks.1.hook_resid_pre"][0].numpy(),
            atol=forward_atol(reference["blocks.1.hook_resid_pre"].numpy()),
        )


def test_interrupted_write_leaves_no_file(tmp_path, model, token_sets, monkeypatch):
    import headstab.activations.writer as writer

    def fail(*args, **kwargs):
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(writer, "collect_activations", fail)
    path = tmp_path / "seed2.h5"
    with pytest.raises(RuntimeError, match="simulated crash"):
        write_activation_cache(path, model, token_sets, pad_token_id=0, options=CacheOptions(show_progress=False))
    assert not path.exists() and not temporary_path(path).exists()


def test_packed_patterns_are_smaller_than_padded_squares(cache_path):
    with h5py.File(cache_path) as handle:
        lengths = handle["primary/lengths"][()]
        stored = handle["primary/hook_pattern"].size
        padded = N_LAYERS * len(lengths) * N_HEADS * int(lengths.max()) ** 2
    assert stored == N_LAYERS * N_HEADS * int((lengths * (lengths + 1) // 2).sum()) and stored < padded / 2


def test_hook_pattern_split_into_many_chunks_reads_the_same(tmp_path, cache_path, model, token_sets, monkeypatch):
    import headstab.activations.writer as writer

    monkeypatch.setattr(writer, "PATTERN_CHUNK_BYTES", N_HEADS * 4 * 37)  # 37 entries: chunks end inside prompts
    path = write_activation_cache(
        tmp_path / "small_chunks.h5",
        model,
        token_sets,
        pad_token_id=0,
        options=CacheOptions(batch_size=3, show_progress=False),
    )
    with h5py.File(path) as handle:
        assert handle["primary/hook_pattern"].chunks == (1, N_HEADS, 37)
    with open_cache(path) as chunked, open_cache(cache_path) as whole:
        assert chunked.pattern_offsets("primary")[-1] > 3 * 37
        np.testing.assert_array_equal(chunked.hook_pattern_lower("primary"), whole.hook_pattern_lower("primary"))
        for start in range(0, 7, 2):  # prompt ranges of all layers, as the similarity engine reads them
            prompts = slice(start, min(start + 2, 7))
            np.testing.assert_array_equal(
                chunked.hook_pattern_lower("primary", prompts=prompts),
                whole.hook_pattern_lower("primary", prompts=prompts),
            )
        np.testing.assert_array_equal(chunked.hook_pattern("primary", layer=1), whole.hook_pattern("primary", layer=1))


def test_a_chunk_is_its_data_then_the_checksum(cache_path):
    # So the byte flipped in the middle of a stored hook_pattern chunk is data, not slack space.
    with h5py.File(cache_path) as handle:
        dataset = handle["primary/hook_pattern"]
        info = dataset.id.get_chunk_info_by_coord((1, 0, 0))
        _, raw = dataset.id.read_direct_chunk((1, 0, 0))
        assert info.size == len(raw) == dataset[1].nbytes + 4
        assert raw[:-4] == dataset[1].tobytes()


def test_a_prompt_with_words_the_tokenizer_lacks_fails_before_the_model_runs_naming_set_file_and_words(tmp_path):
    """cache_activations checks what rule check_prompts checks: the check is a target of its own that no cache
    job waits for, so a cache written beside a failing check must not hold the unknown token."""
    from headstab.activations.writer import cache_activations
    from headstab.refits.tokenizer import train_word_tokenizer

    words = train_word_tokenizer(["ba be bi bo"], vocab_size=8, out_dir=tmp_path / "words")
    path = tmp_path / "cache.h5"
    with pytest.raises(ValueError, match=r"prompt set 'len5' \(file p.json\): prompt 1 has words .*'cat'"):
        cache_activations(
            path, None, words, {"primary": ["ba be"], "len5": ["bo bi", "the cat bo"]},
            prompt_files={"len5": {"prompt_file": "p.json"}},
        )  # fmt: skip
    assert not path.exists() and not temporary_path(path).exists()
