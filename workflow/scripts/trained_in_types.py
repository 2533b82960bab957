"""Rule trained_in_types: head_types.csv, head_type_thresholds.csv, head_type_universality.csv and the trained,
step-0 and held-out scores of every architecture trained here -> summary/tables/trained_in_types.csv,
summary/tables/head_type_sensitivity.csv and summary/trained_in_types.html, the report's summary of the head types
training put there."""

import html

import pandas as pd

from headstab.head_type_thresholds import type_heads
from headstab.joblog import run_job
from headstab.report_pages import table_page
from headstab.sections.trained_in import (
    sensitivity_sentences,
    sensitivity_table,
    trained_in_sentences,
    trained_in_table,
)
from headstab.table_files import write_table


def main():
    inp, params = snakemake.input, snakemake.params
    confidence = params.statistics["confidence"]
    tables, sensitivity = [], []
    for k, arch in enumerate(params.architectures):
        thresholds = pd.read_csv(inp.thresholds[k])
        step0 = pd.read_csv(inp.step0[k])
        types = pd.read_csv(inp.trained[k])
        universality = pd.read_csv(inp.universality[k])
        tables.append(
            trained_in_table(
                arch,
                types,
                type_heads(step0, thresholds),
                universality,
                min_share=params.min_share,
                confidence=confidence,
            )
        )
        scores = {"trained": pd.read_csv(inp.scores[k]), "step0": step0, "held_out": pd.read_csv(inp.held_out[k])}
        sensitivity.append(
            sensitivity_table(
                arch,
                scores,
                quantiles=params.sensitivity_quantiles,
                floors=params.floors,
                configured=params.quantile,
                min_share=params.min_share,
                confidence=confidence,
            )
        )
    table = pd.concat(tables, ignore_index=True)
    write_table(table, snakemake.output.table, snakemake)
    moves = pd.concat(sensitivity, ignore_index=True)
    write_table(moves, snakemake.output.sensitivity, snakemake)
    sentences = trained_in_sentences(table, params.architectures, params.training)
    sentences += sensitivity_sentences(moves, params.architectures)
    description = (
        f"A type is trained in when at least {params.min_share:g} of the trained refits have a head of it in the "
        "layer and the exact paired test of the same refits at step 0 against trained gives q <= 0.05 (Benjamini-"
        "Hochberg over the architecture's layer-type rows whose discordant refits can reach 0.05); both sides are "
        "typed with thresholds calibrated on held-out initialisations. Share intervals: exact (Clopper-Pearson) over "
        f"refits at {confidence:g}, not tests. Sensitivity to the thresholds: {snakemake.output.sensitivity}."
    )
    page = table_page(table, "Head types: trained against step 0", snakemake.output.table, len(table), description, 3)
    # the sentences go first, one paragraph each, under the title
    paragraphs = "".join(f"<p><b>{html.escape(sentence)}</b></p>" for sentence in sentences)
    page = page.replace("</h3>", "</h3>" + paragraphs, 1)
    with open(snakemake.output.page, "w", encoding="utf-8") as handle:
        handle.write(page)


run_job(main, "trained_in_types", snakemake.log[0])
