"""Synthetic text: seeded and reproducible, with balanced brackets, correct sums, recurring names, lists, dialogue and code."""

from __future__ import annotations

import hashlib
import json
import random
import re

import pytest

from headstab.data.synthetic import (
    REPEATED_SPAN_WORDS,
    generate_synthetic_documents,
    insert_repeated_spans,
    write_jsonl,
)
from headstab.fileio import sha256_file

from .conftest import DOCS


def test_same_seed_gives_identical_text_and_other_seeds_differ():
    first = list(generate_synthetic_documents(seed=7, n_documents=50))
    assert first == list(generate_synthetic_documents(seed=7, n_documents=50))
    other = list(generate_synthetic_documents(seed=8, n_documents=50))
    assert all(a != b for a, b in zip(first, other))
    # Document k depends only on (seed, k): a longer corpus extends a shorter one.
    assert list(generate_synthetic_documents(seed=7, n_documents=80))[:50] == first


def test_jsonl_of_the_same_seed_is_byte_identical(tmp_path):
    write_jsonl(generate_synthetic_documents(0, 40), tmp_path / "a.jsonl")
    write_jsonl(generate_synthetic_documents(0, 40), tmp_path / "b.jsonl")
    assert sha256_file(tmp_path / "a.jsonl") == sha256_file(tmp_path / "b.jsonl")
    lines = (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["text"] for line in lines] == list(generate_synthetic_documents(0, 40))


def test_brackets_are_balanced_and_nested():
    pairs = {")": "(", "]": "[", "}": "{"}
    max_depth = 0
    for doc in DOCS:
        stack = []
        for char in doc:
            if char in "([{":
                stack.append(char)
                max_depth = max(max_depth, len(stack))
            elif char in pairs:
                assert stack and stack.pop() == pairs[char], doc
        assert not stack, doc
    assert max_depth >= 3  # real nesting, not only flat pairs


def test_arithmetic_lines_are_correct():
    lines = [m.groups() for doc in DOCS for m in re.finditer(r"^(\d+) ([-+*]) (\d+) = (-?\d+)$", doc, re.M)]
    assert len(lines) > 200
    for a, op, b, result in lines:
        assert int(result) == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
    assert {op for _, op, _, _ in lines} == {"+", "-", "*"}


def test_introduced_names_recur_and_code_words_repeat_verbatim():
    repeated = 0
    for doc in DOCS:
        intro = re.match(r"This is a story about (.*)\.\n", doc).group(1)
        names = re.split(r", | and ", intro)
        assert 2 <= len(names) <= 4
        assert all(len(name.split()) == 2 for name in names)
        assert doc.count(names[0]) >= 2  # introduced, and named again at the end
        repeated += sum(doc.count(name) >= 3 for name in names)
        for first, second in re.findall(r"Code words: ([a-z ]+)\. Repeat the code words: ([a-z ]+)\.", doc):
            assert first == second
    assert repeated > len(DOCS)  # most documents reuse several names many times
    assert sum("Repeat the code words" in doc for doc in DOCS) > 50


def test_lists_dialogue_and_code_are_present_and_well_formed():
    text = "\n\n".join(DOCS)
    assert re.search(r"^1\. \w+ \w+\n2\. ", text, re.M)  # numbered lists count from 1
    assert re.search(r"^- \w+$", text, re.M)  # bulleted lists
    assert re.search(r"^[A-Z][a-z]+ [A-Z][a-z]+: ", text, re.M)  # dialogue turns
    assert re.search(r'You said ".+" Yes, I did\.', text)  # a turn quoting the previous one verbatim
    for block in re.findall(r"^def \w+\(\w+, \w+\):\n(?:    .*\n)+", text, re.M):
        indents = [len(line) - len(line.lstrip(" ")) for line in block.splitlines()[1:]]
        assert all(indent in (4, 8) for indent in indents)


def test_default_corpus_is_the_same_text_as_before_repeated_spans_existed():
    # sha256 of the first 100 documents of seeds 0 and 1 written by the generator before it had repeated_spans.
    expected = {
        0: "25c486e7a2fae7f375e2882ebe43f782408721641c617da50ab7f06bc6e25307",
        1: "39c05d29323de4b50d80fc1c55f277a66f0822701ebf4e3ae9bd404c10981d1c",
    }
    for seed, digest in expected.items():
        text = "\x00".join(generate_synthetic_documents(seed, 100))
        assert hashlib.sha256(text.encode()).hexdigest() == digest
        assert list(generate_synthetic_documents(seed, 100, repeated_spans=0)) == text.split("\x00")


def _inserted_copy(original: list[str], result: list[str]) -> tuple[int, int, int]:
    """(source start, copy start, length) of the one run of words inserted into `original` (distinct words)."""
    length = len(result) - len(original)
    at = next((i for i, (a, b) in enumerate(zip(original, result)) if a != b), len(original))  # appended: at the end
    assert result[:at] == original[:at] and result[at + length :] == original[at:]
    source = original.index(result[at])
    assert result[at : at + length] == original[source : source + length]
    return source, at, length


def test_one_repeated_span_is_a_verbatim_copy_of_earlier_words_at_a_random_distance():
    original = [f"w{i}" for i in range(60)]
    distances = set()
    for seed in range(40):
        result = insert_repeated_spans(" ".join(original), random.Random(seed), 1, span_words=(3, 7)).split(" ")
        source, at, length = _inserted_copy(original, result)
        assert 3 <= length <= 7
        assert source + length <= at  # the copy comes after the whole span it repeats
        distances.add(at - source)
    assert len(distances) > 10  # never a fixed offset


def test_documents_with_repeated_spans_keep_their_words_and_grow_by_the_copies():
    n_spans, (low, high) = 3, REPEATED_SPAN_WORDS
    plain = list(generate_synthetic_documents(seed=4, n_documents=30))
    repeated = list(generate_synthetic_documents(seed=4, n_documents=30, repeated_spans=n_spans))
    assert repeated == list(generate_synthetic_documents(seed=4, n_documents=30, repeated_spans=n_spans))
    for base, doc in zip(plain, repeated):
        base_words, words = base.split(" "), doc.split(" ")
        assert n_spans * low <= len(words) - len(base_words) <= n_spans * high
        remaining = iter(words)
        assert all(word in remaining for word in base_words)  # the document's own words, in order, are all still there


def test_repeated_span_arguments_are_checked():
    with pytest.raises(ValueError, match="repeated_spans must be >= 0, got -1"):
        list(generate_synthetic_documents(0, 1, repeated_spans=-1))
    with pytest.raises(ValueError, match=r"span_words must be 1 <= low <= high, got \(5, 2\)"):
        insert_repeated_spans("a b c", random.Random(0), 1, span_words=(5, 2))
    assert insert_repeated_spans("a b", random.Random(0), 2, span_words=(3, 4)) == "a b"  # shorter than a span
