"""The authors' prompt pickles, converted to the JSON prompt files the workflow reads (headstab.prompts.loading).

The paper's exact prompts: the authors' repository ships `notebooks/100_prompts.pkl` and
`notebooks/{5,10,20,30,40,50}_tokens_prompts.pkl`, each a pickled list of strings. Convert them
with

    python -m headstab.prompts import-pickle 100_prompts.pkl --out resources/prompts/paper.json
    python -m headstab.prompts import-pickle {5,10,20,30,40,50}_tokens_prompts.pkl \
        --out resources/prompts/paper_lengths.json

and name the JSON files under `prompt_sets` in the config (the second gives `len5` ... `len50`
under the key `len`). This importer is the one place where a user's pickle is read, and it is safe
by construction: its unpickler resolves no global, no persistent id and no extension code at all
(`find_class` and `persistent_load` always refuse), so a pickle can only
build built-in values (lists, dicts, strings, numbers) and no code in it can run. The workflow
itself reads JSON only.
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import pickletools
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from headstab.fileio import atomic_path
from headstab.prompts.loading import check_prompts, load_prompt_file

__all__ = ["import_prompt_pickles", "main", "read_prompt_pickle", "write_prompt_json"]

# The authors' length-sweep pickles: notebooks/{N}_tokens_prompts.pkl.
SWEEP_PICKLE_NAME = re.compile(r"^(\d+)_tokens_prompts\.pkl$")


class RefusedPickleContent(pickle.UnpicklingError):
    """A prompt pickle asked for a global, a persistent id or an extension code; nothing of it ran."""


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickler that resolves no global and no persistent id, so unpickling can run no code."""

    def __init__(self, file: Any, path: Path) -> None:
        super().__init__(file)
        self._path = path

    def find_class(self, module: str, name: str) -> NoReturn:
        raise RefusedPickleContent(
            f"{self._path}: refused global {module}.{name}; a prompt pickle holds only a list of "
            "strings, so no global is ever loaded (nothing in the file was run)"
        )

    def persistent_load(self, pid: Any) -> NoReturn:
        raise RefusedPickleContent(
            f"{self._path}: refused persistent id {pid!r}; a prompt pickle holds only a list of strings"
        )


def _refuse_extension_codes(data: bytes, path: Path) -> None:
    """Refuse EXT1/EXT2/EXT4 opcodes before loading.

    An extension code can fetch an object cached by an earlier unpickling in this process without
    calling find_class, so it is the one way past the no-globals unpickler. Malformed data is left
    for the unpickler to report.
    """
    try:
        for opcode, arg, position in pickletools.genops(data):
            if opcode.name in ("EXT1", "EXT2", "EXT4"):
                raise RefusedPickleContent(
                    f"{path}: refused extension code {arg} (opcode {opcode.name} at byte {position}); "
                    "a prompt pickle holds only a list of strings"
                )
    except RefusedPickleContent:
        raise
    except Exception:  # noqa: BLE001  (the unpickler below reports malformed data with its reason)
        return


def read_prompt_pickle(path: str | Path) -> list[str]:
    """The list of prompt strings pickled in `path`, read without resolving any global."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompt pickle not found: {path}; check the path")
    data = path.read_bytes()
    try:
        _refuse_extension_codes(data, path)
        content = _NoGlobalsUnpickler(io.BytesIO(data), path).load()
    except RefusedPickleContent as error:
        raise ValueError(str(error)) from error
    # Malformed pickles raise many exception types (pickle docs), all meaning "not a pickle".
    except Exception as error:  # noqa: BLE001
        raise ValueError(
            f"{path}: not a readable pickle ({type(error).__name__}: {error}); "
            "give the authors' *_prompts.pkl file, a pickled list of strings"
        ) from error
    return check_prompts(content, path, "the pickled object")


def _sweep_lengths(paths: Sequence[Path]) -> dict[int, Path]:
    """{N: path} for several `{N}_tokens_prompts.pkl` files; other names or a repeated N fail."""
    matches = [(path, SWEEP_PICKLE_NAME.match(path.name)) for path in paths]
    odd = [str(path) for path, match in matches if match is None]
    if odd:
        raise ValueError(
            f"several pickles make one length-sweep JSON object, so each must be named "
            f"{{N}}_tokens_prompts.pkl; these are not: {', '.join(odd)}. Import other pickles one at a time"
        )
    lengths: dict[int, Path] = {}
    for path, n in [(path, int(match.group(1))) for path, match in matches if match is not None]:
        if n in lengths:
            raise ValueError(f"two pickles give length {n}: {lengths[n]} and {path}; give each length once")
        lengths[n] = path
    return lengths


def import_prompt_pickles(paths: Sequence[str | Path]) -> list[str] | dict[str, list[str]]:
    """Prompt-file content from the authors' pickles.

    One pickle gives a list (the primary format); several `{N}_tokens_prompts.pkl` give an object
    {"N": [...]} in numeric order of N (the length_sweep.json format).
    """
    paths = [Path(path) for path in paths]
    if not paths:
        raise ValueError("no pickle given; name at least one *_prompts.pkl file")
    if len(paths) == 1:
        return read_prompt_pickle(paths[0])
    lengths = _sweep_lengths(paths)
    return {str(n): read_prompt_pickle(lengths[n]) for n in sorted(lengths)}


def write_prompt_json(
    data: list[str] | dict[str, list[str]], out: str | Path, force: bool = False
) -> dict[str, list[str]]:
    """Write a prompt file atomically and prove it loads; returns its sets as `load_prompt_file` reads them.

    An existing `out` is refused unless `force`; a half-written file never appears under `out`.
    """
    out = Path(out)
    if out.suffix.lower() != ".json":
        raise ValueError(f"--out {out}: a prompt JSON file must end in .json (a .txt file is read line by line)")
    if out.exists() and not force:
        raise FileExistsError(f"--out {out} already exists; pass --force to overwrite it or choose another name")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"--out {out}: directory {out.parent} does not exist; create it first")
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        # Load the written bytes back through the workflow's own reader before they replace `out`.
        sets = load_prompt_file(out.stem, tmp)
    return sets


def _describe(sets: Mapping[str, list[str]], out: Path) -> str:
    """One line saying how many sets and prompts went where."""
    total = sum(len(prompts) for prompts in sets.values())
    if len(sets) == 1:
        return f"wrote 1 set of {total} prompts to {out}"
    sizes = ", ".join(str(len(prompts)) for prompts in sets.values())
    return f"wrote {len(sets)} sets ({total} prompts: {sizes}) to {out}"


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m headstab.prompts import-pickle PICKLE... --out FILE.json [--force]` or `... synthetic --config C --out F`."""
    parser = argparse.ArgumentParser(
        prog="python -m headstab.prompts",
        description="Prompt-file tools. import-pickle converts the authors' published prompt pickles to JSON.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    importer = commands.add_parser(
        "import-pickle",
        help="convert the authors' *_prompts.pkl files to a prompt JSON file",
        description=(
            "One pickle (e.g. 100_prompts.pkl) gives a JSON list; several {N}_tokens_prompts.pkl give "
            "one JSON object keyed by N (the length_sweep.json format). Pickles are read without "
            "resolving any global, so no code in them can run."
        ),
    )
    importer.add_argument("pickles", nargs="+", metavar="PICKLE", help="the authors' *_prompts.pkl file(s)")
    importer.add_argument("--out", required=True, metavar="FILE.json", help="JSON prompt file to write")
    importer.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    synthetic = commands.add_parser(
        "synthetic",
        help="demo prompts from held-out synthetic documents (headstab.prompts.synthetic)",
        description="Trains the config's tokenizer on its synthetic corpus and writes prompts of 40-80 of its tokens.",
    )
    synthetic.add_argument(
        "--config", required=True, metavar="CONFIG.yaml", help="config whose tokenizer counts tokens"
    )
    synthetic.add_argument("--tokenizer", default="demo_bpe", help="a `source: train` tokenizer of the config")
    synthetic.add_argument("--seed", type=int, default=2, help="held-out generator seed (not a corpus seed)")
    synthetic.add_argument("--n-prompts", type=int, default=100)
    synthetic.add_argument("--out", required=True, metavar="FILE.json", help="JSON prompt file to write")
    args = parser.parse_args(argv)
    if args.command == "synthetic":
        from headstab.prompts.synthetic import write_demo_prompts

        try:
            prompts = write_demo_prompts(args.config, args.out, args.tokenizer, args.seed, args.n_prompts)
        except (ValueError, OSError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        lengths = [p.n_tokens for p in prompts]
        repeats = sum(p.span > 0 for p in prompts)
        print(
            f"wrote {len(prompts)} prompts ({min(lengths)}-{max(lengths)} tokens, {repeats} with a repeated span) to {args.out}"
        )
        return 0
    out = Path(args.out)
    try:
        sets = write_prompt_json(import_prompt_pickles(args.pickles), out, force=args.force)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(_describe(sets, out))
    return 0
