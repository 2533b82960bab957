"""Converting the authors' prompt pickles (headstab.prompts.pickle_import): safe by construction, and what it writes loads."""

from __future__ import annotations

import copyreg
import io
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from headstab.prompts.loading import load_prompt_sets
from headstab.prompts.pickle_import import main


def _make_marker(path: str) -> str:
    """What a hostile pickle would run: creates a file, so running is visible."""
    Path(path).write_text("ran")
    return "ran"


class _Payload:
    """Pickles as a call of `call(*args)`: the classic code-running pickle."""

    def __init__(self, call, args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


def _pickle(path: Path, obj: object, protocol: int = pickle.DEFAULT_PROTOCOL) -> Path:
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    return path


def _import(capsys, *args) -> tuple[int, str, str]:
    """Run the CLI in-process; returns (exit status, stdout, stderr)."""
    status = main(["import-pickle", *map(str, args)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _assert_one_line_error(status: int, err: str, *needles: str) -> None:
    assert status == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)


def test_import_one_pickle_gives_a_json_list_that_loads(tmp_path, capsys):
    prompts = ["The first prompt.", 'A second, with ünïcode and "quotes".', "def f(x):\n    return x"]
    out = tmp_path / "paper.json"
    status, stdout, err = _import(capsys, _pickle(tmp_path / "100_prompts.pkl", prompts), "--out", out)
    assert (status, err) == (0, "")
    text = out.read_text(encoding="utf-8")
    assert json.loads(text) == prompts
    assert "ünïcode" in text and text.endswith("]\n")  # ensure_ascii=False, trailing newline
    assert load_prompt_sets({"primary": out}) == {"primary": prompts}
    assert stdout == f"wrote 1 set of 3 prompts to {out}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["100_prompts.pkl", "paper.json"]  # no temp left


def test_import_length_sweep_pickles_gives_an_object_in_numeric_order(tmp_path, capsys):
    lengths = [10, 5, 50, 20]  # given out of order on purpose
    pickles = [_pickle(tmp_path / f"{n}_tokens_prompts.pkl", [f"w{n} " * n, f"v{n} " * n]) for n in lengths]
    out = tmp_path / "sweep.json"
    status, stdout, err = _import(capsys, *pickles, "--out", out)
    assert (status, err) == (0, "")
    data = json.loads(out.read_text(encoding="utf-8"))
    assert list(data) == ["5", "10", "20", "50"]
    assert data["20"] == ["w20 " * 20, "v20 " * 20]
    sets = load_prompt_sets({"len": out})
    assert list(sets) == ["len5", "len10", "len20", "len50"] and sets["len5"] == ["w5 " * 5, "v5 " * 5]
    assert stdout == f"wrote 4 sets (8 prompts: 2, 2, 2, 2) to {out}\n"


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_import_reads_every_pickle_protocol(tmp_path, capsys, protocol):
    prompts = ["one prompt", "another one, café", "x" * 300]
    out = tmp_path / "p.json"
    status, _, err = _import(capsys, _pickle(tmp_path / "p.pkl", prompts, protocol), "--out", out)
    assert (status, err) == (0, "")
    assert json.loads(out.read_text(encoding="utf-8")) == prompts


@pytest.mark.parametrize("nested", [False, True])
def test_import_refuses_a_code_running_pickle_and_runs_nothing(tmp_path, capsys, nested):
    marker, control = tmp_path / "pwned", tmp_path / "control"
    # The payload is live: an ordinary unpickler runs it (creating the control file).
    pickle.loads(pickle.dumps(_Payload(_make_marker, (str(control),))))
    assert control.read_text() == "ran"
    payload = _Payload(_make_marker, (str(marker),))
    bad = _pickle(tmp_path / "100_prompts.pkl", ["fine", payload] if nested else payload)
    out = tmp_path / "out.json"
    status, _, err = _import(capsys, bad, "--out", out)
    refused = f"{_make_marker.__module__}._make_marker"
    _assert_one_line_error(status, err, str(bad), f"refused global {refused}", "only a list of strings")
    assert not marker.exists() and not out.exists()


def test_import_refuses_os_system_without_running_it(tmp_path, capsys):
    marker = tmp_path / "pwned"
    bad = _pickle(tmp_path / "100_prompts.pkl", _Payload(os.system, (f"touch {marker}",)))
    status, _, err = _import(capsys, bad, "--out", tmp_path / "out.json")
    _assert_one_line_error(status, err, str(bad), f"refused global {os.system.__module__}.system")
    assert not marker.exists()


def test_import_refuses_extension_codes_even_when_cached(tmp_path, capsys):
    # A registered extension code, once loaded by an ordinary unpickler, is cached and later
    # returned without find_class: the one way a pickle could reach a callable past it.
    code = 0x7FFF_FF00
    module = _make_marker.__module__
    copyreg.add_extension(module, "_make_marker", code)
    try:
        assert pickle.loads(b"\x80\x02\x84" + code.to_bytes(4, "little") + b".") is _make_marker
        marker = tmp_path / "pwned"
        argument = str(marker).encode()
        hostile = (
            b"\x80\x02\x84"
            + code.to_bytes(4, "little")  # EXT4 code -> _make_marker
            + b"X"
            + len(argument).to_bytes(4, "little")
            + argument
            + b"\x85R."
        )  # (path,) REDUCE
        bad = tmp_path / "100_prompts.pkl"
        bad.write_bytes(hostile)
        status, _, err = _import(capsys, bad, "--out", tmp_path / "out.json")
    finally:
        copyreg.remove_extension(module, "_make_marker", code)
    _assert_one_line_error(status, err, str(bad), f"refused extension code {code}", "EXT4")
    assert not marker.exists()


def test_import_refuses_persistent_ids(tmp_path, capsys):
    class Persisting(pickle.Pickler):
        def persistent_id(self, obj):
            return "ext-1" if obj == "external" else None

    buffer = io.BytesIO()
    Persisting(buffer).dump(["fine", "external"])
    bad = tmp_path / "p.pkl"
    bad.write_bytes(buffer.getvalue())
    status, _, err = _import(capsys, bad, "--out", tmp_path / "out.json")
    _assert_one_line_error(status, err, str(bad), "refused persistent id 'ext-1'")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"5": ["a b"]}, "must be a list of prompt strings; got dict"),
        (["a", 3], "[1] must be a string; got int"),
        (["a", b"bytes"], "[1] must be a string; got bytes"),
        (["a", "  "], "[1] is an empty prompt"),
        ([], "is an empty list"),
        (("a", "b"), "got tuple"),
    ],
)
def test_import_refuses_content_other_than_a_list_of_strings(tmp_path, capsys, content, message):
    bad = _pickle(tmp_path / "100_prompts.pkl", content)
    out = tmp_path / "out.json"
    status, _, err = _import(capsys, bad, "--out", out)
    _assert_one_line_error(status, err, str(bad), message)
    assert not out.exists()


def test_import_refuses_a_file_that_is_not_a_pickle(tmp_path, capsys):
    bad = tmp_path / "100_prompts.pkl"
    bad.write_text('["this is JSON, not a pickle"]')
    status, _, err = _import(capsys, bad, "--out", tmp_path / "out.json")
    _assert_one_line_error(status, err, str(bad), "not a readable pickle")


def test_import_of_several_pickles_needs_the_length_sweep_names(tmp_path, capsys):
    good = _pickle(tmp_path / "5_tokens_prompts.pkl", ["a b c d e"])
    other = _pickle(tmp_path / "100_prompts.pkl", ["x"])
    status, _, err = _import(capsys, good, other, "--out", tmp_path / "out.json")
    _assert_one_line_error(status, err, "{N}_tokens_prompts.pkl", str(other))
    assert str(good) not in err
    twin = tmp_path / "again"
    twin.mkdir()
    twin = _pickle(twin / "5_tokens_prompts.pkl", ["f g h i j"])
    status, _, err = _import(capsys, good, twin, "--out", tmp_path / "out.json")
    _assert_one_line_error(status, err, "two pickles give length 5", str(good), str(twin))


def test_import_refuses_to_overwrite_without_force(tmp_path, capsys):
    source = _pickle(tmp_path / "100_prompts.pkl", ["new prompt"])
    out = tmp_path / "out.json"
    out.write_text('["old prompt"]\n')
    status, _, err = _import(capsys, source, "--out", out)
    _assert_one_line_error(status, err, str(out), "already exists", "--force")
    assert json.loads(out.read_text()) == ["old prompt"]
    status, _, err = _import(capsys, source, "--out", out, "--force")
    assert (status, err) == (0, "") and json.loads(out.read_text()) == ["new prompt"]


@pytest.mark.parametrize(
    ("out_name", "message"), [("out.txt", "must end in .json"), ("no/such/out.json", "does not exist")]
)
def test_import_refuses_an_unusable_out_path(tmp_path, capsys, out_name, message):
    source = _pickle(tmp_path / "100_prompts.pkl", ["a prompt"])
    status, _, err = _import(capsys, source, "--out", tmp_path / out_name)
    _assert_one_line_error(status, err, message)


def test_import_pickle_runs_as_a_module(tmp_path):
    source = _pickle(tmp_path / "100_prompts.pkl", ["a prompt", "another prompt"])
    out = tmp_path / "out.json"
    command = [sys.executable, "-m", "headstab.prompts", "import-pickle", str(source), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote 1 set of 2 prompts to {out}\n" and done.stderr == ""
    again = subprocess.run(command, capture_output=True, text=True, check=False)
    assert again.returncode == 2 and again.stderr.startswith("error: ") and "Traceback" not in again.stderr
