"""The identity of the prompts a similarity file was computed on, and the check that two files share it."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from helpers.bridges import tiny_bridge

from headstab.activations.writer import CacheOptions, write_activation_cache
from headstab.similarity.prompt_groups import GroupedSimilarity, write_grouped_similarity
from headstab.similarity.prompt_identity import (
    PROMPT_DIGEST,
    cached_prompt_digest,
    check_same_prompts,
    prompt_tokens_digest,
    recorded_digest,
)

PROMPTS = [[0, 7, 3], [0, 5], [0, 9, 9, 4]]


def by_hand(prompts: list[list[int]]) -> str:
    """Each prompt as its length then its ids, 8-byte little-endian integers, one after the other."""
    data = b"".join(len(ids).to_bytes(8, "little") + b"".join(i.to_bytes(8, "little") for i in ids) for ids in prompts)
    return hashlib.sha256(data).hexdigest()


def padded(prompts: list[list[int]], pad: int, width: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.full((len(prompts), width), pad, dtype=dtype)
    for row, ids in enumerate(prompts):
        tokens[row, : len(ids)] = ids
    return tokens, np.array([len(ids) for ids in prompts])


def test_the_digest_is_of_the_token_ids_and_where_each_prompt_ends_not_of_padding_or_dtype():
    digest = prompt_tokens_digest(*padded(PROMPTS, 0, 4, np.int32))
    assert digest == by_hand(PROMPTS) == prompt_tokens_digest(*padded(PROMPTS, 11, 9, np.int64))
    assert prompt_tokens_digest(*padded([[0, 7, 3], [0, 5], [0, 9, 9, 5]], 0, 4, np.int32)) != digest
    # the same ids with another boundary between two prompts, and the prompts in another order
    assert prompt_tokens_digest(*padded([[0, 7], [3, 0, 5], [0, 9, 9, 4]], 0, 4, np.int32)) != digest
    assert prompt_tokens_digest(*padded(PROMPTS[::-1], 0, 4, np.int32)) != digest


def write_cache(path, prompts, seed=1):
    model = tiny_bridge(n_layers=1, n_heads=2, d_model=16, d_head=8, d_mlp=32, n_ctx=8, d_vocab=12, seed=seed)
    options = CacheOptions(batch_size=2, show_progress=False)
    write_activation_cache(path, model, {"primary": prompts}, pad_token_id=0, options=options)
    return path


def test_caches_of_the_same_prompts_give_their_digest_and_caches_of_other_prompts_are_named(tmp_path):
    first, second = write_cache(tmp_path / "seed1.h5", PROMPTS), write_cache(tmp_path / "seed2.h5", PROMPTS, seed=2)
    assert cached_prompt_digest([first, second], "primary") == by_hand(PROMPTS)
    other = write_cache(tmp_path / "seed3.h5", [[0, 7, 3], [0, 5], [0, 9, 9, 5]], seed=3)
    with pytest.raises(ValueError) as error:
        cached_prompt_digest([first, second, other], "primary")
    assert str(error.value).startswith(
        f"activation caches {first} and {other} hold other token ids for prompt set 'primary'"
    )
    assert f"snakemake {other} --forcerun cache_activations" in str(error.value)


def write_groups(path, digest: str | None):
    observed = np.full((2, 1, 1, 1, 2, 2), 0.5, dtype=np.float32)
    grouped = GroupedSimilarity(observed, observed / 2, np.array([2, 1]), [1], np.array([2, 0, 1]), np.array([3, 2, 4]))
    attrs = {"promptset": "primary"} | ({PROMPT_DIGEST: digest} if digest else {})
    write_grouped_similarity(path, grouped, attrs=attrs)
    return path


def test_result_files_of_the_same_prompts_pass_and_of_other_prompts_fail_naming_both_files_and_digests(tmp_path):
    trained = write_groups(tmp_path / "primary.groups.h5", by_hand(PROMPTS))
    step0 = write_groups(tmp_path / "step0" / "primary.groups.h5", by_hand(PROMPTS))
    assert recorded_digest(step0) == by_hand(PROMPTS)
    check_same_prompts(trained, step0, "primary")
    other = by_hand(PROMPTS[:2])
    write_groups(step0, other)
    with pytest.raises(ValueError) as error:
        check_same_prompts(trained, step0, "primary")
    message = str(error.value)
    assert message.startswith(
        f"{trained} ({PROMPT_DIGEST} {by_hand(PROMPTS)}) and {step0} ({other}) were computed on other prompts of "
        "prompt set 'primary'"
    )
    assert f"`rm -f {step0} && snakemake {step0}`" in message and "--forcerun cache_activations" in message


def test_a_result_file_without_the_digest_is_refused_naming_it_and_the_rebuild(tmp_path):
    trained = write_groups(tmp_path / "primary.groups.h5", by_hand(PROMPTS))
    old = write_groups(tmp_path / "old.groups.h5", None)
    assert recorded_digest(old) is None
    with pytest.raises(ValueError) as error:
        check_same_prompts(trained, old, "primary")
    assert str(error.value).startswith(f"{old} records no {PROMPT_DIGEST} (written by older code)")
    assert f"rm -f {old} && snakemake {old}" in str(error.value)


def test_lengths_of_another_count_than_the_prompts_are_refused():
    tokens, lengths = padded(PROMPTS, 0, 4, np.int32)
    with pytest.raises(ValueError, match="zip"):  # not a digest of the first prompts only
        prompt_tokens_digest(tokens, lengths[:2])


def test_the_cache_message_ends_with_the_snapshot_rule(tmp_path):
    first = write_cache(tmp_path / "seed1.h5", PROMPTS)
    other = write_cache(tmp_path / "seed3.h5", [[0, 7, 3], [0, 5], [0, 9, 9, 5]], seed=3)
    with pytest.raises(ValueError) as error:
        cached_prompt_digest([first, other], "primary")
    assert str(error.value).endswith(
        f"`snakemake {other} --forcerun cache_activations` (cache_snapshot_activations for a snapshot's)"
    )


def test_the_message_of_other_prompts_gives_both_rebuilds_in_full(tmp_path):
    trained = write_groups(tmp_path / "primary.groups.h5", by_hand(PROMPTS))
    step0 = write_groups(tmp_path / "step0.groups.h5", by_hand(PROMPTS[:2]))
    with pytest.raises(ValueError) as error:
        check_same_prompts(trained, step0, "primary")
    assert (
        f"pair unrelated prompts; rebuild the one made on the old prompts, `rm -f {trained} && snakemake {trained}` "
        f"or `rm -f {step0} && snakemake {step0}` (if it still differs, its caches hold the old prompts: add "
        "`--forcerun cache_activations cache_snapshot_activations`)"
    ) in str(error.value)
