"""Seeded synthetic text: English-like documents with structure for attention heads to learn.

Document k depends only on (seed, k), so the same seed gives identical text and a longer corpus
extends a shorter one.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from headstab.fileio import atomic_path

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
_PLACES = (
    "the harbor,the old mill,the north gate,the market square,the river bank,the hill,the station,the library".split(
        ","
    )
)
_TOPICS = "tools,fruits,colors,places,tasks,ideas,animals,rules".split(",")
_SYLLABLES = (
    "ka lo mi ra ven tor el an is ur zo be ri da mon fel gar hol jin kes lum nor pra qui sel "
    "tam vor wen yar zil bro cha dri fen gli har ost pel ruv sta thi vek"
).split()
_CODE_NAMES = "x y n total count value item result left right index size acc step".split()
_FUNCTION_VERBS = "compute merge scale count check update build find apply parse".split()
REPEATED_SPAN_WORDS = (6, 24)  # words in one inserted copy (insert_repeated_spans): 8-40 BPE tokens


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


def insert_repeated_spans(
    text: str, rng: random.Random, n_spans: int, span_words: tuple[int, int] = REPEATED_SPAN_WORDS
) -> str:
    """`text` with `n_spans` verbatim copies of its own word spans inserted later in it.

    Each copy repeats U[span_words] consecutive words from a random place and is inserted, with a space
    before it, after a random later word (so the copy's distance from its source varies). Removing
    the inserted copies gives `text` back; a text with fewer words than a span is returned unchanged.
    """
    low, high = span_words
    if not 1 <= low <= high:
        raise ValueError(f"span_words must be 1 <= low <= high, got {span_words}")
    words = text.split(" ")  # split on single spaces: newlines stay inside words, so joining restores them
    for _ in range(n_spans):
        length = rng.randint(low, high)
        if len(words) <= length:
            break
        start = rng.randrange(len(words) - length)
        after = rng.randrange(start + length - 1, len(words))  # the copy follows word `after`
        words[after + 1 : after + 1] = words[start : start + length]
    return " ".join(words)


def generate_synthetic_documents(seed: int, n_documents: int, repeated_spans: int = 0) -> Iterator[str]:
    """`n_documents` English-like documents with structure for attention to learn.

    Deterministic: document k depends only on (seed, k), through its own `random.Random`, never
    global state; so the same seed gives identical text and a longer corpus extends a shorter one.
    `repeated_spans` > 0 inserts that many verbatim copies of earlier word spans into each document
    (insert_repeated_spans, drawn from a second generator: the words around them are those of
    `repeated_spans` 0).
    """
    if n_documents < 0:
        raise ValueError(f"n_documents must be >= 0, got {n_documents}")
    if repeated_spans < 0:
        raise ValueError(f"repeated_spans must be >= 0, got {repeated_spans}")
    for index in range(n_documents):
        # String seeds hash with sha512 in `random`: stable across Python runs and processes.
        document = synthetic_document(random.Random(f"headstab-synthetic:{seed}:{index}"))
        if repeated_spans:
            document = insert_repeated_spans(
                document, random.Random(f"headstab-synthetic-repeats:{seed}:{index}"), repeated_spans
            )
        yield document


def write_jsonl(texts: Iterable[str], path: str | Path) -> int:
    """Write one `{"text": ...}` object per line (atomically); returns the number of documents."""
    count = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for text in texts:
            handle.write(json.dumps({"text": text}, ensure_ascii=False))
            handle.write("\n")
            count += 1
    return count
