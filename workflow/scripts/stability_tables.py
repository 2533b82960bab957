"""Rule stability_tables: similarity/{promptset}.h5 (+ .groups.h5, + step-0 .groups.h5) of one architecture
-> tables/*.csv, with bootstrap intervals, the null and the step-0 baseline (docs/statistics.md)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.similarity.pairs import read_pair_similarity
from headstab.similarity.prompt_groups import read_grouped_similarity
from headstab.stability import TABLE_NAMES, stability_tables
from headstab.statistics.interval_tables import TABLE_NAMES as INTERVAL_TABLE_NAMES
from headstab.statistics.interval_tables import interval_tables

KEYS = {"head_stability": ["promptset", "scope", "anchor_seed", "layer", "head"]}
KEYS["layer_stability"] = KEYS["head_stability"][:-1]
KEYS["commonness"] = ["promptset", "seed", "layer", "head"]


def main():
    ddof, options = snakemake.params.layer_std_ddof, snakemake.params.statistics
    logging.info("layer s.d. over heads with ddof=%d; statistics %s", ddof, options)
    names = (*TABLE_NAMES, *INTERVAL_TABLE_NAMES)
    collected = {name: [] for name in names}
    init_paths = list(snakemake.input.init) or [None] * len(snakemake.params.promptsets)
    inputs = zip(
        snakemake.input.similarity, snakemake.input.grouped, init_paths, snakemake.params.promptsets, strict=True
    )
    for path, grouped_path, init_path, promptset in inputs:
        similarity, seeds = read_pair_similarity(path)
        grouped = read_grouped_similarity(grouped_path)
        if list(grouped.seeds) != list(seeds):
            raise ValueError(f"{grouped_path} covers seeds {grouped.seeds}, {path} covers {seeds}; rebuild both")
        logging.info(
            "%s: %d refits, tensor %s; %d prompt groups", path, len(seeds), similarity.shape, len(grouped.group_sizes)
        )
        tables = stability_tables(
            similarity, seeds, promptset, ddof=ddof, alignment_self_match=snakemake.params.alignment_self_match
        )
        intervals = interval_tables(
            similarity,
            grouped,
            promptset,
            n_boot=options["n_boot"],
            seed=options["seed"],
            confidence=options["confidence"],
            init=None if init_path is None else read_grouped_similarity(init_path),
        )
        for name, interval_name in (
            ("head_stability", "head"),
            ("layer_stability", "layer"),
            ("commonness", "commonness"),
        ):
            # A left merge keeps the table's rows; a row without its interval would read as a NaN interval.
            merged = tables[name].merge(intervals[interval_name], on=KEYS[name], how="left", validate="one_to_one")
            if merged["n_boot"].isna().any():
                raise ValueError(f"{name} ({promptset}): some rows have no bootstrap interval; rebuild {grouped_path}")
            tables[name] = merged
        tables["layer_stability_pooled"] = intervals["pooled"]
        tables["stability_gap_intervals"] = intervals["gap"]
        for name, table in tables.items():
            collected[name].append(table)
    for name in names:
        table = pd.concat(collected[name], ignore_index=True)
        table.to_csv(snakemake.output[name], index=False)
        logging.info("wrote %s (%d rows)", snakemake.output[name], len(table))


run_job(main, "stability_tables", snakemake.log[0])
