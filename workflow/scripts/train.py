"""Rule train: one refit (architecture, seed) -> final.pt, train_log.csv, meta.json (paper §3.1)."""

import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))  # the library, also without pip install -e

from headstab.training import spec_from_dict, train_refit


def log_to_file(path):
    """Send stderr (logging, tqdm, library warnings) to the rule's log, appending: a resumed job keeps its history."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), 2)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def main():
    spec = spec_from_dict({**snakemake.params.spec, "seeds": [int(snakemake.wildcards.seed)]})
    train_refit(
        spec,
        seed=int(snakemake.wildcards.seed),
        shard_paths=list(snakemake.input.shards),
        out_dir=Path(snakemake.output.weights).parent,
        corpus_meta_path=snakemake.input.corpus_meta,
        tokenizer_dir=snakemake.params.tokenizer_dir,
        device=snakemake.params.device,
        threads=snakemake.threads,
    )


log_to_file(snakemake.log[0])
try:
    main()
except Exception as error:
    logging.exception("rule train failed")
    print(f"Error in rule train ({snakemake.wildcards.arch} seed {snakemake.wildcards.seed}): {error}\n"
          f"(details: {snakemake.log[0]})", flush=True)
    raise SystemExit(1) from None
