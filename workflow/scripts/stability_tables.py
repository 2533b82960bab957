"""Rule stability_tables: similarity/{promptset}.h5 (+ .groups.h5, + step-0 .groups.h5) of one architecture
-> tables/*.csv, with bootstrap intervals, the null and the step-0 baseline (docs/statistics.md)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.similarity.pairs import read_pair_similarity, read_pair_similarity_null
from headstab.similarity.prompt_groups import read_grouped_similarity
from headstab.similarity.prompt_identity import check_same_prompts
from headstab.stability import TABLE_NAMES, stability_tables
from headstab.statistics.cross_layer_null import null_alignment_tables
from headstab.statistics.interval_tables import TABLE_NAMES as INTERVAL_TABLE_NAMES
from headstab.statistics.interval_tables import interval_tables
from headstab.table_files import write_table

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
        if init_path is not None:  # the step-0 baseline is compared prompt group by prompt group
            check_same_prompts(grouped_path, init_path, promptset)
        logging.info(
            "%s: %d refits, tensor %s; %d prompt groups", path, len(seeds), similarity.shape, len(grouped.group_sizes)
        )
        self_match, null = snakemake.params.alignment_self_match, read_pair_similarity_null(path)
        tables = stability_tables(similarity, seeds, promptset, ddof=ddof, alignment_self_match=self_match)
        observed_alignment = tables["alignment_map"], tables["alignment_dispersion"]
        null_tensor = None if null is None else null[0]
        alignment = null_alignment_tables(*observed_alignment, null_tensor, seeds, promptset, include_self=self_match)
        tables["alignment_map"], tables["alignment_dispersion"] = alignment
        intervals = interval_tables(
            similarity,
            grouped,
            promptset,
            n_boot=options["n_boot"],
            seed=options["seed"],
            confidence=options["confidence"],
            init=None if init_path is None else read_grouped_similarity(init_path),
            permutations=options["permutations"],
            null_similarity=null,
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
        write_table(table, snakemake.output[name], snakemake)
        logging.info("wrote %s (%d rows)", snakemake.output[name], len(table))


run_job(main, "stability_tables", snakemake.log[0])
