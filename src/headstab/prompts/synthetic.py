"""Demo prompts drawn from held-out synthetic documents, most with a word span repeated at a varying offset.

The demo's models learn the synthetic generator's text, so its prompts come from the same generator with
another seed (documents none of its corpora hold). Each prompt is a run of consecutive words of one
document; in a `repeat_share` of them a span of `span_words` of those words is copied, verbatim, after a
random later word, so the copy's offset from its source (and the gap between them) varies from prompt to
prompt: with a fixed offset an induction stripe would depend on the prompt's length alone, and the
prompt-permutation null's same-length partner would share it. A prompt is kept when the demo tokenizer
cuts it into `token_range` tokens; otherwise it is drawn again from the same seeded generator.

`python -m headstab.prompts synthetic --config config/demo.yaml --out resources/prompts/demo_synthetic.json`
trains the config's tokenizer on its corpus as rule train_tokenizer does and writes the prompts.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headstab.data.planted import generate_planted_documents
from headstab.data.synthetic import generate_synthetic_documents

__all__ = ["DemoPrompt", "demo_prompts", "write_demo_prompts"]

TOKEN_RANGE = (40, 80)  # demo tokens a prompt has, inclusive
SPAN_WORDS = (3, 8)  # words in the repeated span, inclusive
PLANTED_SPAN_WORDS = (6, 16)  # words (= tokens) in the repeated span of a planted-repeat corpus's prompt
MAX_DRAWS = 200  # draws per prompt before giving up


@dataclass(frozen=True)
class DemoPrompt:
    """One prompt and where its repeated span lies, in words (`source` and `copy` are -1 when it has none)."""

    text: str
    n_tokens: int
    source: int  # first word of the span's first copy
    copy: int  # first word of its second copy
    span: int  # words in the span

    @property
    def offset(self) -> int:
        """Words from the span's first copy to its second (the induction stripe's offset, in words)."""
        return self.copy - self.source


def _draw(words: list[str], rng: random.Random, n_words: int, repeat: bool, span_words: tuple[int, int]) -> DemoPrompt:
    """`n_words` consecutive words of `words` from a random start, with one span copied later when `repeat`."""
    start = rng.randrange(max(1, len(words) - n_words + 1))
    chosen = words[start : start + n_words]
    if not repeat or len(chosen) < span_words[0] + 1:
        return DemoPrompt(" ".join(chosen), 0, -1, -1, 0)
    span = rng.randint(span_words[0], min(span_words[1], len(chosen) - 1))
    source = rng.randrange(len(chosen) - span + 1)
    after = rng.randrange(source + span - 1, len(chosen))  # the copy follows word `after`
    text = chosen[: after + 1] + chosen[source : source + span] + chosen[after + 1 :]
    return DemoPrompt(" ".join(text), 0, source, after + 1, span)


def demo_prompts(
    seed: int,
    n_prompts: int,
    count_tokens: Callable[[str], int],
    token_range: tuple[int, int] = TOKEN_RANGE,
    repeat_share: float = 0.75,
    span_words: tuple[int, int] = SPAN_WORDS,
    documents: Iterable[str] | None = None,
) -> list[DemoPrompt]:
    """`n_prompts` prompts of `token_range` tokens (by `count_tokens`), prompt k from held-out document k of `seed`.

    Prompt k repeats a span when k mod 4 < 4 * repeat_share (so the share holds in every run of four prompts);
    deterministic: prompt k depends only on (seed, k) and `count_tokens`. `documents`: the held-out documents
    (at least `n_prompts`) when they are not the synthetic generator's of `seed`.
    """
    low, high = token_range
    if not 1 <= low <= high:
        raise ValueError(f"token_range must be 1 <= low <= high, got {token_range}")
    if not 0.0 <= repeat_share <= 1.0:
        raise ValueError(f"repeat_share must be in [0, 1], got {repeat_share}")
    prompts = []
    sources = generate_synthetic_documents(seed, n_prompts) if documents is None else documents
    for index, document in zip(range(n_prompts), sources, strict=False):
        rng = random.Random(f"headstab-demo-prompts:{seed}:{index}")
        words = [word for word in document.replace("\n", " ").split(" ") if word]
        repeat = index % 4 < round(4 * repeat_share)
        tokens_per_word = count_tokens(" ".join(words)) / max(1, len(words))
        copied = sum(span_words) / 2 if repeat else 0.0
        for _ in range(MAX_DRAWS):
            n_words = max(span_words[0] + 1, round(rng.uniform(low, high) / tokens_per_word - copied))
            drawn = _draw(words, rng, n_words, repeat, span_words)
            n_tokens = count_tokens(drawn.text)
            if low <= n_tokens <= high and (drawn.span > 0 or not repeat):
                prompts.append(DemoPrompt(drawn.text, n_tokens, drawn.source, drawn.copy, drawn.span))
                break
        else:
            raise ValueError(
                f"held-out document {index} of seed {seed} gave no prompt of {low}-{high} tokens in {MAX_DRAWS} "
                "draws; widen token_range"
            )
    return prompts


def _config_tokenizer(config: dict[str, Any], tokenizer: str) -> tuple[int, dict[str, Any]]:
    """(vocab_size, corpus entry) of a `source: train` tokenizer of a config trained on a synthetic corpus."""
    entry = config.get("tokenizers", {}).get(tokenizer)
    if entry is None or entry.get("source") != "train":
        raise ValueError(f"config key 'tokenizers.{tokenizer}' must be a tokenizer with source train")
    corpus = config.get("corpora", {}).get(entry["corpus"], {})
    if corpus.get("source") != "synthetic":
        raise ValueError(f"config key 'corpora.{entry['corpus']}' must be a synthetic corpus (source synthetic)")
    return int(entry["vocab_size"]), corpus


def write_demo_prompts(
    config_path: str | Path, out: str | Path, tokenizer: str = "demo_bpe", seed: int = 2, n_prompts: int = 100
) -> list[DemoPrompt]:
    """Train the config's `tokenizer` on its synthetic corpus (as rule train_tokenizer does) and write
    `n_prompts` prompts of held-out documents of `seed` to `out` as a JSON list of strings."""
    import yaml

    from headstab.refits.tokenizer import train_bpe_tokenizer

    config = yaml.safe_load(Path(config_path).read_text(encoding="utf-8"))
    vocab_size, corpus = _config_tokenizer(config, tokenizer)
    if seed == corpus["seed"] or any(
        entry.get("source") == "synthetic" and entry.get("seed") == seed for entry in config.get("corpora", {}).values()
    ):
        raise ValueError(f"prompt seed {seed} is a corpus seed of {config_path}; choose a held-out seed")
    planted = corpus.get("planted_repeats")
    if planted is not None:  # its `model: words` tokenizer reads one token per word; no repeats but the drawn one
        held_out = generate_planted_documents(
            seed, n_prompts, planted["words"], 2 * TOKEN_RANGE[1], (1, 1), (0, 0), 0.0
        )
        prompts = demo_prompts(
            seed, n_prompts, lambda text: len(text.split()), span_words=PLANTED_SPAN_WORDS, documents=held_out
        )
    else:
        texts = generate_synthetic_documents(corpus["seed"], corpus["n_documents"], corpus.get("repeated_spans", 0))
        with tempfile.TemporaryDirectory() as directory:
            bpe = train_bpe_tokenizer(texts, vocab_size, directory)
        prompts = demo_prompts(seed, n_prompts, lambda text: len(bpe(text)["input_ids"]))
    Path(out).write_text(json.dumps([p.text for p in prompts], indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return prompts
