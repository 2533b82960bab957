"""Synthetic text: seeded and reproducible, with balanced brackets, correct sums, recurring names, lists, dialogue and code."""

from __future__ import annotations

import json
import re

from headstab.data.synthetic import generate_synthetic_documents, write_jsonl
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
