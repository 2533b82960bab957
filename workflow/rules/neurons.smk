# Beyond the paper (docs/beyond_the_paper.md): MLP neurons across refits, Gurnee et al. 2024's universality with
# an exact rotation null, beside head stability by layer. Architectures with MLPs only.
#
#   neuron_statistics    {RESULTS}/{arch}/neurons/pairs/seed<a>_seed<b>.npz (streamed statistics of each pair),
#                        neurons/maxima.npz (every ordered pair's maxima and null maxima)   (GPU)
#   neuron_universality  {RESULTS}/{arch}/tables/neuron_universality.csv, neuron_scores.csv,
#                        neuron_depth_tests.csv, figures/neuron_universality.png
#   head_neuron_layers   {RESULTS}/summary/tables/head_neuron_layers.csv, head_neuron_correlation.csv,
#                        summary/figures/head_neuron_layers.png
#
# Library: headstab.neurons, headstab.plots.neurons.

NEURONS = config["neurons"]
NEURON_ARCHITECTURES = [arch for arch in ARCHITECTURES if not SPECS[arch].attn_only]
NEURON_SEEDS = {arch: SEEDS[arch][: NEURONS["refits"]] for arch in NEURON_ARCHITECTURES}
NEURON_WEIGHTS = {arch: [LAYOUT.final_weights(arch, seed) for seed in seeds] for arch, seeds in NEURON_SEEDS.items()}
NEURON_MEM_MB = {
    arch: resources.neuron_statistics_mem_mb(
        SPECS[arch], len(seeds), NEURONS["scope"], COMPUTE["device"], NEURONS["pass_memory_gb"]
    )
    for arch, seeds in NEURON_SEEDS.items()
}
try:
    NEURON_HELDOUT = jobs.neuron_heldout_shards(config, {arch: SPECS[arch] for arch in NEURON_ARCHITECTURES}, LAYOUT)
except ValueError as error:
    raise WorkflowError(str(error)) from None

NEURON_TABLES = ("neuron_universality", "neuron_scores", "neuron_depth_tests")
NEURON_TARGETS = {
    arch: [LAYOUT.table_path(arch, name) for name in NEURON_TABLES] + [LAYOUT.figure_path(arch, "neuron_universality")]
    for arch in NEURON_ARCHITECTURES
}
HEAD_NEURON_TARGETS = (
    [
        LAYOUT.summary_table_path("head_neuron_layers"),
        LAYOUT.summary_table_path("head_neuron_correlation"),
        LAYOUT.summary_figure_path("head_neuron_layers"),
    ]
    if NEURON_ARCHITECTURES
    else []
)

add_outputs(NEURON_TARGETS, shared=HEAD_NEURON_TARGETS)


rule neuron_statistics:
    """blocks.{layer}.mlp.hook_post of the first neurons.refits refits on the first neurons.tokens held-out
    tokens (the newline and BOS/EOS/padding positions left out), every refit run once per batch; float64
    means, covariances and cross-covariances of every refit pair, then each ordered pair's maximum
    correlations and the null's maxima from them (neurons.null_draws random maps per layer, no second
    pass). Runs the models: a GPU where the run has one."""
    input:
        weights=lookup(dpath="{arch}", within=NEURON_WEIGHTS),
        audit=family_audit,
        heldout=lookup(dpath="{arch}", within=NEURON_HELDOUT),
        tokenizer=by_arch("train_inputs", "tokenizer"),
    output:
        statistics=directory(LAYOUT.neuron_statistics_dir("{arch}")),
        maxima=LAYOUT.neuron_maxima_path("{arch}"),
    log:
        LAYOUT.log("neuron_statistics", "{arch}"),
    benchmark:
        LAYOUT.benchmark("neuron_statistics", "{arch}")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=MODEL_GPUS,
        mem_mb=lookup(dpath="{arch}", within=NEURON_MEM_MB),
        runtime=240,
    params:
        spec=by_arch("refit_spec"),
        seeds=lookup(dpath="{arch}", within=NEURON_SEEDS),
        tokenizer_dir=by_arch("tokenizer_dir"),
        neurons=NEURONS,
        seed=STATISTICS["seed"],
        weight_processing=config["analysis"]["weight_processing"],
        device=COMPUTE["device"],
    script:
        "../scripts/neuron_statistics.py"


rule neuron_universality:
    """Per neuron, the maximum correlation averaged over partner refits, its null and the excess; per layer
    and scope, the universal share (above neurons.threshold) with a refit-resampled interval beside the null's
    share (the chance level); per scope, the test that the excess correlation dips at mid-depth, refits as
    units (one-sided sign flips of their jackknife pseudo-values)."""
    input:
        maxima=LAYOUT.neuron_maxima_path("{arch}"),
    output:
        table=LAYOUT.table_path("{arch}", "neuron_universality"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "neuron_universality")),
        scores=LAYOUT.table_path("{arch}", "neuron_scores"),
        scores_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "neuron_scores")),
        depth=LAYOUT.table_path("{arch}", "neuron_depth_tests"),
        depth_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "neuron_depth_tests")),
        figure=report(
            LAYOUT.figure_path("{arch}", "neuron_universality"),
            caption="../report/neuron_universality.rst",
            category="{arch}",
            subcategory="Beyond the paper: MLP neurons",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "neuron_universality")),
    log:
        LAYOUT.log("neuron_universality", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=20,
    params:
        neurons=NEURONS,
        statistics=STATISTICS,
        configuration=by_arch("configuration"),
    script:
        "../scripts/neuron_universality.py"


rule head_neuron_layers:
    """Head stability above its null per layer beside the universal-neuron share, every architecture with MLPs,
    by relative depth; Spearman's rho over the (architecture, layer) units with a layer-label permutation
    p-value (labels permuted within architecture) and Benjamini-Hochberg q-values over the table's rows."""
    input:
        chance=LAYOUT.summary_table_path("stability_against_chance"),
        shares=[LAYOUT.table_path(arch, "neuron_universality") for arch in NEURON_ARCHITECTURES],
    output:
        layers=LAYOUT.summary_table_path("head_neuron_layers"),
        layers_record=LAYOUT.table_record(LAYOUT.summary_table_path("head_neuron_layers")),
        correlation=LAYOUT.summary_table_path("head_neuron_correlation"),
        correlation_record=LAYOUT.table_record(LAYOUT.summary_table_path("head_neuron_correlation")),
        figure=report(
            LAYOUT.summary_figure_path("head_neuron_layers"),
            caption="../report/head_neuron_layers.rst",
            category="Across architectures",
            subcategory="Beyond the paper: MLP neurons",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.summary_figure_path("head_neuron_layers")),
    log:
        LAYOUT.log("head_neuron_layers", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        architectures=NEURON_ARCHITECTURES,
        promptset=PRIMARY,
        scope=NEURONS["scope"],
        statistics=STATISTICS,
    script:
        "../scripts/head_neuron_layers.py"
