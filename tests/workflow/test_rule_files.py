"""The rule files spell each path one way and keep to themselves: every output, log and benchmark path is a
headstab.plan.layout.Layout call (no f-string of RESULTS, no alias of a Layout method), each log is named
after the rule that writes it, and no rule file reads a global another rule file defines (what several
share lives in common.smk, their shared input functions in functions.smk)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((REPO / "workflow/rules").glob("*.smk"))
SHARED = ("common.smk", "functions.smk")


def _globals(path: Path) -> set[str]:
    """Names a rule file defines: top-level assignments and functions, and constants assigned one level in (a
    `try:` around a config check)."""
    text = path.read_text()
    constants = set(re.findall(r"^    ([A-Z][A-Z0-9_]*)\s*=", text, re.M))
    return (
        constants
        | set(re.findall(r"^([A-Za-z_]\w*)\s*=", text, re.M))
        | set(re.findall(r"^def ([A-Za-z_]\w*)", text, re.M))
    )


def test_paths_are_layout_calls():
    literals = [
        f"{path.name}:{number}: {line.strip()}"
        for path in RULE_FILES
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r'f"\{RESULTS\}', line)
    ]
    assert RULE_FILES and not literals, literals
    text = (REPO / "workflow/rules/common.smk").read_text()
    aliases = [m for m in re.findall(r"^(\w+) = LAYOUT\.(\w+)$", text, re.M) if m[1] != "results"]
    assert not aliases, aliases


def test_each_log_and_benchmark_is_named_after_its_rule():
    wrong = []
    for path in RULE_FILES:
        for block in re.split(r"\n(?=rule \w+:|use rule \w+ as \w+ with:)", path.read_text())[1:]:
            rule = re.match(r"(?:rule|use rule \w+ as) (\w+)", block).group(1)
            for section in ("log", "benchmark"):
                entry = re.search(rf"^    {section}:\n\s+(.+)$", block, re.M)
                if entry and not entry.group(1).startswith(f'LAYOUT.{section}("{rule}"'):
                    wrong.append(f"{path.name}: rule {rule} {section}: {entry.group(1)}")
    assert not wrong, wrong


def test_no_rule_file_reads_another_rule_files_globals():
    homes = {}
    for path in RULE_FILES:
        for name in _globals(path):
            homes.setdefault(name, path.name)
    reads = [
        f"{path.name} reads {name} of {home}"
        for path in RULE_FILES
        for name, home in homes.items()
        if home not in (path.name, *SHARED) and re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", path.read_text())
    ]
    assert not reads, reads


_FIGURE = r"LAYOUT\.(?:summary_|compare_)?figure_path\([^)]*\)"


def _figure_outputs(block: str) -> tuple[set[str], set[str]]:
    """The figure paths a rule's output section declares, and those it declares a record of."""
    output = re.search(r"^    output:\n(.*?)(?=^    \w+:)", block, re.M | re.S)
    text = output.group(1) if output else ""
    return set(re.findall(_FIGURE, text)), set(re.findall(rf"LAYOUT\.figure_record\(({_FIGURE})\)", text))


def test_every_figure_is_declared_with_its_record_and_its_script_writes_them():
    """A rule that draws a figure names its record (LAYOUT.figure_record) among its outputs, like a table's, and its
    script calls write_figure_records (headstab.table_files), so `python -m headstab.provenance --verify` can tell a
    hand-edited figure."""
    problems, rules = [], 0
    for path in RULE_FILES:
        for block in re.split(r"\n(?=rule \w+:|use rule \w+ as \w+ with:)", path.read_text())[1:]:
            figures, recorded = _figure_outputs(block)
            if not figures:
                continue
            rules += 1
            rule = re.match(r"(?:rule|use rule \w+ as) (\w+)", block).group(1)
            problems += [f"{path.name}: rule {rule} declares no record of {figure}" for figure in figures - recorded]
            script = re.search(r'^    script:\n\s+"\.\./scripts/(\w+\.py)"', block, re.M)
            if (
                not script
                or "write_figure_records(snakemake)" not in (REPO / "workflow/scripts" / script.group(1)).read_text()
            ):
                problems.append(f"{path.name}: the script of rule {rule} does not call write_figure_records(snakemake)")
    assert rules and not problems, problems


def test_the_figure_check_sees_a_figure_without_its_record():
    block = (
        'rule x:\n    output:\n        figure=LAYOUT.figure_path("{arch}", "x"),\n    log:\n        LAYOUT.log("x"),\n'
    )
    assert _figure_outputs(block) == ({'LAYOUT.figure_path("{arch}", "x")'}, set())
    recorded = block.replace(
        "    log:", '        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "x")),\n    log:'
    )
    assert _figure_outputs(recorded) == ({'LAYOUT.figure_path("{arch}", "x")'},) * 2
