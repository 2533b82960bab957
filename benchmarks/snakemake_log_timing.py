"""Where a Snakemake run's time went: per rule, jobs and job-seconds, from the run's console log.

    python benchmarks/snakemake_log_timing.py .snakemake/log/<run>.snakemake.log [--top 5]

A job's seconds run from the timestamp before its `rule NAME:` block to the one before its
`Finished jobid: N`; with several cores, job-seconds add up to more than the wall time, which is the
last timestamp minus the first.
"""

from __future__ import annotations

import argparse
import re
import statistics
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?rule (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


def rule_timing(lines: list[str]) -> tuple[dict[str, list[float]], float]:
    """({rule: [seconds of each finished job]}, wall seconds from the first timestamp to the last)."""
    stamp = first = None
    started: dict[str, tuple[str, datetime]] = {}
    pending_rule = None
    seconds: dict[str, list[float]] = {}
    for line in lines:
        if match := STAMP.match(line):
            stamp = datetime.strptime(match.group(1), "%a %b %d %H:%M:%S %Y")
            first = first or stamp
        elif match := RULE.match(line):
            pending_rule = (match.group(1), stamp)
        elif (match := JOBID.match(line)) and pending_rule:
            started[match.group(1)] = pending_rule
            pending_rule = None
        elif match := FINISHED.match(line):
            rule, start = started.pop(match.group(1), (match.group(2), None))
            if start is not None and stamp is not None:
                seconds.setdefault(rule, []).append((stamp - start).total_seconds())
    wall = (stamp - first).total_seconds() if stamp and first else 0.0
    return seconds, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path)
    parser.add_argument("--top", type=int, default=0, help="only the rules with the most job-seconds")
    args = parser.parse_args()
    seconds, wall = rule_timing(args.log.read_text().splitlines())
    rows = sorted(seconds.items(), key=lambda item: -sum(item[1]))
    print(
        f"wall {wall:.0f} s, {sum(map(len, seconds.values()))} jobs, {sum(map(sum, seconds.values())):.0f} job-seconds"
    )
    print("| rule | jobs | job-seconds | median s |\n|---|---|---|---|")
    for rule, values in rows[: args.top or None]:
        print(f"| {rule} | {len(values)} | {sum(values):.0f} | {statistics.median(values):.1f} |")


if __name__ == "__main__":
    main()
