"""The prompt files (paper §A.4) and how headstab.prompts.loading reads them."""

from __future__ import annotations

import itertools
import json
import re
import statistics
from pathlib import Path

import pytest

from headstab.prompts.loading import load_prompt_file, load_prompt_sets

PROMPTS_DIR = Path(__file__).resolve().parents[2] / "resources" / "prompts"
PRIMARY = PROMPTS_DIR / "primary.json"
LENGTH_SWEEP = PROMPTS_DIR / "length_sweep.json"
SWEEP_LENGTHS = [5, 10, 20, 30, 40, 50]


def word_set(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def jaccard(a: str, b: str) -> float:
    x, y = word_set(a), word_set(b)
    return len(x & y) / len(x | y)


def test_primary_has_100_distinct_prompts_with_the_authors_length_distribution():
    prompts = json.loads(PRIMARY.read_text(encoding="utf-8"))
    assert isinstance(prompts, list) and len(prompts) == 100
    assert all(isinstance(p, str) and p == p.strip() for p in prompts)
    assert len(set(prompts)) == 100
    # The authors' 100_prompts.pkl: 21 to 63 whitespace-separated words, median about 37, spread over the range.
    words = [len(p.split()) for p in prompts]
    assert min(words) >= 21 and max(words) <= 63, (min(words), max(words))
    assert 35 <= statistics.median(words) <= 39, statistics.median(words)
    assert sum(n < 30 for n in words) >= 10 and sum(n > 50 for n in words) >= 10, sorted(words)
    # Words plus punctuation marks approximate a BPE token count (whitespace words alone undercount
    # code); no prompt may be exceptionally long in tokens.
    pieces = [len(re.findall(r"\w+|[^\w\s]", p)) for p in prompts]
    assert max(pieces) <= 110, max(pieces)


def test_primary_has_no_near_duplicates():
    prompts = json.loads(PRIMARY.read_text(encoding="utf-8"))
    worst = max(itertools.combinations(prompts, 2), key=lambda pair: jaccard(*pair))
    assert jaccard(*worst) < 0.5, worst


@pytest.mark.parametrize(
    "marker",
    [
        "Once upon a time",  # story
        "\nAgent:",  # dialogue
        "BREAKING:",  # news
        "Step 1:",  # instructions
        "def ",  # code
        "SELECT ",  # code (SQL)
        "\n- ",  # list
        "Abstract.",  # scientific writing
        "Subject:",  # email
        "Ingredients:",  # recipe
        "Agreement",  # legal
        "Q:",  # question and answer
        "Meeting notes",  # meeting notes
        "Dear diary",  # diary
        "Haiku",  # poetry
        "FOR SALE",  # advertisement
    ],
)
def test_primary_covers_the_genres(marker):
    prompts = json.loads(PRIMARY.read_text(encoding="utf-8"))
    assert any(marker in prompt for prompt in prompts), marker


def test_length_sweep_is_prefixes_of_the_50_word_masters():
    sweep = json.loads(LENGTH_SWEEP.read_text(encoding="utf-8"))
    assert sorted(sweep, key=int) == [str(n) for n in SWEEP_LENGTHS]
    masters = sweep["50"]
    assert len(masters) == 20 and len(set(masters)) == 20
    for n in SWEEP_LENGTHS:
        assert len(sweep[str(n)]) == 20
        for k, prompt in enumerate(sweep[str(n)]):
            assert len(prompt.split(" ")) == n
            assert prompt == " ".join(masters[k].split(" ")[:n])
    worst = max(itertools.combinations(masters, 2), key=lambda pair: jaccard(*pair))
    assert jaccard(*worst) < 0.5, worst


def test_config_sets_load_with_numeric_sweep_names():
    sets = load_prompt_sets({"primary": PRIMARY, "len": LENGTH_SWEEP})
    assert list(sets) == ["primary", "len5", "len10", "len20", "len30", "len40", "len50"]
    assert len(sets["primary"]) == 100 and all(len(sets[f"len{n}"]) == 20 for n in SWEEP_LENGTHS)


def test_object_with_word_keys_keeps_file_order(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"b": ["x y"], "a": ["z"]}))
    assert list(load_prompt_file("set_", path)) == ["set_b", "set_a"]


def test_text_file_gives_one_prompt_per_non_empty_line(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text("first prompt\n\n  second prompt  \n\n")
    assert load_prompt_sets({"mine": path}) == {"mine": ["first prompt", "second prompt"]}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('["a", ', "invalid JSON"),
        ('"just a string"', "top-level JSON must be"),
        ('["a", 3]', r"\[1\] must be a string"),
        ('["a", "  "]', r"\[1\] is an empty prompt"),
        ("[]", "empty list"),
        ('{"5": "not a list"}', "member '5' must be a list"),
        ("{}", "no members"),
    ],
)
def test_bad_files_fail_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as error:
        load_prompt_sets({"bad": path})
    assert str(path) in str(error.value)


@pytest.mark.parametrize("content", ["[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "[]" + "}" * 100_000])
def test_a_json_file_nested_past_the_parser_fails_naming_the_file_and_the_fix(tmp_path, content):
    path = tmp_path / "deep.json"
    path.write_text(content)
    with pytest.raises(ValueError) as error:
        load_prompt_sets({"deep": path})
    assert str(error.value) == (
        f"{path}: invalid JSON (nested deeper than the JSON parser goes); a prompt file is a JSON list of strings, "
        "a JSON object of such lists, or a .txt file"
    )


@pytest.mark.parametrize(
    ("content", "key"),
    [
        ('{"5": ["a b"], "10": ["c d"], "5": ["e f"]}', "5"),
        ('[{"x": 1, "x": 2}]', "x"),  # nested: refused even though the list would fail later anyway
        ('{"5": ["a"], "10": [{"k": "v", "k": "w"}]}', "k"),
    ],
)
def test_duplicate_json_keys_fail_naming_the_file_and_key(tmp_path, content, key):
    path = tmp_path / "dup.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=f"key '{key}' appears more than once") as error:
        load_prompt_file("len", path)
    assert str(path) in str(error.value) and "rename one of the keys" in str(error.value)


def test_same_prompt_text_under_different_keys_is_not_a_duplicate_key(tmp_path):
    path = tmp_path / "ok.json"
    path.write_text('{"5": ["a b"], "10": ["a b"]}')
    assert load_prompt_file("len", path) == {"len5": ["a b"], "len10": ["a b"]}


@pytest.mark.parametrize("suffix", [".json", ".txt"])
def test_non_utf8_file_fails_naming_the_file_and_byte_offset(tmp_path, suffix):
    path = tmp_path / f"latin1{suffix}"
    path.write_bytes('["caf\u00e9 au lait"]'.encode("latin-1"))  # the e-acute is byte 0xe9 at offset 5
    with pytest.raises(ValueError, match="not valid UTF-8") as error:
        load_prompt_file("x", path)
    message = str(error.value)
    assert str(path) in message and "0xe9" in message and "byte offset 5" in message
    assert "re-save the file as UTF-8" in message


@pytest.mark.parametrize(
    ("suffix", "text"), [(".txt", "Hello world.\nSecond prompt\n"), (".json", '["Hello world.", "b"]')]
)
def test_a_byte_order_mark_is_not_part_of_the_first_prompt(tmp_path, suffix, text):
    plain, marked = tmp_path / f"plain{suffix}", tmp_path / f"marked{suffix}"
    plain.write_text(text, encoding="utf-8")
    marked.write_text(text, encoding="utf-8-sig")  # what Windows editors save: EF BB BF, then the text
    assert marked.read_bytes()[:3] == b"\xef\xbb\xbf"
    loaded = load_prompt_file("x", marked)
    assert loaded == load_prompt_file("x", plain) and loaded["x"][0] == "Hello world."


def test_a_bad_byte_after_a_byte_order_mark_is_named_at_its_offset_in_the_file(tmp_path):
    path = tmp_path / "marked.txt"
    path.write_bytes(b"\xef\xbb\xbfcaf\xe9\n")
    with pytest.raises(ValueError, match="byte 0xe9 at byte offset 6"):
        load_prompt_file("x", path)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85"])
def test_a_text_file_splits_prompts_at_line_feeds_only(tmp_path, separator):
    """str.splitlines also breaks at these characters, which would cut one line into two prompts."""
    path = tmp_path / "mine.txt"
    path.write_text(f"first half{separator}second half\r\nnext line\n", encoding="utf-8")
    assert load_prompt_file("x", path) == {"x": [f"first half{separator}second half", "next line"]}


def test_a_carriage_return_without_a_line_feed_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "mac.txt"
    path.write_bytes(b"first prompt\nsecond prompt\rthird prompt\n")
    with pytest.raises(ValueError) as error:
        load_prompt_file("x", path)
    assert str(error.value).startswith(f"{path}: line 2 has a carriage return without a line feed")
    assert "save the file with \\n line endings" in str(error.value)


@pytest.mark.parametrize(
    ("content", "where", "position"),
    [
        (b"\xef\xbb\xbf\xef\xbb\xbfHello world.\nSecond prompt\n", "line 1", 0),  # two leading byte-order marks
        (b"\xef\xbb\xbfHello world.\n\xef\xbb\xbfSecond prompt\n", "line 2", 0),  # two such files concatenated
        (b"Hello\xef\xbb\xbf world.\n", "line 1", 5),
    ],
)
def test_a_byte_order_mark_inside_a_text_file_is_refused_naming_the_file_and_line(tmp_path, content, where, position):
    path = tmp_path / "marks.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError) as error:
        load_prompt_file("x", path)
    assert str(error.value).startswith(f"{path}: {where} has U+FEFF (a byte-order mark) at character {position}")
    assert "remove it" in str(error.value)


def test_a_byte_order_mark_inside_a_json_prompt_is_refused_naming_the_file_and_prompt(tmp_path):
    path = tmp_path / "marks.json"
    path.write_text('{"5": ["fine"], "10": ["ok", "\\ufeffHello"]}', encoding="utf-8")
    with pytest.raises(ValueError) as error:
        load_prompt_file("len", path)
    assert str(error.value).startswith(f"{path}: member '10'[1] has U+FEFF (a byte-order mark) at character 0")


def test_a_lone_surrogate_in_a_json_prompt_is_refused_naming_the_file_and_prompt(tmp_path):
    path = tmp_path / "surrogate.json"
    path.write_text('["fine", "half of a pair: \\ud83d here"]', encoding="utf-8")
    with pytest.raises(ValueError) as error:
        load_prompt_file("x", path)
    message = str(error.value)
    assert message.startswith(f"{path}: the top-level list[1] has a lone surrogate U+D83D at character 16")
    assert "escape" in message
    path.write_text('["a whole pair: \\ud83d\\ude00"]', encoding="utf-8")  # one character, U+1F600
    assert load_prompt_file("x", path) == {"x": ["a whole pair: \U0001f600"]}


@pytest.mark.parametrize("member", ["\u00b2", "\u0663", "\uff15", "\u00bd", "-\u00b2"])
def test_a_member_of_number_like_characters_other_than_0_to_9_is_refused_naming_the_file(tmp_path, member):
    """'²'.isdigit() is True but int('²') fails; '٣' would make a set name no ASCII reader expects."""
    path = tmp_path / "lengths.json"
    path.write_text(json.dumps({"5": ["a b"], member: ["c d"]}), encoding="utf-8")
    with pytest.raises(ValueError) as error:
        load_prompt_file("len", path)
    assert str(error.value).startswith(f"{path}: member {member!r} reads as a number but is not written with 0-9")


@pytest.mark.parametrize(
    ("escaped", "member", "what"),
    [("\\ud800x", "\ud800x", "a lone surrogate U+D800"), ("\\ufeff5", "\ufeff5", "U+FEFF (a byte-order mark)")],
)
def test_a_lone_surrogate_or_byte_order_mark_in_a_member_name_is_refused(tmp_path, escaped, member, what):
    path = tmp_path / "names.json"
    path.write_text(f'{{"{escaped}": ["a b"]}}', encoding="utf-8")
    with pytest.raises(ValueError) as error:
        load_prompt_file("len", path)
    assert str(error.value).startswith(f"{path}: member name {member!r} has {what} at character 0")


def test_missing_file_and_empty_text_file_fail_naming_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_prompt_sets({"x": tmp_path / "nope.json"})
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    with pytest.raises(ValueError, match="empty.txt"):
        load_prompt_sets({"x": empty})


def test_duplicate_set_names_fail_naming_both_files(tmp_path):
    single = tmp_path / "five.json"
    single.write_text(json.dumps(["a b c"]))
    with pytest.raises(ValueError, match="len5") as error:
        load_prompt_sets({"len5": single, "len": LENGTH_SWEEP})
    assert "five.json" in str(error.value) and "length_sweep.json" in str(error.value)


# --- import-pickle: the authors' published prompt pickles -------------------------------------
