"""The library stays readable: no module over 400 lines, no function over 80, and no timing or issue
number in its comments (measurements belong in benchmarks/README.md); no model loader runs a model's own code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIBRARY = REPO / "src" / "headstab"
MODULES = sorted(LIBRARY.rglob("*.py"))


def test_modules_and_functions_stay_short():
    too_long = []
    for path in MODULES:
        text = path.read_text()
        if len(text.splitlines()) > 400:
            too_long.append(f"{path.relative_to(LIBRARY)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 80:
                too_long.append(
                    f"{path.relative_to(LIBRARY)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
                )
    assert MODULES and not too_long, too_long


def test_comments_hold_no_issue_numbers_or_timings():
    pattern = re.compile(r"#.*(\bissue \d+|\b\d+(\.\d+)? ?(ms|s|GB|MB|GiB) (on|per) \d+ cores?)", re.I)
    found = [
        f"{path.relative_to(LIBRARY)}:{number}: {line.strip()}"
        for path in MODULES
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found


def test_every_hugging_face_loader_refuses_a_models_own_code():
    """Each from_pretrained / boot_transformers passes trust_remote_code=False: never transformers' [y/N] question."""
    calls, unsafe = 0, []
    for path in sorted([*MODULES, *(REPO / "workflow").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in ("from_pretrained", "boot_transformers"):
                continue
            calls += 1
            flag = next((k.value for k in node.keywords if k.arg == "trust_remote_code"), None)
            if not (isinstance(flag, ast.Constant) and flag.value is False):
                unsafe.append(f"{path.relative_to(REPO)}:{node.lineno} {node.func.attr}")
    assert calls >= 6 and not unsafe, unsafe
