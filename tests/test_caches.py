"""Activation cache: the HDF5 contract, exact padding, batching, float16, and the validated reader."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from headstab.caches import (
    PATTERN_CHUNK_BYTES,
    CacheChecksumError,
    CacheError,
    check_consistent_shapes,
    collect_activations,
    open_cache,
    pad_token_lists,
    rebuild_command,
    tokenize_prompts,
    write_activation_cache,
)
from headstab.fileio import temporary_path
from headstab.formats import CACHE_FORMAT_VERSION
from headstab.similarity import pair_similarity_from_caches
from tolerances import reduction_atol

N_LAYERS, N_HEADS, D_MODEL, D_HEAD, N_CTX, D_VOCAB = 2, 4, 32, 8, 24, 60
# A batched forward pass and a single-prompt one sum in different orders: float32 sums of up to
# N_LAYERS x (d_model + d_mlp + N_CTX) terms along the way, relative to each activation's size.
FORWARD_TERMS = N_LAYERS * (D_MODEL + 64 + N_CTX)


def forward_atol(values: np.ndarray) -> float:
    return reduction_atol(np.float32, FORWARD_TERMS, float(np.abs(values).max()))


def make_model(attn_only: bool = False, seed: int = 1, n_heads: int = N_HEADS):
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    cfg = TransformerBridgeConfig(
        n_layers=N_LAYERS, n_heads=n_heads, d_model=D_MODEL, d_head=D_HEAD, d_mlp=64, n_ctx=N_CTX,
        d_vocab=D_VOCAB, act_fn="gelu", normalization_type="LN", positional_embedding_type="standard",
        init_mode="gpt2", seed=seed, attn_only=attn_only,
    )
    return TransformerBridge.boot_native(cfg)


@pytest.fixture(scope="module")
def model():
    return make_model()


@pytest.fixture(scope="module")
def token_sets():
    rng = np.random.default_rng(0)
    make = lambda lengths: [[1] + rng.integers(2, D_VOCAB, size=n - 1).tolist() for n in lengths]  # noqa: E731
    # Lengths out of order so that length-sorted batching has to write rows back in file order.
    return {"primary": make([7, 3, 12, 5, 9, 2, 11]), "len5": make([5, 5, 5])}


@pytest.fixture(scope="module")
def cache_path(tmp_path_factory, model, token_sets):
    path = tmp_path_factory.mktemp("cache") / "seed1.h5"
    write_activation_cache(
        path, model, token_sets, pad_token_id=0, batch_size=3,
        prompt_texts={"primary": [f"prompt {i}" for i in range(7)], "len5": ["a b", "c d", "ünï"]},
        set_attrs={"primary": {"prompt_file": "p.json", "prompt_file_sha256": "ab" * 32}},
        attrs={"architecture": "tiny", "seed": 1, "packages": {"h5py": h5py.__version__}},
        show_progress=False,
    )
    return path


def single_prompt_activations(model, ids):
    tokens, lengths = pad_token_lists([ids], 0)
    return collect_activations(model, tokens, lengths)


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
            assert tokens[row, : len(ids)].tolist() == ids and (tokens[row, len(ids):] == 0).all()
    with h5py.File(cache_path) as handle:
        group = handle["primary"]
        n_lower = sum(n * (n + 1) // 2 for n in lengths)  # packed lower triangles, prompts in file order
        assert group["attn_pattern"].shape == (N_LAYERS, N_HEADS, n_lower)
        assert group["pattern_offsets"][()].tolist() == np.concatenate([[0], np.cumsum([n * (n + 1) // 2 for n in lengths])]).tolist()
        assert group["attn_pattern"].dtype == np.float32 and group["attn_pattern"].compression is None
        assert group["resid_mid"].shape == (N_LAYERS, 7, 12, D_MODEL)
        assert group["head_out"].shape == (N_LAYERS, 7, 12, N_HEADS, D_HEAD)
        for key in ("resid_mid", "head_out"):
            assert group[key].dtype == np.float32
            assert group[key].chunks[0] == 1  # one layer per chunk
            assert group[key].compression == "gzip" and group[key].shuffle
        assert group["lengths"].dtype == np.int32
        assert group["attn_pattern"].attrs["hook"] == "blocks.{layer}.attn.hook_pattern"
        for key in group:  # every dataset carries a checksum (which needs chunks), prompts as fixed-width bytes
            assert group[key].fletcher32 and group[key].chunks is not None, key
        assert group["prompts"].dtype.kind == "S"
        # A chunk is PATTERN_CHUNK_BYTES of all heads of one layer; this tiny set fits in one.
        assert group["attn_pattern"].chunks == (1, N_HEADS, min(n_lower, PATTERN_CHUNK_BYTES // (N_HEADS * 4)))
        assert handle.attrs["checksum"] == "fletcher32" and handle.attrs["format_version"] == CACHE_FORMAT_VERSION == 3


def test_everything_outside_real_tokens_is_exactly_zero(cache_path):
    with open_cache(cache_path) as cache:
        lengths = cache.lengths("primary")
        pattern, resid, head_out = (cache.attn_pattern("primary"), cache.resid_mid("primary"),
                                    cache.head_out("primary"))
    for row, n in enumerate(lengths):
        block = pattern[:, row]
        assert (block[:, :, n:, :] == 0.0).all() and (block[:, :, :, n:] == 0.0).all()
        assert (resid[:, row, n:] == 0.0).all() and (head_out[:, row, n:] == 0.0).all()
        # real queries: causal rows of a softmax sum to one
        np.testing.assert_allclose(block[:, :, :n, :n].sum(-1), 1.0, atol=reduction_atol(np.float32, int(n)))
        assert (np.triu(block[:, :, :n, :n], k=1) == 0.0).all()
        assert np.abs(resid[:, row, :n]).min(axis=-1).max() > 0


def test_batched_cache_equals_one_prompt_at_a_time(cache_path, model, token_sets):
    with open_cache(cache_path) as cache:
        stored = {key: getattr(cache, key)("primary") for key in ("attn_pattern", "resid_mid", "head_out")}
    for row, ids in enumerate(token_sets["primary"]):
        alone = single_prompt_activations(model, ids)
        n = len(ids)
        for key in ("attn_pattern", "resid_mid", "head_out"):
            single = alone[key][:, 0]
            batched = stored[key][:, row, :, :n, :n] if key == "attn_pattern" else stored[key][:, row, :n]
            np.testing.assert_allclose(batched, single, atol=forward_atol(single), rtol=0)


def test_patterns_match_transformer_lens_hooks_directly(model, token_sets):
    ids = token_sets["primary"][2]
    with torch.inference_mode():
        _, reference = model.run_with_cache(torch.tensor([ids]))
    ours = single_prompt_activations(model, ids)
    for layer in range(N_LAYERS):
        np.testing.assert_array_equal(ours["attn_pattern"][layer, 0],
                                      reference[f"blocks.{layer}.attn.hook_pattern"][0].numpy())
        np.testing.assert_array_equal(ours["resid_mid"][layer, 0], reference[f"blocks.{layer}.hook_resid_mid"][0].numpy())
        np.testing.assert_array_equal(ours["head_out"][layer, 0], reference[f"blocks.{layer}.attn.hook_z"][0].numpy())


def test_one_layer_read_alone_equals_slice_of_full_read(cache_path):
    with open_cache(cache_path) as cache:
        for key in ("attn_pattern", "resid_mid", "head_out"):
            full = getattr(cache, key)("primary")
            np.testing.assert_array_equal(getattr(cache, key)("primary", layer=1), full[1])
            np.testing.assert_array_equal(getattr(cache, key)("primary", layer=0, prompts=slice(2, 5)), full[0, 2:5])
        layers = [layer for layer, _ in cache.iter_layers("len5")]
        assert layers == list(range(N_LAYERS))
        with pytest.raises(IndexError, match="layer 5"):
            cache.attn_pattern("primary", layer=5)
        with pytest.raises(KeyError, match="no prompt set 'nope'"):
            cache.lengths("nope")


def test_float16_switch_stores_float16_close_to_float32(tmp_path, cache_path, model, token_sets):
    path16 = tmp_path / "seed1_f16.h5"
    write_activation_cache(path16, model, token_sets, pad_token_id=0, batch_size=3, dtype="float16",
                           show_progress=False)
    with h5py.File(path16) as handle:
        assert all(handle["primary"][key].dtype == np.float16 for key in ("attn_pattern", "resid_mid", "head_out"))
    with open_cache(path16) as half, open_cache(cache_path) as full:
        assert half.attrs["cache_dtype"] == "float16"
        for key in ("attn_pattern", "resid_mid", "head_out"):
            values16 = getattr(half, key)("primary")
            assert values16.dtype == np.float32  # the reader hands out float32 whatever is stored
            reference = getattr(full, key)("primary")
            # float16 keeps 11 significant bits (rounding errs by <= 2^-11 relative); values below its
            # smallest normal (6.1e-5) keep fewer, so an absolute floor of that size
            np.testing.assert_allclose(values16, reference, atol=float(np.finfo(np.float16).tiny), rtol=float(np.finfo(np.float16).eps))
        assert (half.attn_pattern("primary")[:, 1, :, 3:, :] == 0.0).all()


def test_uncompressed_option_round_trips(tmp_path, cache_path, model, token_sets):
    path = tmp_path / "raw.h5"
    write_activation_cache(path, model, token_sets, pad_token_id=0, batch_size=3, compression_level=None,
                           show_progress=False)
    with open_cache(path) as raw, open_cache(cache_path) as compressed:
        assert raw.attrs["compression"] == "none"
        np.testing.assert_array_equal(raw.attn_pattern("primary"), compressed.attn_pattern("primary"))


def test_prompt_longer_than_context_names_set_index_and_length(tmp_path, model):
    too_long = {"primary": [[1, 2, 3], [1] * (N_CTX + 1)]}
    with pytest.raises(ValueError, match=rf"prompt set 'primary'.*prompt 1 has {N_CTX + 1} tokens.*n_ctx={N_CTX}"):
        write_activation_cache(tmp_path / "x.h5", model, too_long, pad_token_id=0, show_progress=False)
    assert not (tmp_path / "x.h5").exists()


def test_attention_only_model_caches_resid_post_and_says_so(tmp_path, token_sets):
    attn_only = make_model(attn_only=True)
    path = tmp_path / "attn.h5"
    write_activation_cache(path, attn_only, {"len5": token_sets["len5"]}, pad_token_id=0, show_progress=False)
    ids = token_sets["len5"][0]
    with torch.inference_mode():
        _, reference = attn_only.run_with_cache(torch.tensor([ids]))
    with open_cache(path) as cache:
        assert cache.resid_hook == "hook_resid_post"
        with h5py.File(path) as handle:
            assert handle["len5/resid_mid"].attrs["hook"] == "blocks.{layer}.hook_resid_post"
        np.testing.assert_allclose(cache.resid_mid("len5", layer=1)[0],
                                   reference["blocks.1.hook_resid_post"][0].numpy(),
                                   atol=forward_atol(reference["blocks.1.hook_resid_post"].numpy()))


@pytest.fixture(scope="module")
def resid_pre_cache_path(tmp_path_factory, model, token_sets):
    path = tmp_path_factory.mktemp("cache_pre") / "seed1.h5"
    write_activation_cache(path, model, token_sets, pad_token_id=0, batch_size=3,
                           extra_resid_hooks=("hook_resid_pre",), show_progress=False)
    return path


def test_extra_resid_pre_matches_transformer_lens_and_is_zero_padded(resid_pre_cache_path, cache_path, model,
                                                                     token_sets):
    with h5py.File(resid_pre_cache_path) as handle:
        group = handle["primary"]
        assert "resid_post" not in group
        pre, mid = group["resid_pre"], group["resid_mid"]
        assert pre.shape == mid.shape == (N_LAYERS, 7, 12, D_MODEL)
        assert pre.dtype == mid.dtype and pre.chunks == mid.chunks
        assert pre.compression == mid.compression == "gzip" and pre.shuffle
        assert pre.attrs["hook"] == "blocks.{layer}.hook_resid_pre" and pre.attrs["dims"] == mid.attrs["dims"]
    with open_cache(resid_pre_cache_path) as cache:
        assert cache.attrs["extra_resid_hooks"] == ["hook_resid_pre"]
        assert cache.resid_hooks() == ["hook_resid_pre", "hook_resid_mid"]
        assert "resid_pre" in cache.shapes("primary")
    # caches with and without the optional dataset agree on everything they share
    assert "resid_pre" not in check_consistent_shapes([cache_path, resid_pre_cache_path])["primary"]
    with open_cache(resid_pre_cache_path) as cache, open_cache(cache_path) as plain:
        lengths = cache.lengths("primary")
        resid_pre = cache.resid("primary", "hook_resid_pre")
        # resid_mid is unchanged by the extra hook, and hook_resid_mid is resid_mid
        np.testing.assert_array_equal(cache.resid("primary", "hook_resid_mid"), plain.resid_mid("primary"))
        np.testing.assert_array_equal(cache.resid("primary", "hook_resid_pre", layer=1, prompts=slice(2, 5)),
                                      resid_pre[1, 2:5])
    for row, ids in enumerate(token_sets["primary"]):
        n = int(lengths[row])
        assert n == len(ids) and (resid_pre[:, row, n:] == 0.0).all()
        assert np.abs(resid_pre[:, row, :n]).min(axis=-1).max() > 0
    for row in (0, 5):  # padded in their batches (length 7 with 9 and 11; length 2 with 3 and 5)
        ids = token_sets["primary"][row]
        with torch.inference_mode():
            _, reference = model.run_with_cache(torch.tensor([ids]))
        for layer in range(N_LAYERS):
            np.testing.assert_allclose(resid_pre[layer, row, : len(ids)],
                                       reference[f"blocks.{layer}.hook_resid_pre"][0].numpy(),
                                       atol=forward_atol(reference[f"blocks.{layer}.hook_resid_pre"].numpy()))
    alone = collect_activations(model, *pad_token_lists([token_sets["primary"][2]], 0), ("hook_resid_pre",))
    with torch.inference_mode():
        _, reference = model.run_with_cache(torch.tensor([token_sets["primary"][2]]))
    for layer in range(N_LAYERS):
        np.testing.assert_array_equal(alone["resid_pre"][layer, 0], reference[f"blocks.{layer}.hook_resid_pre"][0].numpy())


def test_resid_hook_missing_from_the_cache_names_file_dataset_and_cka_hook(cache_path):
    with open_cache(cache_path) as cache:
        assert cache.attrs["extra_resid_hooks"] == [] and cache.resid_hooks() == ["hook_resid_mid"]
        np.testing.assert_array_equal(cache.resid("primary", "hook_resid_mid", layer=0), cache.resid_mid("primary", layer=0))
        for hook, dataset in (("hook_resid_pre", "resid_pre"), ("hook_resid_post", "resid_post")):
            with pytest.raises(CacheError) as error:
                cache.resid("primary", hook)
            message = str(error.value)
            assert str(cache_path) in message and f"/primary/{dataset}" in message
            assert f"analysis.cka_hook: {hook}" in message
            assert f"snakemake {cache_path} --forcerun cache_activations" in message
        with pytest.raises(ValueError, match="hook_resid_final.*analysis.cka_hook"):
            cache.resid("primary", "hook_resid_final")


def test_unknown_extra_resid_hook_fails_before_writing(tmp_path, model, token_sets):
    with pytest.raises(ValueError, match="'hook_resid_final' is not one of.*analysis.cka_hook"):
        write_activation_cache(tmp_path / "x.h5", model, token_sets, pad_token_id=0,
                               extra_resid_hooks=("hook_resid_final",), show_progress=False)
    assert not (tmp_path / "x.h5").exists()


def test_attention_only_resid_post_is_resid_mid_and_resid_pre_is_stored(tmp_path, token_sets):
    attn_only = make_model(attn_only=True)
    path = tmp_path / "attn.h5"
    write_activation_cache(path, attn_only, {"len5": token_sets["len5"]}, pad_token_id=0,
                           extra_resid_hooks=("hook_resid_mid", "hook_resid_post", "hook_resid_pre"),
                           show_progress=False)
    ids = token_sets["len5"][0]
    with torch.inference_mode():
        _, reference = attn_only.run_with_cache(torch.tensor([ids]))
    with h5py.File(path) as handle:
        assert sorted(k for k in handle["len5"] if k.startswith("resid")) == ["resid_mid", "resid_pre"]
    with open_cache(path) as cache:
        assert cache.attrs["extra_resid_hooks"] == ["hook_resid_pre"]
        assert cache.resid_hooks() == ["hook_resid_pre", "hook_resid_mid", "hook_resid_post"]
        for hook in ("hook_resid_mid", "hook_resid_post"):
            np.testing.assert_array_equal(cache.resid("len5", hook), cache.resid_mid("len5"))
        np.testing.assert_allclose(cache.resid("len5", "hook_resid_pre", layer=1)[0],
                                   reference["blocks.1.hook_resid_pre"][0].numpy(),
                                   atol=forward_atol(reference["blocks.1.hook_resid_pre"].numpy()))


def edited_copy(source: Path, destination: Path, edit) -> Path:
    """A copy of the cache at `source`, changed in place by `edit(h5py handle)`: a damaged or foreign file."""
    destination.write_bytes(source.read_bytes())
    with h5py.File(destination, "a") as handle:
        edit(handle)
    return destination


def test_promised_or_misshapen_resid_pre_is_rejected(tmp_path, resid_pre_cache_path):
    def drop(handle):
        del handle["len5/resid_pre"]

    def misshape(handle):
        drop(handle)
        handle["len5"].create_dataset("resid_pre", data=np.zeros((N_LAYERS, 3, 4, D_MODEL), dtype=np.float32))

    gutted = edited_copy(resid_pre_cache_path, tmp_path / "gutted.h5", drop)
    with pytest.raises(CacheError, match=rf"{gutted} lacks the datasets /len5/resid_pre.*rm -f {gutted}"):
        open_cache(gutted)
    misshapen = edited_copy(resid_pre_cache_path, tmp_path / "misshapen.h5", misshape)
    with pytest.raises(CacheError, match=r"/len5/resid_pre of shape \(2, 3, 4, 32\), expected \(2, 3, 5, 32\)"):
        open_cache(misshapen)


def test_interrupted_write_leaves_no_file(tmp_path, model, token_sets, monkeypatch):
    import headstab.caches as caches

    def fail(*args, **kwargs):
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(caches, "collect_activations", fail)
    path = tmp_path / "seed2.h5"
    with pytest.raises(RuntimeError, match="simulated crash"):
        write_activation_cache(path, model, token_sets, pad_token_id=0, show_progress=False)
    assert not path.exists() and not temporary_path(path).exists()


def test_missing_file_names_file_and_build_command(tmp_path):
    path = tmp_path / "results" / "tiny" / "caches" / "seed9.h5"
    with pytest.raises(CacheError, match=rf"{path} does not exist.*snakemake {path}"):
        open_cache(path)


def test_truncated_file_names_file_and_rebuild_command(tmp_path, cache_path):
    truncated = tmp_path / "seed1.h5"
    data = cache_path.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CacheError, match=rf"{truncated} is not a readable HDF5 file.*rm -f {truncated} && snakemake {truncated}"):
        open_cache(truncated)


def test_foreign_hdf5_names_file_and_rebuild_command(tmp_path):
    foreign = tmp_path / "seed3.h5"
    with h5py.File(foreign, "w") as handle:
        handle.create_dataset("activations", data=np.zeros((2, 3)))
    with pytest.raises(CacheError, match=rf"{foreign} is not a headstab activation cache.*snakemake {foreign}"):
        open_cache(foreign)


def test_incomplete_or_gutted_cache_is_rejected(tmp_path, cache_path):
    incomplete = edited_copy(cache_path, tmp_path / "incomplete.h5", lambda handle: handle.attrs.modify("complete", False))
    with pytest.raises(CacheError, match="incomplete.*rm -f"):
        open_cache(incomplete)
    gutted = edited_copy(cache_path, tmp_path / "gutted.h5", lambda handle: handle["len5"].pop("head_out"))
    with pytest.raises(CacheError, match=r"lacks the datasets /len5/head_out"):
        open_cache(gutted)


def test_consistent_caches_pass_and_mismatched_shapes_name_both_files(tmp_path, cache_path, token_sets):
    other_seed = tmp_path / "seed2.h5"
    write_activation_cache(other_seed, make_model(seed=2), token_sets, pad_token_id=0, batch_size=3,
                           show_progress=False)
    shapes = check_consistent_shapes([cache_path, other_seed])
    n_lower = sum(len(ids) * (len(ids) + 1) // 2 for ids in token_sets["primary"])
    assert shapes["primary"]["attn_pattern"] == (N_LAYERS, N_HEADS, n_lower)
    assert shapes["primary"]["tokens"] == (7, 12)
    wider = tmp_path / "seed3.h5"
    write_activation_cache(wider, make_model(n_heads=2), token_sets, pad_token_id=0, show_progress=False)
    with pytest.raises(CacheError, match=rf"{cache_path} and {wider} disagree on /primary/attn_pattern"):
        check_consistent_shapes([cache_path, wider])
    fewer = tmp_path / "seed4.h5"
    write_activation_cache(fewer, make_model(), {"primary": token_sets["primary"][:5], "len5": token_sets["len5"]},
                           pad_token_id=0, show_progress=False)
    with pytest.raises(CacheError, match=rf"{cache_path} and {fewer} disagree on /primary/tokens"):
        check_consistent_shapes([cache_path, fewer])


def test_tokenize_prompts_prepends_bos_without_other_specials(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.train_from_iterator(["the cat sat on the mat"] * 20,
                                trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|endoftext|>",
                            eos_token="<|endoftext|>").save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    bos = tokenizer.bos_token_id
    plain = tokenizer("the cat", add_special_tokens=False)["input_ids"]
    with_bos, without = (tokenize_prompts(tokenizer, ["the cat", "mat"], prepend_bos=flag) for flag in (True, False))
    assert with_bos[0] == [bos] + plain and without[0] == plain
    assert with_bos[1][0] == bos and with_bos[1][1:] == without[1]


def test_packed_pattern_round_trip_slices_and_reading_into_place(cache_path):
    from headstab.caches import lower_triangle_offsets, pack_lower_triangle, unpack_lower_triangles

    # Packing by hand: a 3-token prompt keeps q0k0, q1k0, q1k1, q2k0, q2k1, q2k2.
    square = np.arange(16, dtype=np.float32).reshape(4, 4)
    assert pack_lower_triangle(square, 3).tolist() == [0, 4, 5, 8, 9, 10]
    unpacked = unpack_lower_triangles(np.array([0, 4, 5, 8, 9, 10, 7], dtype=np.float32), np.array([3, 1]),
                                      lower_triangle_offsets(np.array([3, 1])), 4)
    np.testing.assert_array_equal(unpacked[0], np.tril(square * (np.arange(4) < 3)[:, None] * (np.arange(4) < 3)))
    assert unpacked[1, 0, 0] == 7 and unpacked[1].sum() == 7
    with open_cache(cache_path) as cache:
        lengths, offsets = cache.lengths("primary"), cache.pattern_offsets("primary")
        full = cache.attn_pattern("primary")  # [layer, prompt, head, q, k]
        packed = cache.attn_pattern_lower("primary")
        for prompt, n in enumerate(lengths):
            np.testing.assert_array_equal(packed[..., offsets[prompt]:offsets[prompt + 1]], pack_lower_triangle(full[:, prompt], int(n)))
        # A layer and a contiguous prompt range, read into a given array.
        out = np.full((N_HEADS, offsets[5] - offsets[2]), np.nan, dtype=np.float32)
        assert cache.attn_pattern_lower("primary", layer=1, prompts=slice(2, 5), out=out) is out
        np.testing.assert_array_equal(out, packed[1, :, offsets[2]:offsets[5]])
        np.testing.assert_array_equal(cache.attn_pattern("primary", layer=1, prompts=[4, 0]), full[1, [4, 0]])
        with pytest.raises(ValueError, match="contiguous slice of prompts"):
            cache.attn_pattern_lower("primary", prompts=slice(0, 5, 2))
        with pytest.raises(ValueError, match=r"out must be a C-contiguous float32 array of shape \(4, "):
            cache.attn_pattern_lower("primary", layer=0, out=np.zeros((N_HEADS, 3), dtype=np.float32))


def test_offsets_that_disagree_with_lengths_are_rejected(tmp_path, cache_path):
    def shift(handle):
        handle["primary/pattern_offsets"][1] += 1

    broken = edited_copy(cache_path, tmp_path / "broken.h5", shift)
    with pytest.raises(CacheError, match=rf"{broken} has /primary/pattern_offsets that do not match its lengths"):
        open_cache(broken)


def test_packed_patterns_are_smaller_than_padded_squares(cache_path):
    with h5py.File(cache_path) as handle:
        lengths = handle["primary/lengths"][()]
        stored = handle["primary/attn_pattern"].size
        padded = N_LAYERS * len(lengths) * N_HEADS * int(lengths.max()) ** 2
    assert stored == N_LAYERS * N_HEADS * int((lengths * (lengths + 1) // 2).sum()) and stored < padded / 2


def test_packed_patterns_read_into_place_in_float32_and_float16(tmp_path, cache_path, model, token_sets):
    with open_cache(cache_path) as cache:
        offsets = cache.pattern_offsets("primary")
        expected = cache.attn_pattern_lower("primary", layer=1)
        out = np.empty((N_HEADS, int(offsets[-1])), dtype=np.float32)
        np.testing.assert_array_equal(cache.attn_pattern_lower("primary", layer=1, out=out), expected)
    half_path = write_activation_cache(tmp_path / "half.h5", model, token_sets, pad_token_id=0, dtype="float16",
                                       show_progress=False)
    with open_cache(half_path) as half:
        out = np.empty((N_LAYERS, N_HEADS, int(offsets[-1])), dtype=np.float32)
        # float16 keeps 11 significant bits and patterns lie in [0, 1]: absolute error <= 2^-11
        np.testing.assert_allclose(half.attn_pattern_lower("primary", out=out)[1], expected, atol=2.0 ** -11, rtol=0)
        pattern = half.attn_pattern("primary", prompts=slice(1, 3))
        assert pattern.flags.c_contiguous and pattern.shape == (N_LAYERS, 2, N_HEADS, 12, 12)


def test_a_prompt_set_without_prompts_fails_before_writing(tmp_path, model):
    with pytest.raises(ValueError, match="prompt set 'empty' has no prompts"):
        write_activation_cache(tmp_path / "seed1.h5", model, {"primary": [[1, 2, 3]], "empty": []}, pad_token_id=0,
                               show_progress=False)
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------- format 3: chunks and checksums
def test_attn_pattern_split_into_many_chunks_reads_the_same(tmp_path, cache_path, model, token_sets, monkeypatch):
    import headstab.caches as caches

    monkeypatch.setattr(caches, "PATTERN_CHUNK_BYTES", N_HEADS * 4 * 37)  # 37 entries: chunks end inside prompts
    path = write_activation_cache(tmp_path / "small_chunks.h5", model, token_sets, pad_token_id=0, batch_size=3,
                                  show_progress=False)
    with h5py.File(path) as handle:
        assert handle["primary/attn_pattern"].chunks == (1, N_HEADS, 37)
    with open_cache(path) as chunked, open_cache(cache_path) as whole:
        assert chunked.pattern_offsets("primary")[-1] > 3 * 37
        np.testing.assert_array_equal(chunked.attn_pattern_lower("primary"), whole.attn_pattern_lower("primary"))
        for start in range(0, 7, 2):  # prompt ranges of all layers, as the similarity engine reads them
            prompts = slice(start, min(start + 2, 7))
            np.testing.assert_array_equal(chunked.attn_pattern_lower("primary", prompts=prompts),
                                          whole.attn_pattern_lower("primary", prompts=prompts))
        np.testing.assert_array_equal(chunked.attn_pattern("primary", layer=1), whole.attn_pattern("primary", layer=1))


def _bytes_read() -> int:
    """Bytes this process has read through read(2)/pread(2), page cache included (Linux)."""
    return int(re.search(r"^rchar: (\d+)", Path("/proc/self/io").read_text(), re.M).group(1))


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io")
def test_consecutive_prompt_ranges_read_each_pattern_chunk_once(tmp_path, model, token_sets, monkeypatch):
    import headstab.caches as caches

    monkeypatch.setattr(caches, "PATTERN_CHUNK_BYTES", N_HEADS * 4 * 37)
    path = write_activation_cache(tmp_path / "small_chunks.h5", model, token_sets, pad_token_id=0,
                                  show_progress=False)
    with open_cache(path) as cache, h5py.File(path) as handle:
        stored = handle["primary/attn_pattern"].id.get_storage_size()
        cache.attn_pattern_lower("primary", prompts=slice(0, 1))  # B-tree and first chunks: not what is measured
        before = _bytes_read()
        for prompt in range(1, 7):  # one prompt at a time: every chunk is touched by several reads
            cache.attn_pattern_lower("primary", prompts=slice(prompt, prompt + 1))
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


def test_a_chunk_is_its_data_then_the_checksum(cache_path):
    # So the byte flipped in the middle of a stored attn_pattern chunk is data, not slack space.
    with h5py.File(cache_path) as handle:
        dataset = handle["primary/attn_pattern"]
        info = dataset.id.get_chunk_info_by_coord((1, 0, 0))
        _, raw = dataset.id.read_direct_chunk((1, 0, 0))
        assert info.size == len(raw) == dataset[1].nbytes + 4
        assert raw[:-4] == dataset[1].tobytes()


CORRUPTIBLE = [
    ("attn_pattern", (1, 0, 0), lambda cache: cache.attn_pattern_lower("primary", layer=1)),
    ("resid_mid", (0, 2, 0, 0), lambda cache: cache.resid_mid("primary", layer=0, prompts=slice(2, 3))),  # gzip
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
    if dataset == "attn_pattern":  # what the similarity stage reads
        with pytest.raises(CacheChecksumError, match=rf"{damaged}: dataset /primary/attn_pattern is corrupt"):
            pair_similarity_from_caches([cache_path, damaged], "primary", progress=False)


def test_without_checksums_a_flipped_byte_goes_unnoticed(tmp_path, model, token_sets):
    # What format 3 prevents: the same flip in a file written without fletcher32 silently changes one value.
    path = write_activation_cache(tmp_path / "seed1.h5", model, token_sets, pad_token_id=0, checksum=False,
                                  show_progress=False)
    with open_cache(path) as cache:
        assert cache.attrs["checksum"] == "none"
        before = cache.attn_pattern_lower("primary", layer=1)
    with h5py.File(path) as handle:
        assert not handle["primary/attn_pattern"].fletcher32
    flip_byte_in_chunk(path, "primary/attn_pattern", (1, 0, 0))
    with open_cache(path) as cache:
        after = cache.attn_pattern_lower("primary", layer=1)
        cache.verify()
    assert np.count_nonzero(after != before) == 1


def test_verify_reads_a_sound_cache_without_complaint(cache_path, resid_pre_cache_path):
    for path in (cache_path, resid_pre_cache_path):
        with open_cache(path) as cache:
            cache.verify()


def test_a_version_2_cache_is_rejected_with_the_rebuild_command(tmp_path, cache_path):
    old = edited_copy(cache_path, tmp_path / "old.h5", lambda handle: handle.attrs.modify("format_version", 2))
    with pytest.raises(CacheError) as error:
        open_cache(old)
    message = str(error.value)
    assert f"activation cache {old} has format_version 2; this code reads version 3" in message
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
    assert commands_in(str(error.value))[0] == [["rm", "-f", str(truncated)], ["snakemake", str(truncated)]]
    with pytest.raises(CacheError) as error:
        open_cache(directory / "missing.h5")
    assert commands_in(str(error.value)) == [[["snakemake", str(directory / "missing.h5")]]]
    sound = directory / "seed 2.h5"
    shutil.copyfile(cache_path, sound)
    with open_cache(sound) as cache, pytest.raises(CacheError) as error:
        cache.resid("primary", "hook_resid_pre")
    assert commands_in(str(error.value)) == [[["snakemake", str(sound), "--forcerun", "cache_activations"]]]
