"""Corpora as token shards (paper §3.1: the models train on a token stream cut into sequences).

- `synthetic`: the seeded synthetic text generator and its .jsonl writer;
- `sources`: the documents a corpus entry points at (hub, local files, save_to_disk) and shard i's part of them;
- `shards`: documents -> token shards and their records, the corpus meta.json, and reading shards back.
"""


class CorpusError(ValueError):
    """A corpus source is missing, malformed or too small; the message names the file or key and the fix."""
