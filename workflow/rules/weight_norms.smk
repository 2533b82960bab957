# Paper §4.4.1, Table B.5: weight norms vs layer stability.
#
#   weight_norms             {RESULTS}/{arch}/tables/weight_norms.csv             every refit's per-layer norms
#                            {RESULTS}/{arch}/tables/head_weight_norms.csv        and per-head attention norms
#   weight_norm_correlation  {RESULTS}/{arch}/tables/weight_norm_correlation.csv  r over layers, every anchor
#                            {RESULTS}/{arch}/tables/weight_norm_partial.csv      per layer, over heads, given entropy
#                            {RESULTS}/{arch}/figures/weight_norm_correlation.png
#   weight_norm_summary      {RESULTS}/summary/tables/weight_norm_correlation.csv  Table B.5 across architectures
#
# Library: headstab.sections.weight_norms, headstab.plots.weight_norms.

# Outputs of one architecture, and the cross-architecture table (none for an empty run).
WEIGHT_NORMS_TARGETS = {
    arch: [
        LAYOUT.table_path(arch, "weight_norms"),
        LAYOUT.table_path(arch, "head_weight_norms"),
        LAYOUT.table_path(arch, "weight_norm_correlation"),
        LAYOUT.table_path(arch, "weight_norm_partial"),
        LAYOUT.figure_path(arch, "weight_norm_correlation"),
    ]
    for arch in ARCHITECTURES
}
WEIGHT_NORMS_SUMMARY_TARGETS = [LAYOUT.summary_table_path("weight_norm_correlation")] if ARCHITECTURES else []
WEIGHT_NORM_CORRELATIONS = [LAYOUT.table_path(arch, "weight_norm_correlation") for arch in ARCHITECTURES]

add_outputs(WEIGHT_NORMS_TARGETS, shared=WEIGHT_NORMS_SUMMARY_TARGETS)


rule weight_norms:
    """Per-layer weight norms of every refit (paper §4.4.1): W_Q, W_K, W_V, W_O per head (averaged over
    heads, or of the whole layer: analysis.attention_norm), MLP W_in/W_out and LayerNorm gains, from
    final.pt processed as the caches were (analysis.weight_processing), and every head's own attention
    norms. CPU only."""
    input:
        weights=by_arch("weights"),
        audit=family_audit,
    output:
        table=LAYOUT.table_path("{arch}", "weight_norms"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "weight_norms")),
        heads=LAYOUT.table_path("{arch}", "head_weight_norms"),
        heads_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "head_weight_norms")),
    log:
        LAYOUT.log("weight_norms", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        spec=by_arch("refit_spec"),
        attention_norm=config["analysis"]["attention_norm"],
        weight_processing=config["analysis"]["weight_processing"],
    script:
        "../scripts/weight_norms.py"


rule weight_norm_correlation:
    """Weight norms vs layer stability (paper §4.4.1, Table B.5): Pearson correlation over layers between
    each refit's per-layer norm of every matrix and that refit's layer-wise stability as anchor, and the
    partial correlation given entropy (over layers; and per layer over heads, W_Q)."""
    input:
        weight_norms=LAYOUT.table_path("{arch}", "weight_norms"),
        head_weight_norms=LAYOUT.table_path("{arch}", "head_weight_norms"),
        layer_stability=LAYOUT.table_path("{arch}", "layer_stability"),
        head_stability=LAYOUT.table_path("{arch}", "head_stability"),
    output:
        correlation=LAYOUT.table_path("{arch}", "weight_norm_correlation"),
        correlation_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "weight_norm_correlation")),
        partial=LAYOUT.table_path("{arch}", "weight_norm_partial"),
        partial_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "weight_norm_partial")),
        figure=report(
            LAYOUT.figure_path("{arch}", "weight_norm_correlation"),
            caption="../report/weight_norm_correlation.rst",
            category="{arch}",
            subcategory="Weight norms (§4.4.1)",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "weight_norm_correlation")),
    log:
        LAYOUT.log("weight_norm_correlation", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        configuration=by_arch("configuration"),
        promptset=PRIMARY,
        attention_norm=config["analysis"]["attention_norm"],
        statistics=STATISTICS,  # the partial r's interval, anchors resampled
    script:
        "../scripts/weight_norm_correlation.py"


rule weight_norm_summary:
    """Table B.5 across architectures (paper §4.4.1): per architecture and weight matrix, the Pearson
    correlation of its norm with layer stability, mean and spread over anchors and the first seed's."""
    input:
        correlations=WEIGHT_NORM_CORRELATIONS,
    output:
        table=LAYOUT.summary_table_path("weight_norm_correlation"),
        table_record=LAYOUT.table_record(LAYOUT.summary_table_path("weight_norm_correlation")),
    log:
        LAYOUT.log("weight_norm_summary", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        architectures=ARCHITECTURE_FACTS,
        anchor_seeds=ANCHOR_SEEDS,
        statistics=STATISTICS,  # the mean r's interval, anchors resampled
    script:
        "../scripts/weight_norm_summary.py"
