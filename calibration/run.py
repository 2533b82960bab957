"""make calibration: the size and coverage of every kind of p-value and interval the workflow reports, at the n
it is reported for, on data simulated with the dependence the real data has (docs/statistics.md, "Calibration").

    python calibration/run.py                 # the full study -> results/calibration/
    python calibration/run.py --quick         # each case once at its quick n, few datasets (what make test runs)
    python calibration/run.py --methods sign_flip_paired layer_heterogeneity

Writes summary.csv (one row per method, scenario and n: rate, Monte-Carlo s.e., bound, passed, the workflow's
label there, consistent), methods.csv (per method: its min_n in headstab.statistics.calibration and the one the
study measured), power.csv (the effect each claim's test detects with 80% power at n = 4, 5, 50) and
summary.png. Exits 1 when a method the workflow calls calibrated at some n failed there, or when a reported
method has no case.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from calibration.cases import CASES, POWER  # noqa: E402
from calibration.harness import detectable_effect, evaluate, min_n_passing  # noqa: E402
from headstab.statistics.calibration import CALIBRATION_NS, METHODS  # noqa: E402

OUT = ROOT / "results" / "calibration"


def run_cases(methods: list[str], quick: bool, seed: int) -> pd.DataFrame:
    outcomes = []
    for case in [c for c in CASES if c.method in methods]:
        ns = (case.quick_n,) if quick else (case.ns or CALIBRATION_NS)
        for n in ns:
            start = time.monotonic()
            outcome = evaluate(case, n, case.quick_reps if quick else case.reps_for(n), seed)
            print(
                f"{case.method:40s} {case.scenario:28s} n={n:3d} {case.kind:8s} rate {outcome.rate:.3f} "
                f"(bound {outcome.bound:.3f}) {'pass' if outcome.passed else 'FAIL'} [{outcome.label}] "
                f"{time.monotonic() - start:.1f} s",
                flush=True,
            )
            outcomes.append(outcome)
    return pd.DataFrame([asdict(o) for o in outcomes])


def method_table(summary: pd.DataFrame) -> pd.DataFrame:
    from calibration.harness import Outcome

    rows = []
    for name, method in METHODS.items():
        chosen = summary[summary["method"] == name]
        outcomes = [Outcome(**row) for row in chosen.to_dict("records")]
        measured = min_n_passing(outcomes, CALIBRATION_NS) if len(chosen) else None
        rows.append(
            {
                "method": name,
                "reports": method.reports,
                "unit": method.unit,
                "min_n": method.min_n,
                "measured_min_n": measured,
                "cases": int(chosen[["scenario"]].drop_duplicates().shape[0]),
                "statistic": method.statistic,
            }
        )
    return pd.DataFrame(rows)


def run_power(methods: list[str], quick: bool, seed: int) -> pd.DataFrame:
    rows = []
    for case in [c for c in POWER if c.method in methods]:
        for n in case.ns[:1] if quick else case.ns:
            effect, power = detectable_effect(case, n, 50 if quick else case.reps, seed)
            rows.append(
                {
                    "method": case.method,
                    "claim": case.claim,
                    "n": n,
                    "detectable_effect": effect,
                    "effect_unit": case.effect_unit,
                    "power": power,
                }
            )
            print(f"power {case.claim:50s} n={n:3d} detectable {effect:.4g} {case.effect_unit}", flush=True)
    return pd.DataFrame(rows, columns=["method", "claim", "n", "detectable_effect", "effect_unit", "power"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="each case at its quick n with its quick datasets")
    parser.add_argument("--methods", nargs="*", default=None, help=f"some of: {', '.join(METHODS)}")
    parser.add_argument("--seed", type=int, default=20261128)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    methods = args.methods or list(METHODS)
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown method(s) {unknown}; known: {', '.join(METHODS)}")
    uncovered = sorted(set(methods) - {c.method for c in CASES})
    if uncovered:
        print(f"these reported methods have no calibration case: {uncovered}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    summary = run_cases(methods, args.quick, args.seed)
    summary.to_csv(args.out / "summary.csv", index=False)
    method_table(summary).to_csv(args.out / "methods.csv", index=False)
    run_power(methods, args.quick, args.seed).to_csv(args.out / "power.csv", index=False)
    if not args.quick:
        from calibration.figure import plot_summary

        plot_summary(summary, args.out / "summary.png")
    bad = summary[~summary["consistent"]]
    if len(bad):
        print(f"called calibrated but failed:\n{bad.to_string(index=False)}", file=sys.stderr)
        return 1
    print(f"{len(summary)} rows, every one passes or is labelled descriptive -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
