"""Document sources: the `datasets` Dataset a corpus entry points at, and shard i's part of it.

Which documents shard `i` of `n` takes:
- in-memory datasets (`save_to_disk` directories, non-streamed hub datasets): rows i, i+n, i+2n, ...
- streamed datasets (hub, local files): whole files (`IterableDataset.shard`) when the dataset has
  at least `n` files, else rows i, i+n, i+2n, ... of the stream.

Local files: `.jsonl`/`.json` (one JSON object per line), `.parquet`, and `.txt`, where a document is
one blank-line-separated paragraph (the `datasets` text builder's `sample_by="paragraph"`). A
directory is read as all such files in it (one kind per directory).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from headstab.data import CorpusError

log = logging.getLogger(__name__)

LOCAL_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".txt": "text"}


def describe_source(corpus: dict[str, Any]) -> dict[str, Any]:
    """The config entry's keys that say where the documents come from (for shard metadata)."""
    keys = (
        "source",
        "name",
        "config_name",
        "split",
        "path",
        "pretokenized",
        "token_column",
        "text_column",
        "streaming",
        "seed",
        "n_documents",
        "repeated_spans",
        "n_tokens",
        "n_shards",
    )
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
        log.info(
            "loading hub dataset %s (config %s, split %s, streaming %s)",
            corpus["name"],
            corpus.get("config_name"),
            split,
            streaming,
        )
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
            if source == "local"
            else f"corpus '{corpus_name}': synthetic text {path} does not exist; rerun rule synthetic_text"
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
    plain_text = (
        corpus["source"] == "local"
        and not _is_save_to_disk_dir(Path(corpus["path"]))
        and (_local_data_files(Path(corpus["path"]), corpus_name)[0] == "text")
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
