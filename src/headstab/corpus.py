"""Corpora as token shards: a synthetic text generator, document sources and the shard format.

A corpus becomes `n_shards` token shards (paper §3.1: the models train on a token stream cut into
sequences). Shard `i` of `n` holds a disjoint part of the documents, so the shards are built by
independent jobs:

- `shard_{i:03d}.npy`: 1-D token stream `[token]`, uint16 when the tokenizer has at most 65,536 ids,
  else uint32, loadable with `np.load(path, mmap_mode="r")`. Raw-text documents are tokenized
  without special tokens and each is followed by the tokenizer's EOS token (GPT-2 style, so the
  concatenation of all shards has EOS between every two documents). Pre-tokenized rows (the paper's
  `NeelNanda/c4-code-tokenized-2b`) are copied as they are: their rows already carry separators.
- `shard_{i:03d}.json`: token and document counts, dtype, sha256 of the .npy, tokenizer identity,
  source description.
- `meta.json` (per corpus): the shard records aggregated.

Which documents shard `i` takes:
- in-memory datasets (`save_to_disk` directories, non-streamed hub datasets): rows i, i+n, i+2n, ...
- streamed datasets (hub, local files): whole files (`IterableDataset.shard`) when the dataset has
  at least `n` files, else rows i, i+n, i+2n, ... of the stream.

Local files: `.jsonl`/`.json` (one JSON object per line), `.parquet`, and `.txt`, where a document is
one blank-line-separated paragraph (the `datasets` text builder's `sample_by="paragraph"`). A
directory is read as all such files in it (one kind per directory).

`n_tokens` caps the corpus: shard i keeps `n_tokens // n_shards` tokens, the last shard also the
remainder, so the shards hold exactly `n_tokens` tokens; a source with fewer fails with a message
naming the corpus, the shard and `corpora.<name>.n_tokens`.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import shlex
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from headstab.fileio import atomic_path, read_json, save_npy_atomic, sha256_file, write_json_atomic

log = logging.getLogger(__name__)

LOCAL_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".txt": "text"}


class CorpusError(ValueError):
    """A corpus source is missing, malformed or too small; the message names the file or key and the fix."""


# ====================================================================== synthetic text
# Closed word lists keep the vocabulary small (a 1k BPE covers it) while entity names and random
# "code words" are built from syllables, so every document has fresh multi-token strings that can
# only be predicted by copying them from earlier in the context (induction).
_NOUNS = (
    "apple river garden window letter bridge market forest engine lantern mirror basket island "
    "castle ladder signal harbor meadow tower candle wagon valley bottle compass hammer pocket "
    "school kitchen village mountain station library journey teacher farmer doctor painter sailor "
    "stone cloud storm field road door table chair book song story picture machine number answer "
    "question problem idea plan map key box coin ring shell feather seed leaf branch"
).split()
_VERBS_PAST = (
    "found carried opened painted watched followed built repaired counted visited crossed "
    "remembered borrowed described measured planted cleaned moved lifted checked sold bought "
    "wrote read hid shared named drew kept lost"
).split()
_ADJECTIVES = (
    "red blue green small large old new quiet bright dark warm cold heavy light strange simple "
    "careful happy tired early late round narrow wide golden silver wooden broken hidden"
).split()
_ADVERBS = "slowly quickly carefully quietly suddenly finally again happily nearly always".split()
_PLACES = "the harbor,the old mill,the north gate,the market square,the river bank,the hill,the station,the library".split(",")
_TOPICS = "tools,fruits,colors,places,tasks,ideas,animals,rules".split(",")
_SYLLABLES = (
    "ka lo mi ra ven tor el an is ur zo be ri da mon fel gar hol jin kes lum nor pra qui sel "
    "tam vor wen yar zil bro cha dri fen gli har ost pel ruv sta thi vek"
).split()
_CODE_NAMES = "x y n total count value item result left right index size acc step".split()
_FUNCTION_VERBS = "compute merge scale count check update build find apply parse".split()


def _word(rng: random.Random, low: int = 2, high: int = 3) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(low, high)))


def _name(rng: random.Random) -> str:
    """A random two-part name, e.g. 'Korvel Tamisra' (several BPE tokens each)."""
    return f"{_word(rng).capitalize()} {_word(rng, 2, 4).capitalize()}"


def _sentence(rng: random.Random, people: Sequence[str]) -> str:
    a, b = rng.sample(people, 2) if len(people) > 1 else (people[0], people[0])
    noun, noun2 = rng.choice(_NOUNS), rng.choice(_NOUNS)
    kind = rng.randrange(6)
    if kind == 0:
        return f"{a} {rng.choice(_VERBS_PAST)} the {rng.choice(_ADJECTIVES)} {noun} near {rng.choice(_PLACES)}."
    if kind == 1:
        return f"{a} and {b} {rng.choice(_VERBS_PAST)} {rng.randint(2, 12)} {noun}s."
    if kind == 2:
        return f"Later, {a} said that the {noun} of {b} was {rng.choice(_ADJECTIVES)}."
    if kind == 3:
        return f"{a} {rng.choice(_ADVERBS)} {rng.choice(_VERBS_PAST)} a {noun} for {b}."
    if kind == 4:
        return f"The {rng.choice(_ADJECTIVES)} {noun} was {rng.choice(_ADVERBS)} {rng.choice(_VERBS_PAST)} by {a}."
    return f"When {a} {rng.choice(_VERBS_PAST)} the {noun}, {b} {rng.choice(_VERBS_PAST)} the {noun2}."


def _narrative(rng: random.Random, people: Sequence[str]) -> str:
    return " ".join(_sentence(rng, people) for _ in range(rng.randint(3, 7)))


def _dialogue(rng: random.Random, people: Sequence[str]) -> str:
    speakers = rng.sample(people, 2) if len(people) > 1 else [people[0], people[0]]
    turns, previous = [], None
    for turn in range(rng.randint(3, 6)):
        speaker = speakers[turn % 2]
        if previous is not None and rng.random() < 0.3:
            line = f'You said "{previous}" Yes, I did.'  # verbatim quote of the last turn: copying
        else:
            line = _sentence(rng, people)
        turns.append(f"{speaker}: {line}")
        previous = line if '"' not in line else None
    return "\n".join(turns)


def _item_list(rng: random.Random, people: Sequence[str]) -> str:
    items = rng.sample(_NOUNS, rng.randint(3, 6))
    header = f"{rng.choice(people)} made a list of {rng.choice(_TOPICS)}:"
    if rng.random() < 0.5:
        lines = [f"{k}. {rng.choice(_ADJECTIVES)} {item}" for k, item in enumerate(items, 1)]
    else:
        lines = [f"- {item}" for item in items]
    return "\n".join([header, *lines])


def _arithmetic(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(3, 6)):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        op = rng.choice("+-*")
        if op == "*":
            a, b = a % 13, b % 13
        result = a + b if op == "+" else a - b if op == "-" else a * b
        lines.append(f"{a} {op} {b} = {result}")
    return "Arithmetic:\n" + "\n".join(lines)


def _brackets(rng: random.Random, depth: int = 0) -> str:
    """A nested bracket expression with words inside, e.g. '[lo (mira {ven}) tor]'; always balanced."""
    parts = []
    for _ in range(rng.randint(1, 3)):
        if depth < 4 and rng.random() < 0.5:
            parts.append(_brackets(rng, depth + 1))
        else:
            parts.append(_word(rng, 1, 2))
    opening, closing = rng.choice((("(", ")"), ("[", "]"), ("{", "}")))
    return opening + " ".join(parts) + closing


def _code(rng: random.Random) -> str:
    name = f"{rng.choice(_FUNCTION_VERBS)}_{rng.choice(_NOUNS)}"
    a, b, v = rng.sample(_CODE_NAMES, 3)
    op, limit = rng.choice("+-*"), rng.randint(1, 20)
    lines = [
        f"def {name}({a}, {b}):",
        f"    {v} = ({a} {op} {b})",
        f"    if {v} > {limit}:",
        f"        return [{v}, {limit}]",
        f"    return [{v}]",
        f"print({name}({rng.randint(0, 9)}, {rng.randint(0, 9)}))",
    ]
    return "\n".join(lines)


def _repeated_sequence(rng: random.Random) -> str:
    """A random sequence of made-up words, then the same sequence again (pure induction)."""
    words = " ".join(_word(rng, 1, 2) for _ in range(rng.randint(4, 10)))
    return f"Code words: {words}. Repeat the code words: {words}."


def synthetic_document(rng: random.Random) -> str:
    """One document: a few named people introduced, then 3-7 sections that reuse their names."""
    people = [_name(rng) for _ in range(rng.randint(2, 4))]
    intro = "This is a story about " + ", ".join(people[:-1]) + f" and {people[-1]}."
    sections = [intro]
    for _ in range(rng.randint(3, 7)):
        kind = rng.randrange(7)
        if kind == 0:
            sections.append(_narrative(rng, people))
        elif kind == 1:
            sections.append(_dialogue(rng, people))
        elif kind == 2:
            sections.append(_item_list(rng, people))
        elif kind == 3:
            sections.append(_arithmetic(rng))
        elif kind == 4:
            sections.append(f"{rng.choice(people)} wrote {_brackets(rng)} on the {rng.choice(_NOUNS)}.")
        elif kind == 5:
            sections.append(_code(rng))
        else:
            sections.append(_repeated_sequence(rng))
    sections.append(f"The end of the story about {people[0]}.")
    return "\n\n".join(sections)


def generate_synthetic_documents(seed: int, n_documents: int) -> Iterator[str]:
    """`n_documents` English-like documents with structure for attention to learn.

    Deterministic: document k depends only on (seed, k), through its own `random.Random`, never
    global state; so the same seed gives identical text and a longer corpus extends a shorter one.
    """
    if n_documents < 0:
        raise ValueError(f"n_documents must be >= 0, got {n_documents}")
    for index in range(n_documents):
        # String seeds hash with sha512 in `random`: stable across Python runs and processes.
        yield synthetic_document(random.Random(f"headstab-synthetic:{seed}:{index}"))


def write_jsonl(texts: Iterable[str], path: str | Path) -> int:
    """Write one `{"text": ...}` object per line (atomically); returns the number of documents."""
    count = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for text in texts:
            handle.write(json.dumps({"text": text}, ensure_ascii=False))
            handle.write("\n")
            count += 1
    return count


# ====================================================================== sources
def describe_source(corpus: dict[str, Any]) -> dict[str, Any]:
    """The config entry's keys that say where the documents come from (for shard metadata)."""
    keys = ("source", "name", "config_name", "split", "path", "pretokenized", "token_column",
            "text_column", "streaming", "seed", "n_documents", "n_tokens", "n_shards")
    return {key: corpus[key] for key in keys if key in corpus}


def _local_data_files(path: Path, corpus_name: str) -> tuple[str, list[str]]:
    """(datasets builder, files) for a local file or directory of files."""
    if path.is_file():
        files = [path]
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in LOCAL_FILE_BUILDERS)
    if not files:
        raise CorpusError(
            f"corpus '{corpus_name}': {path} holds no .jsonl, .json, .parquet or .txt files and is not a "
            f"save_to_disk directory; fix config key 'corpora.{corpus_name}.path'"
        )
    builders = {LOCAL_FILE_BUILDERS.get(p.suffix) for p in files}
    if None in builders or len(builders) > 1:
        raise CorpusError(
            f"corpus '{corpus_name}': {path} must hold files of one kind (.jsonl/.json, .parquet or .txt), "
            f"found suffixes {sorted({p.suffix for p in files})}; fix config key 'corpora.{corpus_name}.path'"
        )
    return builders.pop(), [str(p) for p in files]


def _is_save_to_disk_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file())


def open_dataset(corpus: dict[str, Any], corpus_name: str = "corpus") -> Any:
    """The `datasets` Dataset or IterableDataset a corpus entry points at (no sharding yet).

    corpus: a `corpora.<name>` config entry; for source synthetic, `path` must name its text.jsonl.
    """
    import datasets

    source = corpus["source"]
    split = corpus.get("split", "train")
    streaming = corpus.get("streaming", True)
    if source == "hub":
        log.info("loading hub dataset %s (config %s, split %s, streaming %s)",
                 corpus["name"], corpus.get("config_name"), split, streaming)
        return datasets.load_dataset(corpus["name"], corpus.get("config_name"), split=split, streaming=streaming)
    if source not in ("local", "synthetic"):
        raise CorpusError(f"corpus '{corpus_name}': unknown source '{source}'; use hub, local or synthetic")
    if "path" not in corpus:
        raise CorpusError(f"corpus '{corpus_name}': no path given; set config key 'corpora.{corpus_name}.path'")
    path = Path(corpus["path"])
    if not path.exists():
        raise CorpusError(
            f"corpus '{corpus_name}': local path {path} does not exist; fix config key "
            f"'corpora.{corpus_name}.path' (a save_to_disk directory or .jsonl/.parquet/.txt files)"
            if source == "local" else
            f"corpus '{corpus_name}': synthetic text {path} does not exist; rerun rule synthetic_text"
        )
    if _is_save_to_disk_dir(path):
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise CorpusError(
                    f"corpus '{corpus_name}': {path} has splits {sorted(loaded)}, not '{split}'; "
                    f"set config key 'corpora.{corpus_name}.split'"
                )
            loaded = loaded[split]
        return loaded
    builder, files = _local_data_files(path, corpus_name)
    kwargs = {"sample_by": "paragraph"} if builder == "text" else {}
    # Streaming reads the files directly: no Arrow copy in the datasets cache (home directories on clusters).
    return datasets.load_dataset(builder, data_files=files, split="train", streaming=streaming, **kwargs)


def shard_dataset(dataset: Any, shard_index: int, n_shards: int) -> Iterable[dict[str, Any]]:
    """Rows of shard `shard_index` of `n_shards` (disjoint, together all rows); see the module docstring."""
    import datasets

    if not 0 <= shard_index < n_shards:
        raise ValueError(f"shard index {shard_index} is outside 0..{n_shards - 1}")
    if n_shards == 1:
        return dataset
    if isinstance(dataset, datasets.Dataset):
        return dataset.shard(num_shards=n_shards, index=shard_index, contiguous=False)
    if getattr(dataset, "num_shards", 0) >= n_shards:
        return dataset.shard(num_shards=n_shards, index=shard_index)
    return itertools.islice(dataset, shard_index, None, n_shards)


def _column_names(dataset: Any) -> list[str] | None:
    names = getattr(dataset, "column_names", None)
    return list(names) if names is not None else None


def iter_documents(
    corpus: dict[str, Any], shard_index: int, n_shards: int, corpus_name: str = "corpus"
) -> Iterator[str | list[int]]:
    """Documents of one shard: strings, or token-id lists for `pretokenized: true` sources.

    corpus: a `corpora.<name>` config entry (for source synthetic with `path` set to its text.jsonl).
    """
    dataset = open_dataset(corpus, corpus_name)
    pretokenized = corpus.get("pretokenized", False)
    column = corpus.get("token_column", "tokens") if pretokenized else corpus.get("text_column", "text")
    key = "token_column" if pretokenized else "text_column"
    names = _column_names(dataset)
    where = corpus.get("path") or corpus.get("name")
    if names is not None and column not in names:
        raise CorpusError(
            f"corpus '{corpus_name}': column '{column}' not found in {where}; its columns are {names}; "
            f"set config key 'corpora.{corpus_name}.{key}'"
        )
    # The text builder splits paragraphs on exactly "\n\n": strip the leftover newlines, skip empty ones.
    plain_text = corpus["source"] == "local" and not _is_save_to_disk_dir(Path(corpus["path"])) and (
        _local_data_files(Path(corpus["path"]), corpus_name)[0] == "text"
    )
    for row in shard_dataset(dataset, shard_index, n_shards):
        if column not in row:
            raise CorpusError(
                f"corpus '{corpus_name}': column '{column}' not found in {where}; its columns are "
                f"{sorted(row)}; set config key 'corpora.{corpus_name}.{key}'"
            )
        document = row[column]
        if plain_text:
            document = document.strip("\n")
            if not document.strip():
                continue
        yield document


# ====================================================================== tokens and shards
def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab_size <= 65,536), else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def shard_token_quota(n_tokens: int | None, n_shards: int, shard_index: int) -> int | None:
    """Tokens shard `shard_index` keeps under a corpus cap of `n_tokens` (None: no cap).

    Every shard keeps n_tokens // n_shards, the last one also the remainder, so they sum to n_tokens.
    """
    if n_tokens is None:
        return None
    quota = n_tokens // n_shards
    return quota + (n_tokens % n_shards if shard_index == n_shards - 1 else 0)


def iter_token_chunks(
    documents: Iterable[str | Sequence[int]],
    tokenizer: Any | None,
    eos_id: int | None,
    batch_size: int = 512,
) -> Iterator[tuple[np.ndarray, int]]:
    """(tokens `[token]` int64, number of documents) per batch of documents.

    Text documents are tokenized without special tokens and each followed by `eos_id`; token-id
    lists (pre-tokenized rows) are copied unchanged (`tokenizer` may be None then).
    """
    batch: list[Any] = []

    def flush() -> tuple[np.ndarray, int]:
        if isinstance(batch[0], str):
            if tokenizer is None or eos_id is None:
                raise ValueError("text documents need a tokenizer and an EOS id")
            ids = tokenizer(batch, add_special_tokens=False)["input_ids"]
            pieces = [np.asarray(seq + [eos_id], dtype=np.int64) for seq in ids]
        else:
            pieces = [np.asarray(row, dtype=np.int64).reshape(-1) for row in batch]
        return np.concatenate(pieces) if pieces else np.zeros(0, np.int64), len(batch)

    for document in documents:
        if batch and isinstance(document, str) != isinstance(batch[0], str):
            raise ValueError("documents mix text and token ids")
        batch.append(document)
        if len(batch) >= batch_size:
            yield flush()
            batch = []
    if batch:
        yield flush()


def tokenize_documents(documents: Iterable[str | Sequence[int]], tokenizer: Any | None, eos_id: int | None) -> np.ndarray:
    """All documents as one token stream `[token]` (int64): text + EOS per document, or copied ids."""
    chunks = [tokens for tokens, _ in iter_token_chunks(documents, tokenizer, eos_id)]
    return np.concatenate(chunks) if chunks else np.zeros(0, np.int64)


def write_token_stream(
    chunks: Iterable[tuple[np.ndarray, int]],
    path: str | Path,
    vocab_size: int,
    max_tokens: int | None = None,
    progress: Any | None = None,
) -> tuple[int, int]:
    """Stream token chunks into a 1-D .npy file of `token_dtype(vocab_size)`, stopping at `max_tokens`.

    Chunks go to a raw temporary file first (memory stays at one chunk, also for 10^9-token shards),
    then into the .npy. Returns (tokens written, documents consumed). Raises CorpusError when an id
    is outside the vocabulary.
    """
    path = Path(path)
    dtype = token_dtype(vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    n_tokens = n_documents = 0
    raw_fd, raw_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".raw")
    try:
        with os.fdopen(raw_fd, "wb") as raw:
            for tokens, docs in chunks:
                if max_tokens is not None:
                    tokens = tokens[: max_tokens - n_tokens]
                if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
                    bad = int(tokens.max() if tokens.max() >= vocab_size else tokens.min())
                    raise CorpusError(
                        f"token id {bad} is outside the tokenizer's vocabulary of {vocab_size} ids while writing "
                        f"{path}; the corpus was tokenized with a different tokenizer: fix the corpus's `tokenizer`"
                    )
                raw.write(tokens.astype(dtype).tobytes())
                n_tokens += int(tokens.size)
                n_documents += docs
                if progress is not None:
                    progress.update(int(tokens.size))
                if max_tokens is not None and n_tokens >= max_tokens:
                    break
        raw_tokens = np.memmap(raw_name, dtype=dtype, mode="r", shape=(n_tokens,)) if n_tokens else np.zeros(0, dtype)
        save_npy_atomic(np.asarray(raw_tokens), path)
        del raw_tokens
    finally:
        if os.path.exists(raw_name):
            os.remove(raw_name)
    return n_tokens, n_documents


def write_shard(tokens: np.ndarray, path: str | Path, meta: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """Write tokens `[token]` as a shard .npy plus its .json record; returns the record.

    The record is `meta` plus n_tokens, dtype, file and sha256 (of the .npy bytes).
    """
    path = Path(path)
    tokens = np.asarray(tokens).reshape(-1)
    n_tokens, _ = write_token_stream([(tokens, 0)], path, vocab_size)
    return write_shard_record(path, n_tokens, meta)


def write_shard_record(npy_path: str | Path, n_tokens: int, meta: dict[str, Any]) -> dict[str, Any]:
    """Write `shard_XXX.json` beside `shard_XXX.npy`: meta + n_tokens, dtype, file, sha256."""
    npy_path = Path(npy_path)
    stored = np.load(npy_path, mmap_mode="r")
    record = {
        **meta,
        "file": npy_path.name,
        "n_tokens": int(n_tokens),
        "dtype": str(stored.dtype),
        "sha256": sha256_file(npy_path),
    }
    write_json_atomic(npy_path.with_suffix(".json"), record)
    return record


def check_shard_size(n_found: int, quota: int | None, corpus_name: str, shard_index: int, n_shards: int,
                     n_tokens: int | None) -> None:
    """Fail when a capped shard found fewer tokens than its quota (the source is too small)."""
    if quota is not None and n_found < quota:
        raise CorpusError(
            f"corpus '{corpus_name}' is too small for n_tokens={n_tokens}: shard {shard_index} of {n_shards} "
            f"needs {quota} tokens but its documents hold only {n_found} (about {n_found * n_shards} in the "
            f"corpus); lower config key 'corpora.{corpus_name}.n_tokens' (or set it to null for the whole corpus)"
        )


def build_shard(
    corpus: dict[str, Any],
    corpus_name: str,
    shard_index: int,
    out_path: str | Path,
    tokenizer: Any,
    tokenizer_meta: dict[str, Any],
    progress: Any | None = None,
) -> dict[str, Any]:
    """Tokenize shard `shard_index` of a corpus entry into `out_path` (.npy) and its .json record.

    tokenizer: a transformers tokenizer (len() is its vocabulary; eos_token_id separates documents).
    tokenizer_meta: `headstab.tokenizer.tokenizer_identity` of it. Returns the shard record.
    """
    n_shards = corpus["n_shards"]
    if not 0 <= shard_index < n_shards:
        raise CorpusError(
            f"corpus '{corpus_name}' has n_shards={n_shards}; shard {shard_index} does not exist "
            f"(valid: 000..{n_shards - 1:03d})"
        )
    eos_id = tokenizer.eos_token_id
    if eos_id is None and not corpus.get("pretokenized", False):
        raise CorpusError(
            f"tokenizer {tokenizer_meta.get('path')} of corpus '{corpus_name}' has no EOS token to separate documents; "
            "use a tokenizer with eos_token set"
        )
    quota = shard_token_quota(corpus.get("n_tokens"), n_shards, shard_index)
    documents = iter_documents(corpus, shard_index, n_shards, corpus_name)
    chunks = iter_token_chunks(documents, tokenizer, eos_id)
    n_found, n_documents = write_token_stream(chunks, out_path, len(tokenizer), quota, progress)
    check_shard_size(n_found, quota, corpus_name, shard_index, n_shards, corpus.get("n_tokens"))
    meta = {
        "corpus": corpus_name,
        "shard_index": shard_index,
        "n_shards": n_shards,
        "n_documents": n_documents,
        "token_quota": quota,
        "eos_token_id": None if corpus.get("pretokenized", False) else eos_id,
        "source": describe_source(corpus),
        "tokenizer": tokenizer_meta,
    }
    return write_shard_record(out_path, n_found, meta)


def aggregate_shard_records(records: Sequence[dict[str, Any]], corpus_name: str) -> dict[str, Any]:
    """Corpus meta.json content from its shard records (in shard order); checks they agree."""
    if not records:
        raise CorpusError(f"corpus '{corpus_name}': no shard records to aggregate")
    tokenizer_hashes = {r["tokenizer"].get("tokenizer_json_sha256") for r in records}
    if len(tokenizer_hashes) > 1:
        raise CorpusError(
            f"corpus '{corpus_name}': shards were tokenized with different tokenizers ({sorted(map(str, tokenizer_hashes))}); "
            "rebuild its shards with `snakemake --forcerun tokenize_shard` (with the run's --configfile)"
        )
    indices = [r["shard_index"] for r in records]
    if indices != list(range(len(records))) or records[0]["n_shards"] != len(records):
        raise CorpusError(f"corpus '{corpus_name}': shard records {indices} are not shards 0..{records[0]['n_shards'] - 1}")
    return {
        "corpus": corpus_name,
        "n_tokens": sum(r["n_tokens"] for r in records),
        "n_documents": sum(r["n_documents"] for r in records),
        "n_shards": len(records),
        "dtype": records[0]["dtype"],
        "eos_token_id": records[0].get("eos_token_id"),
        "source": records[0]["source"],
        "tokenizer": records[0]["tokenizer"],
        "shards": [
            {key: r[key] for key in ("file", "n_tokens", "n_documents", "sha256")} for r in records
        ],
    }


def read_corpus_meta(path: str | Path) -> dict[str, Any]:
    """A corpus meta.json (written by rule corpus_meta), with its file named in errors."""
    meta = read_json(path, what="corpus metadata")
    for key in ("n_tokens", "shards", "tokenizer", "dtype"):
        if key not in meta:
            raise CorpusError(f"corpus metadata {path} lacks '{key}'; rebuild it with `snakemake {shlex.quote(str(path))} --forcerun corpus_meta`")
    return meta


def load_shards(paths: Iterable[str | Path]) -> list[np.memmap]:
    """Memory-mapped token shards, each `[token]` (uint16 or uint32), in the given order."""
    shards = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"token shard {path} does not exist; build it with `snakemake {shlex.quote(str(path))}` (rule tokenize_shard)")
        array = np.load(path, mmap_mode="r", allow_pickle=False)
        if array.ndim != 1 or array.dtype not in (np.uint16, np.uint32):
            raise CorpusError(f"token shard {path} holds a {array.dtype} array of shape {array.shape}, not a 1-D "
                              f"uint16/uint32 token stream; rebuild it with `snakemake {shlex.quote(str(path))} --forcerun tokenize_shard`")
        shards.append(array)
    return shards
