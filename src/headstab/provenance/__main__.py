"""`python -m headstab.provenance OUTPUT [--verify] [--all] [--json]`: the chain from a file of the workflow back
to the corpus shards (docs/operations.md, "Provenance of an output")."""

from __future__ import annotations

import argparse
import json
import sys

from headstab.provenance.checks import FAILED
from headstab.provenance.lineage import as_dict, format_chain, trace, walk


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (0 sound, 1 a file missing or failing its check, 2 not a file
    of the workflow)."""
    parser = argparse.ArgumentParser(
        prog="python -m headstab.provenance",
        description="Print the chain from a workflow output back to the corpus shards.",
    )
    parser.add_argument("output", help="a file the workflow wrote: final.pt, a cache, a similarity file, a table ...")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="recompute every recorded sha256, check the attribute digests of every HDF5 file and read it in "
        "full (its checksums; slow for big files)",
    )
    parser.add_argument("--all", action="store_true", help="expand every refit, not only the first")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a tree")
    args = parser.parse_args(argv)
    try:
        chain = trace(args.output, verify=args.verify, expand_all=args.all)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(as_dict(chain), indent=2, default=str) if args.json else format_chain(chain))
    return 1 if any(node.status in FAILED for node in walk(chain)) else 0


if __name__ == "__main__":
    sys.exit(main())
