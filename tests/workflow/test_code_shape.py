"""The library stays readable: no module over 400 lines, no function over 80, and no timing or issue
number in its comments (measurements belong in benchmarks/README.md); no model loader runs a model's own code;
no import cycle, and the parse-time package imports nothing above it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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


def test_the_formatter_decides_every_layout():
    skipped = [
        f"{path.relative_to(LIBRARY)}:{number}"
        for path in MODULES
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"#\s*fmt:\s*(skip|off)", line)
    ]
    assert not skipped, skipped


def test_comments_hold_no_issue_numbers_or_timings():
    pattern = re.compile(r"#.*(\bissue \d+|\b\d+(\.\d+)? ?(ms|s|GB|MB|GiB) (on|per) \d+ cores?)", re.I)
    found = [
        f"{path.relative_to(LIBRARY)}:{number}: {line.strip()}"
        for path in MODULES
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found


def _imported_modules(path: Path, names: set[str]) -> set[str]:
    """headstab modules `path` imports anywhere in it (function-level imports too), by dotted name."""
    package = ".".join(path.relative_to(LIBRARY.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            candidates = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found.update(name for name in candidates if name in names)
    return found


def import_graph() -> dict[str, set[str]]:
    """Every headstab module -> the headstab modules it imports."""

    def name_of(path: Path) -> str:
        parts = path.relative_to(LIBRARY.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    names = {name_of(path): path for path in MODULES}
    return {name: _imported_modules(path, set(names)) - {name} for name, path in names.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a cycle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return cycles


def test_import_cycles_are_found_where_planted():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_the_library_has_no_import_cycle_even_through_function_level_imports():
    graph = import_graph()
    assert "headstab.plan.config" in graph and graph["headstab.plan.config"]
    assert import_cycles(graph) == []


def test_the_parse_time_package_imports_nothing_of_headstab_outside_it():
    outside = {
        module: sorted(other for other in imports if not other.startswith("headstab.plan"))
        for module, imports in import_graph().items()
        if module.startswith("headstab.plan")
    }
    assert {module: others for module, others in outside.items() if others} == {}


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


# Scripts of jobs that load or run a model: torch at start-up is their work, not overhead.
MODEL_SCRIPTS = {
    "ablation_perplexity", "activation_norms", "cache_activations", "digest_refit", "digest_revision", "fetch_family",
    "fetch_published",
    "head_type_scores", "init_weights", "layer_drop_swap", "neuron_statistics", "noise_ceiling_scores",
    "snapshot_weights", "train",
    "validation_perplexity",
    "weight_norms",
}  # fmt: skip


def _imports_of(scripts: list[Path]) -> str:
    lines = []
    for script in scripts:
        tree = ast.parse(script.read_text())
        lines += [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    return "\n".join(dict.fromkeys(lines))


def test_job_start_up_imports_no_transformer_lens_and_analysis_jobs_no_torch():
    """Every workflow script's module-level imports, in one interpreter: transformer_lens (seconds to import) is
    imported inside the functions that build a model, and the analysis scripts do not import torch at all."""
    import subprocess
    import sys

    scripts = sorted((REPO / "workflow/scripts").glob("*.py"))
    analysis = [script for script in scripts if script.stem not in MODEL_SCRIPTS]
    check = "\nimport sys\nprint(' '.join(name for name in ('torch', 'transformer_lens') if name in sys.modules))"
    loaded = {}
    for name, chosen in (("every script", scripts), ("the analysis scripts", analysis)):
        result = subprocess.run([sys.executable, "-c", _imports_of(chosen) + check], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-2000:]
        loaded[name] = result.stdout.split()
    assert "transformer_lens" not in loaded["every script"], "a script imports transformer_lens at module level"
    assert loaded["the analysis scripts"] == [], f"an analysis script imports {loaded['the analysis scripts']}"
