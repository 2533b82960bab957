"""fp32 against bf16 training of the same refits: the loss they end at and the layer stability they reach.

The demo's l2_h8_attn (d_model 64, 8 heads of 8, attention-only), seeds 1-4, one epoch of 2,048 steps of batch
8 x 128 on benchmarks/precision.yaml's synthetic corpus, sdpa attention, the 4 seeds stacked in one job on one
CPU thread, once with `training.precision: fp32` and once with `bf16`. Two steps:

  python benchmarks/bench_precision.py train --precision fp32 --results results/precision/fp32   # and bf16
  snakemake --cores 2 --configfile benchmarks/precision.yaml --config results_dir=results/precision/fp32 \\
      training='{precision: fp32}' -- results/precision/fp32/l2_h8_attn/tables/layer_stability_pooled.csv
  python benchmarks/bench_precision.py compare --results results/precision

`train` trains the refits where the workflow's train job would (Layout.training_dir), after snakemake built the
data (`snakemake ... -- <results>/data/synthetic_large/meta.json <results>/tokenizers/demo_bpe/meta.json`);
the workflow's own train job then finds every refit at its last step and only exports it, and the rest of the
DAG (caches, similarity, stability tables with their bootstrap) runs as in any run. `compare` reports
|difference of the mean final loss| / the seed-to-seed s.d. (pooled over both precisions, ddof 1) and, per
layer, |difference of pooled layer stability| / the width of fp32's bootstrap interval.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "benchmarks" / "precision.yaml"
ARCH = "l2_h8_attn"


def train(
    precision: str, results: Path, threads: int = 1, attention: str = "sdpa", seeds: list[int] | None = None
) -> list[dict[str, Any]]:
    """Train the architecture's seeds (or `seeds` of them) in one stacked job, in the workflow's training
    directories; a job of fewer refits ends with the same weights (the stack is an execution grouping)."""
    from headstab.plan.config import architecture_spec, load_config
    from headstab.plan.layout import Layout
    from headstab.training import RefitTarget, TrainingData, TrainingOptions, train_refits

    config = load_config(CONFIG)
    config["results_dir"] = str(results)
    spec, layout = architecture_spec(config, ARCH), Layout(config)
    data = TrainingData.of(
        layout.corpus_shards(spec.corpus), layout.corpus_meta(spec.corpus), layout.tokenizer_dir(spec.tokenizer)
    )
    targets = [RefitTarget(seed, Path(layout.training_dir(ARCH, seed))) for seed in seeds or spec.seeds]
    options = TrainingOptions(precision=precision, attention=attention, device="cpu", threads=threads)
    return train_refits(spec, targets, data, options)


def pooled_sd(*groups: list[float]) -> float:
    """The seed-to-seed s.d. pooled over groups (each with its own mean), ddof 1 per group."""
    squares = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups)
    return (squares / sum(len(g) - 1 for g in groups)) ** 0.5


def compare(results: Path, precisions: tuple[str, str] = ("fp32", "bf16")) -> dict[str, Any]:
    reference, other = precisions
    losses = {}
    for precision in precisions:
        metas = sorted((results / precision / ARCH / "checkpoints").glob("seed*/meta.json"))
        losses[precision] = [json.loads(path.read_text())["final_loss"] for path in metas]
    delta = statistics.fmean(losses[other]) - statistics.fmean(losses[reference])
    out: dict[str, Any] = {
        "final_loss": losses,
        "final_loss_mean_delta": delta,
        "final_loss_seed_sd": pooled_sd(*losses.values()),
        "train_bf16_loss_delta_sd": abs(delta) / pooled_sd(*losses.values()),
    }
    tables = {}
    for precision in precisions:
        with open(results / precision / ARCH / "tables" / "layer_stability_pooled.csv", newline="") as handle:
            tables[precision] = [row for row in csv.DictReader(handle) if row.get("promptset", "primary") == "primary"]
    if tables[reference] and tables[other]:
        layers = []
        for ref, oth in zip(tables[reference], tables[other]):
            width = float(ref["ci_high"]) - float(ref["ci_low"])
            change = float(oth["stability"]) - float(ref["stability"])
            layers.append(
                {
                    "scope": ref.get("scope", "same_layer"),
                    "layer": int(ref["layer"]),
                    "fp32": float(ref["stability"]),
                    "bf16": float(oth["stability"]),
                    "fp32_ci": [float(ref["ci_low"]), float(ref["ci_high"])],
                    "change_over_ci_width": abs(change) / width,
                }
            )
        out["layer_stability"] = layers
        out["train_bf16_stability_delta_ci"] = max(layer["change_over_ci_width"] for layer in layers)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("train", "compare"))
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="*", default=None, help="train: these seeds only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.step == "train":
        metas = train(args.precision, args.results, args.threads, seeds=args.seeds)
        print(json.dumps({"final_loss": [m["final_loss"] for m in metas]}))
    else:
        print(json.dumps(compare(args.results), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
