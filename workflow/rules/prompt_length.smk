# Paper §4.4.2, Fig. 5 / B.4: layer stability by prompt length.
#
#   prompt_length  {RESULTS}/{arch}/tables/prompt_length.csv, figures/prompt_length.png
#
# Only when the config has a length sweep (prompt sets len5 ... len50). Library:
# headstab.sections.prompt_length, headstab.plots.prompt_length.

import re

LENGTH_SWEEP_SETS = [name for name in PROMPT_SETS if re.fullmatch(r"len\d+", name)]
# Outputs of one architecture; none without a length sweep.
PROMPT_LENGTH_TARGETS = {
    arch: (
        [LAYOUT.table_path(arch, "prompt_length"), LAYOUT.figure_path(arch, "prompt_length")]
        if LENGTH_SWEEP_SETS
        else []
    )
    for arch in ARCHITECTURES
}

add_outputs(PROMPT_LENGTH_TARGETS)


rule prompt_length:
    """Layer-wise stability for every prompt length len5 ... len50 (paper §4.4.2, Fig. 5 / B.4),
    first seed as anchor."""
    input:
        layer_stability=LAYOUT.table_path("{arch}", "layer_stability"),
    output:
        table=LAYOUT.table_path("{arch}", "prompt_length"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "prompt_length")),
        figure=report(
            LAYOUT.figure_path("{arch}", "prompt_length"),
            caption="../report/prompt_length.rst",
            category="{arch}",
            subcategory="Prompt length (§4.4.2)",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "prompt_length")),
    log:
        LAYOUT.log("prompt_length", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        configuration=by_arch("configuration"),
        anchor_seed=by_arch("anchor_seed"),
    script:
        "../scripts/prompt_length.py"
