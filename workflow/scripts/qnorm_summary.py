"""Rule qnorm_summary: qnorm_correlation.csv of every architecture -> summary/tables/qnorm_correlation.csv
(paper §4.4.1, Table B.5 across architectures).

One row per (architecture, weight matrix): architecture facts, mean_pearson_r and std_pearson_r (ddof 0)
over anchors, n_anchors, and first_anchor_r / first_anchor_p for the paper's single-anchor view.
"""

import pandas as pd

from headstab.analyses import MATRIX_ORDER
from headstab.joblog import run_job


def main():
    facts, anchors = snakemake.params.architectures, snakemake.params.anchor_seeds
    rows = []
    for arch, path in zip(facts, snakemake.input.correlations, strict=True):
        table = pd.read_csv(path)
        for matrix in [m for m in MATRIX_ORDER if m in set(table["matrix"])]:
            rows_m = table[table["matrix"] == matrix]
            first = rows_m[rows_m["anchor_seed"] == anchors[arch]]
            rows.append({
                "architecture": arch, **facts[arch], "matrix": matrix,
                "mean_pearson_r": rows_m["pearson_r"].mean(), "std_pearson_r": rows_m["pearson_r"].std(ddof=0),
                "n_anchors": int(rows_m["pearson_r"].notna().sum()),
                "first_anchor_r": first["pearson_r"].iloc[0] if len(first) else float("nan"),
                "first_anchor_p": first["p_value"].iloc[0] if len(first) else float("nan"),
            })
    pd.DataFrame(rows).to_csv(snakemake.output.table, index=False)


run_job(main, "qnorm_summary", snakemake.log[0])
