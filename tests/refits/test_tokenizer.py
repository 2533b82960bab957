"""Tokenizers: train/save/AutoTokenizer round trips, hub fetch (from a local directory), identity, errors."""

from __future__ import annotations

import json

import pytest

from headstab.data.synthetic import generate_synthetic_documents
from headstab.fileio import sha256_file
from headstab.refits.tokenizer import (
    ENDOFTEXT,
    TokenizerError,
    fetch_hub_tokenizer,
    load_tokenizer,
    tokenizer_identity,
    train_bpe_tokenizer,
    write_tokenizer_meta,
)

SAMPLE = (
    "Korvel Tamisra said: 17 + 25 = 42.\n\ndef f(x):\n    return [x, (x * 2)]\n"
    "Unicode too: café, naïve, 東京, emoji 🙂, tabs\tand  double  spaces."
)


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok") / "bpe"
    train_bpe_tokenizer(generate_synthetic_documents(seed=3, n_documents=300), vocab_size=400, out_dir=out)
    return out


def test_trained_tokenizer_loads_with_autotokenizer_and_round_trips_text(trained_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(trained_dir))
    ids = tokenizer(SAMPLE, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == SAMPLE  # byte-level: every string survives, unseen characters too
    assert len(tokenizer) == 400
    assert max(ids) < 400


def test_endoftext_is_bos_eos_and_pad_with_id_zero(trained_dir):
    tokenizer = load_tokenizer(trained_dir)
    assert tokenizer.eos_token == tokenizer.bos_token == tokenizer.pad_token == ENDOFTEXT
    assert tokenizer.eos_token_id == tokenizer.bos_token_id == tokenizer.convert_tokens_to_ids(ENDOFTEXT) == 0
    # The special token is one id in text, and no special tokens are added implicitly (GPT-2 style).
    assert tokenizer("a" + ENDOFTEXT + "b", add_special_tokens=True)["input_ids"][1] == 0
    assert (
        tokenizer("ab", add_special_tokens=True)["input_ids"] == tokenizer("ab", add_special_tokens=False)["input_ids"]
    )


def test_training_is_deterministic(tmp_path, trained_dir):
    train_bpe_tokenizer(
        generate_synthetic_documents(seed=3, n_documents=300), vocab_size=400, out_dir=tmp_path / "again"
    )
    assert sha256_file(tmp_path / "again" / "tokenizer.json") == sha256_file(trained_dir / "tokenizer.json")


def test_a_tokenizer_rebuilt_at_another_time_on_another_host_writes_the_same_meta_json(tmp_path, monkeypatch):
    """meta.json is an input of every shard, cache and train job: a byte-identical rebuild must leave it
    byte-identical (Snakemake then reruns nothing), whenever and wherever the job ran."""
    import itertools
    import shutil

    from headstab.refits import tokenizer as module

    builds = itertools.count()
    monkeypatch.setattr(module, "environment_record", lambda: {"host": f"node{next(builds)}", "created": "now"})
    out, origin = tmp_path / "bpe", {"source": "train", "corpus": "synthetic", "vocab_size": 400}
    documents = list(generate_synthetic_documents(seed=3, n_documents=300))
    train_bpe_tokenizer(documents, vocab_size=400, out_dir=out)
    write_tokenizer_meta(out, origin)
    first, first_environment = (out / "meta.json").read_bytes(), (out / "environment.json").read_text()
    shutil.rmtree(out)  # the repair advice: rm -rf the directory, then build it again
    train_bpe_tokenizer(documents, vocab_size=400, out_dir=out)
    write_tokenizer_meta(out, origin)
    assert (out / "meta.json").read_bytes() == first
    assert json.loads(first_environment)["host"] == "node0"
    assert json.loads((out / "environment.json").read_text())["host"] == "node1"


def test_vocab_size_below_byte_alphabet_is_rejected(tmp_path):
    with pytest.raises(TokenizerError, match="vocab_size 200"):
        train_bpe_tokenizer(["abc"], vocab_size=200, out_dir=tmp_path / "small")


def test_identity_records_origin_vocab_special_tokens_and_sha256(trained_dir, tmp_path):
    meta = write_tokenizer_meta(trained_dir, {"source": "train", "corpus": "synthetic", "vocab_size": 400})
    on_disk = json.loads((trained_dir / "meta.json").read_text())
    assert (
        on_disk["tokenizer_json_sha256"] == sha256_file(trained_dir / "tokenizer.json") == meta["tokenizer_json_sha256"]
    )
    assert on_disk["vocab_size"] == 400
    assert on_disk["eos_token_id"] == on_disk["bos_token_id"] == 0
    assert on_disk["special_tokens"] == [ENDOFTEXT]
    assert on_disk["origin"] == {"source": "train", "corpus": "synthetic", "vocab_size": 400}
    assert "environment" not in on_disk  # beside it: environment.json
    assert "packages" in json.loads((trained_dir / "environment.json").read_text())
    # Without an explicit origin, identity reads it back from meta.json.
    assert tokenizer_identity(trained_dir)["origin"]["source"] == "train"


def test_fetch_hub_tokenizer_saves_a_loadable_copy(trained_dir, tmp_path):
    # No internet here: a local directory stands in for the hub id (same AutoTokenizer code path).
    out = tmp_path / "fetched"
    fetched = fetch_hub_tokenizer(str(trained_dir), out)
    original = load_tokenizer(trained_dir)
    assert fetched(SAMPLE)["input_ids"] == original(SAMPLE)["input_ids"]
    assert (out / "tokenizer_config.json").is_file()
    meta = write_tokenizer_meta(out, {"source": "hub", "name": "some/tokenizer"})
    assert meta["origin"] == {"source": "hub", "name": "some/tokenizer"}
    assert meta["vocab_size"] == 400


def test_fetch_hub_tokenizer_without_network_says_what_to_do(monkeypatch, tmp_path):
    import transformers

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", offline)
    with pytest.raises(TokenizerError, match=r"'NeelNanda/gpt-neox-tokenizer-digits'.*internet.*source: local"):
        fetch_hub_tokenizer("NeelNanda/gpt-neox-tokenizer-digits", tmp_path / "x")


def test_identity_of_a_local_tokenizer_without_meta_says_local(trained_dir, tmp_path):
    local = tmp_path / "local"
    load_tokenizer(trained_dir).save_pretrained(str(local))
    identity = tokenizer_identity(local)
    assert identity["origin"] == {"source": "local"}
    assert identity["path"] == str(local)


def test_missing_tokenizer_directory_names_it_and_the_rules(tmp_path):
    missing = tmp_path / "tokenizers" / "demo_bpe"
    with pytest.raises(TokenizerError, match=rf"{missing}.*train_tokenizer.*fetch_tokenizer"):
        load_tokenizer(missing)
    (missing).mkdir(parents=True)
    (missing / "notes.txt").write_text("not a tokenizer")
    with pytest.raises(TokenizerError, match="tokenizer_config.json"):
        load_tokenizer(missing)


def _damaged_copy(trained_dir, destination, with_meta: bool):
    import shutil

    shutil.copytree(trained_dir, destination)
    (destination / "tokenizer.json").write_text("{ not json")
    if with_meta:
        write_tokenizer_meta(trained_dir, {"source": "train"})
        shutil.copy(trained_dir / "meta.json", destination / "meta.json")
    elif (destination / "meta.json").exists():
        (destination / "meta.json").unlink()
    return destination


def test_a_damaged_tokenizer_the_workflow_built_gets_a_quoted_rebuild_command(trained_dir, tmp_path):
    import shlex

    directory = _damaged_copy(trained_dir, tmp_path / "results dir" / "tokenizers" / "bpe", with_meta=True)
    with pytest.raises(TokenizerError) as err:
        load_tokenizer(directory)
    command = str(err.value).split("`")[1]
    remove, build = (shlex.split(part) for part in command.split("&&"))
    assert remove == ["rm", "-rf", str(directory)]
    assert build == ["snakemake", str(directory / "meta.json")]


def test_a_damaged_local_tokenizer_is_never_advised_for_deletion(trained_dir, tmp_path):
    directory = _damaged_copy(trained_dir, tmp_path / "my tokenizer", with_meta=False)
    with pytest.raises(TokenizerError) as err:
        load_tokenizer(directory)
    message = str(err.value)
    assert str(directory) in message and "tokenizers.<name>.path" in message
    assert "rm " not in message and "delete" not in message


def test_word_tokenizer_gives_one_id_per_word_in_sorted_order_and_round_trips(tmp_path):
    from headstab.refits.tokenizer import train_word_tokenizer

    tokenizer = train_word_tokenizer(["lo ka mi", "ka  ka\nzu"], vocab_size=8, out_dir=tmp_path / "words")
    assert tokenizer.get_vocab() == {ENDOFTEXT: 0, "ka": 1, "lo": 2, "mi": 3, "zu": 4}
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 0)
    ids = tokenizer("zu lo ka", add_special_tokens=False)["input_ids"]
    assert ids == [4, 2, 1] and tokenizer.decode(ids) == "zu lo ka"
    assert tokenizer("zu qq")["input_ids"] == [4, 0]  # an unknown word is <|endoftext|>
    assert load_tokenizer(tmp_path / "words").get_vocab() == tokenizer.get_vocab()


def test_word_tokenizer_refuses_more_words_than_vocab_size_leaves(tmp_path):
    from headstab.refits.tokenizer import train_word_tokenizer

    with pytest.raises(TokenizerError, match="the corpus has 4 distinct words, more than the 3 that vocab_size 4"):
        train_word_tokenizer(["a b c d"], vocab_size=4, out_dir=tmp_path / "words")


# ---------------------------------------------------------------- a tokenizer changed after the workflow built it
def _built_copy(trained_dir, destination):
    """A copy of the trained tokenizer with the meta.json the workflow writes."""
    import shutil

    shutil.copytree(trained_dir, destination, ignore=shutil.ignore_patterns("meta.json", "environment.json"))
    write_tokenizer_meta(destination, {"source": "train", "corpus": "synthetic", "vocab_size": 400})
    return destination


def _swap_ids(tokenizer_json, first: str, second: str) -> None:
    """A valid edit: two tokens trade ids, so the file still loads but encodes text otherwise."""
    data = json.loads(tokenizer_json.read_text())
    vocab = data["model"]["vocab"]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    tokenizer_json.write_text(json.dumps(data))


@pytest.mark.parametrize("reader", [load_tokenizer, tokenizer_identity])
def test_a_tokenizer_json_edited_after_the_workflow_built_it_is_refused_naming_both_digests(
    trained_dir, tmp_path, reader
):
    from transformers import AutoTokenizer

    directory = _built_copy(trained_dir, tmp_path / "tokenizers" / "bpe")
    recorded = sha256_file(directory / "tokenizer.json")
    before = load_tokenizer(directory)("ab", add_special_tokens=False)["input_ids"]
    _swap_ids(directory / "tokenizer.json", "a", "b")
    actual = sha256_file(directory / "tokenizer.json")
    # the edit is valid: AutoTokenizer alone loads it and encodes the same text otherwise
    edited = AutoTokenizer.from_pretrained(str(directory))("ab", add_special_tokens=False)["input_ids"]
    assert edited != before and actual != recorded
    with pytest.raises(TokenizerError) as error:
        reader(directory)
    message = str(error.value)
    assert message.startswith(
        f"tokenizer file {directory / 'tokenizer.json'} has sha256 {actual}, but {directory / 'meta.json'} records "
        f"sha256 {recorded}: it changed after the workflow built it"
    )
    assert f"rm -rf {directory} && snakemake {directory / 'meta.json'}" in message and "source: local" in message


def test_a_missing_tokenizer_json_that_meta_json_records_is_refused(trained_dir, tmp_path):
    directory = _built_copy(trained_dir, tmp_path / "bpe")
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {**json.loads((directory / "tokenizer_config.json").read_text()), "tokenizer_class": "GPT2Tokenizer"}
        )
    )
    import shutil

    shutil.move(directory / "tokenizer.json", tmp_path / "elsewhere.json")
    with pytest.raises(TokenizerError, match=rf"tokenizer file {directory / 'tokenizer.json'} is missing, but"):
        load_tokenizer(directory)


def test_a_changed_special_token_is_refused_naming_what_differs(trained_dir, tmp_path):
    directory = _built_copy(trained_dir, tmp_path / "bpe")
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "eos_token": "a"}))  # tokenizer.json untouched
    with pytest.raises(TokenizerError) as error:
        load_tokenizer(directory)
    message = str(error.value)
    assert message.startswith(f"tokenizer directory {directory} no longer loads as {directory / 'meta.json'} records:")
    assert "eos_token_id (recorded 0, now 65)" in message and "rm -rf" in message


def test_an_unedited_built_tokenizer_and_a_local_one_without_meta_load(trained_dir, tmp_path):
    directory = _built_copy(trained_dir, tmp_path / "bpe")
    assert tokenizer_identity(directory)["tokenizer_json_sha256"] == sha256_file(trained_dir / "tokenizer.json")
    local = tmp_path / "local"
    load_tokenizer(trained_dir).save_pretrained(str(local))
    _swap_ids(local / "tokenizer.json", "a", "b")  # the user's own tokenizer: no record to hold it to
    assert load_tokenizer(local)("a", add_special_tokens=False)["input_ids"] == [66]


def test_every_tokenizer_the_workflow_loads_goes_through_load_tokenizer():
    """AutoTokenizer only in the module that checks the record, and for a hub model's own tokenizer (compared with
    the configured one, which load_tokenizer reads)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    loads = re.compile(r"\bimport\b[^\n]*\bAutoTokenizer\b|transformers\.AutoTokenizer")
    allowed = {"src/headstab/refits/tokenizer.py", "src/headstab/refits/hub_models.py"}
    sources = [*root.glob("src/headstab/**/*.py"), *root.glob("workflow/scripts/*.py")]
    users = {str(path.relative_to(root)) for path in sources if loads.search(path.read_text())}
    assert users <= allowed, users - allowed
