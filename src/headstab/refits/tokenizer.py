"""Tokenizers as directories loadable with `transformers.AutoTokenizer.from_pretrained`.

Everything downstream (shards, TransformerLens models, prompt caches) loads a tokenizer from its
directory, never from an in-memory `tokenizer_object`: TransformerLens fails on the latter, and a
directory is what a checkpoint's metadata can point at. Each directory built by the workflow holds a
`meta.json` (written last, the rules' sentinel) with the tokenizer's identity: where it came from,
vocabulary size, special tokens, BOS/EOS ids and the sha256 of tokenizer.json; and `environment.json`, the
environment of the job that built it (kept out of meta.json, whose bytes must not change with time or host).
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from headstab.fileio import read_json, sha256_file, write_json_atomic
from headstab.provenance.records import ENVIRONMENT_FILE, environment_record

log = logging.getLogger(__name__)

ENDOFTEXT = "<|endoftext|>"


class TokenizerError(ValueError):
    """A tokenizer directory is missing or unusable; the message names it and the rule that builds it."""


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int, out_dir: str | Path) -> Any:
    """Train a byte-level BPE tokenizer (GPT-2 style) on `texts` and save it to `out_dir`.

    `<|endoftext|>` (id 0) is BOS, EOS, pad and unk, as in GPT-2; byte-level pre-tokenization means
    every string round-trips through encode/decode. Returns the tokenizer reloaded from `out_dir`
    with AutoTokenizer (so a save that cannot be loaded fails here, not in training).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + 1:
        raise TokenizerError(
            f"vocab_size {vocab_size} is below the {len(alphabet) + 1} ids a byte-level BPE needs "
            "(256 bytes + <|endoftext|>); raise the tokenizer's vocab_size"
        )
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[ENDOFTEXT], initial_alphabet=alphabet, show_progress=False
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=ENDOFTEXT, eos_token=ENDOFTEXT, pad_token=ENDOFTEXT, unk_token=ENDOFTEXT
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(str(out_dir))
    log.info("trained byte-level BPE with %d ids into %s", bpe.get_vocab_size(), out_dir)
    return _from_pretrained(out_dir)


def train_word_tokenizer(texts: Iterable[str], vocab_size: int, out_dir: str | Path) -> Any:
    """A word-level tokenizer of every space-separated word in `texts` (sorted), saved to `out_dir`.

    `<|endoftext|>` (id 0) is BOS, EOS, pad and unk, as in train_bpe_tokenizer; words get ids 1.. in sorted
    order, so the same words give the same ids whatever their order in the corpus. For corpora of a closed
    vocabulary (headstab.data.planted), where one word is one token. Raises TokenizerError when the corpus
    has more than `vocab_size` - 1 distinct words. Returns the tokenizer reloaded from `out_dir`.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({word for text in texts for word in text.split()})
    if len(words) + 1 > vocab_size:
        raise TokenizerError(
            f"the corpus has {len(words):,} distinct words, more than the {vocab_size - 1:,} that vocab_size "
            f"{vocab_size:,} leaves beside <|endoftext|>; raise the tokenizer's vocab_size"
        )
    vocab = {ENDOFTEXT: 0, **{word: index for index, word in enumerate(words, start=1)}}
    word_level = Tokenizer(models.WordLevel(vocab, unk_token=ENDOFTEXT))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    word_level.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=word_level, bos_token=ENDOFTEXT, eos_token=ENDOFTEXT, pad_token=ENDOFTEXT, unk_token=ENDOFTEXT
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(str(out_dir))
    log.info("built a word-level tokenizer of %d ids into %s", len(vocab), out_dir)
    return _from_pretrained(out_dir)


def fetch_hub_tokenizer(hub_id: str, out_dir: str | Path) -> Any:
    """Download tokenizer `hub_id` from the Hugging Face hub and save it to `out_dir` (needs internet)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(hub_id, trust_remote_code=False)
    except OSError as err:
        raise TokenizerError(
            f"cannot load tokenizer '{hub_id}' from the Hugging Face hub ({err}); run rule fetch_tokenizer on a "
            "node with internet access, or download it and use `source: local` with `path:`"
        ) from err
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out_dir))
    log.info("saved tokenizer %s (%d ids) into %s", hub_id, len(tokenizer), out_dir)
    return _from_pretrained(out_dir)


def load_tokenizer(directory: str | Path) -> Any:
    """AutoTokenizer.from_pretrained(directory), with an error naming the directory and how to build it; a
    directory the workflow built (its meta.json) must still be the tokenizer meta.json records
    (`check_tokenizer_record`)."""
    directory = Path(directory)
    tokenizer = _from_pretrained(directory)
    check_tokenizer_record(directory, tokenizer)
    return tokenizer


def _from_pretrained(directory: Path) -> Any:
    from transformers import AutoTokenizer

    if not directory.is_dir() or not (directory / "tokenizer_config.json").is_file():
        raise TokenizerError(
            f"tokenizer directory {directory} does not exist or has no tokenizer_config.json; build it with "
            "rule train_tokenizer (source: train) or fetch_tokenizer (source: hub), e.g. "
            f"`snakemake {shlex.quote(str(directory / 'meta.json'))}`, or for source: local save one there with "
            "save_pretrained"
        )
    try:
        return AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise TokenizerError(
            f"tokenizer directory {directory} cannot be loaded with AutoTokenizer ({err}); {_repair_hint(directory)}"
        ) from err


def check_tokenizer_record(directory: str | Path, tokenizer: Any) -> None:
    """Fail when a tokenizer the workflow built changed after its meta.json was written: tokenizer.json against
    the recorded sha256, and what the loaded tokenizer is (vocabulary size, special tokens and their ids,
    class) against the recorded values. Every shard, cache and table of the run was made with the recorded
    tokenizer; an edited one would silently mix two. A directory without a tokenizer meta.json (source: local)
    is the user's and is not checked."""
    directory = Path(directory)
    meta_path = directory / "meta.json"
    if not meta_path.is_file():
        return
    meta = read_json(meta_path, "tokenizer metadata")
    if not isinstance(meta, dict) or "tokenizer_json_sha256" not in meta:
        return  # not a tokenizer's record (a hub family's checkpoint directory holds its tokenizer beside meta.json)
    recorded, tokenizer_json = meta["tokenizer_json_sha256"], directory / "tokenizer.json"
    actual = sha256_file(tokenizer_json) if tokenizer_json.is_file() else None
    if actual != recorded:
        found = f"has sha256 {actual}" if actual else "is missing"
        raise TokenizerError(
            f"tokenizer file {tokenizer_json} {found}, but {meta_path} records sha256 {recorded}: it changed after "
            f"the workflow built it, and the run's shards and caches were made with the recorded one; "
            f"{_changed_hint(directory)}"
        )
    now = _loaded_identity(tokenizer)
    differing = [
        f"{key} (recorded {meta[key]!r}, now {now[key]!r})" for key in now if key in meta and meta[key] != now[key]
    ]
    if differing:
        raise TokenizerError(
            f"tokenizer directory {directory} no longer loads as {meta_path} records: {', '.join(differing)} (a "
            f"changed tokenizer_config.json or special_tokens_map.json?); {_changed_hint(directory)}"
        )


def _changed_hint(directory: Path) -> str:
    quoted = shlex.quote(str(directory))
    return (
        f"rebuild it with `rm -rf {quoted} && snakemake {shlex.quote(str(directory / 'meta.json'))}`; to use the "
        f"changed tokenizer instead, copy {quoted} without its meta.json to a directory of your own and point the "
        "config's tokenizers.<name> at it (source: local, path: that directory), which rebuilds every output "
        "made with it"
    )


def _repair_hint(directory: Path) -> str:
    """Rebuild advice: the workflow may delete what it built (it wrote meta.json), never the user's own directory."""
    if (directory / "meta.json").is_file():
        quoted = shlex.quote(str(directory))
        return f"it was built by the workflow: rebuild it with `rm -rf {quoted} && snakemake {shlex.quote(str(directory / 'meta.json'))}`"
    return (
        "it is not one the workflow built (no meta.json), so headstab will not touch it: repair or replace it, or "
        "point config key tokenizers.<name>.path at a directory saved with save_pretrained"
    )


def _loaded_identity(tokenizer: Any) -> dict[str, Any]:
    """What a loaded tokenizer is, as meta.json records it."""
    return {
        "vocab_size": len(tokenizer),
        "special_tokens": list(tokenizer.all_special_tokens),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "tokenizer_class": type(tokenizer).__name__,
    }


def tokenizer_identity(directory: str | Path, origin: dict[str, Any] | None = None) -> dict[str, Any]:
    """What identifies a tokenizer: vocabulary, special tokens, BOS/EOS ids, sha256 of tokenizer.json.

    origin: where it came from (e.g. {"source": "hub", "name": "gpt2"}); None reads it from the
    directory's meta.json when there is one, else records {"source": "local"}. Checks the directory against
    its meta.json (`load_tokenizer`).
    """
    directory = Path(directory)
    tokenizer = load_tokenizer(directory)
    if origin is None:
        meta_path = directory / "meta.json"
        origin = (
            read_json(meta_path, "tokenizer metadata").get("origin", {}) if meta_path.is_file() else {"source": "local"}
        )
    return _identity(directory, tokenizer, origin)


def _identity(directory: Path, tokenizer: Any, origin: dict[str, Any]) -> dict[str, Any]:
    tokenizer_json = directory / "tokenizer.json"
    return {
        "path": str(directory),
        "origin": dict(origin),
        **_loaded_identity(tokenizer),
        "tokenizer_json_sha256": sha256_file(tokenizer_json) if tokenizer_json.is_file() else None,
    }


def write_tokenizer_meta(directory: str | Path, origin: dict[str, Any]) -> dict[str, Any]:
    """Write `meta.json` (the identity) into a tokenizer directory just built, after `environment.json` (who
    built it, where, when); returns the identity. meta.json holds content only: the same tokenizer rebuilt
    gives the same bytes, so Snakemake (which compares an input's checksum when its date changed) reruns
    nothing downstream."""
    directory = Path(directory)
    meta = _identity(directory, _from_pretrained(directory), origin)
    write_json_atomic(directory / ENVIRONMENT_FILE, environment_record())
    write_json_atomic(directory / "meta.json", meta)
    return meta
