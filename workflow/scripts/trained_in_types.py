"""Rule trained_in_types: head_types.csv, head_type_thresholds.csv, head_type_scores_step0.csv and
head_type_universality.csv of every architecture trained here -> summary/tables/trained_in_types.csv and
summary/trained_in_types.html, the report's summary of the head types training put there."""

import html

import pandas as pd

from headstab.head_types import type_heads
from headstab.joblog import run_job
from headstab.report_pages import table_page
from headstab.sections.trained_in import trained_in_sentences, trained_in_table


def main():
    inp, params = snakemake.input, snakemake.params
    options = params.statistics
    tables = [
        trained_in_table(
            arch,
            pd.read_csv(trained),
            type_heads(pd.read_csv(step0), pd.read_csv(thresholds)),
            pd.read_csv(universality),
            min_share=params.min_share,
            n_boot=options["n_boot"],
            seed=options["seed"],
            confidence=options["confidence"],
        )
        for arch, trained, thresholds, step0, universality in zip(
            params.architectures, inp.trained, inp.thresholds, inp.step0, inp.universality, strict=True
        )
    ]
    table = pd.concat(tables, ignore_index=True)
    table.to_csv(snakemake.output.table, index=False)
    sentences = trained_in_sentences(table, params.architectures, params.training)
    description = (
        f"A type is trained in when at least {params.min_share:g} of the trained refits have a head of it in the "
        "layer and the upper end of the step-0 refits' interval lies below the lower end of the trained one "
        f"({options['confidence']:g} intervals over refits); both are typed with the step-0 quantile thresholds."
    )
    page = table_page(table, "Head types that training put there", snakemake.output.table, len(table), description, 3)
    # the sentences go first, one paragraph each, under the title
    paragraphs = "".join(f"<p><b>{html.escape(sentence)}</b></p>" for sentence in sentences)
    page = page.replace("</h3>", "</h3>" + paragraphs, 1)
    with open(snakemake.output.page, "w", encoding="utf-8") as handle:
        handle.write(page)


run_job(main, "trained_in_types", snakemake.log[0])
