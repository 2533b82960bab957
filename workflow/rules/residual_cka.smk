# Paper §4.7, Fig. 9 / B.8: residual-stream CKA between refits.
#
#   residual_cka  {RESULTS}/{arch}/tables/residual_cka.csv, figures/residual_stream.png
#
# Library: headstab.sections.residual_cka (CKA itself: headstab.cka), headstab.plots.residual_cka.

from headstab.plan.resources import residual_cka_mem_mb

RESIDUAL_CKA_TARGETS = {
    arch: [
        LAYOUT.table_path(arch, "residual_cka"),
        LAYOUT.table_path(arch, "residual_cka_layers"),
        LAYOUT.figure_path(arch, "residual_stream"),
    ]
    for arch in ARCHITECTURES
}
RESIDUAL_CKA_MEM_MB = {
    arch: residual_cka_mem_mb(SPECS[arch], len(SEEDS[arch]), config["analysis"]["cka_max_tokens"])
    for arch in ARCHITECTURES
}
# The refits' step-0 caches, for init_cka, the chance level: when statistics.init_baseline and we trained them
# (our seed does not rebuild a fetched refit's initialisation).
RESIDUAL_CKA_INIT_CACHES = {
    arch: (
        [LAYOUT.snapshot_cache_path(arch, 0, seed) for seed in SEEDS[arch]]
        if STATISTICS["init_baseline"] and SOURCES[arch].trained
        else []
    )
    for arch in ARCHITECTURES
}

add_outputs(RESIDUAL_CKA_TARGETS)


rule residual_cka:
    """Residual-stream CKA between every pair of refits, per layer and prompt set (paper §4.7,
    Fig. 9 / B.8): real-token activations of the residual hook analysis.cka_hook names (default
    hook_resid_mid, the paper's text; the authors' code used hook_resid_pre; the caches store it, see
    cache_activations) of all prompts stacked; RBF kernel with bandwidth cka_threshold x median distance
    (Kornblith et al. 2019) or linear; optionally debiased. Beside it: the same CKA without the BOS rows
    (positions no_bos), and init_cka, the CKA of the same refits at step 0 (statistics.init_baseline), the chance
    level."""
    input:
        caches=by_arch("caches"),
        init_caches=jobs.WildcardLookup(RESIDUAL_CKA_INIT_CACHES, "arch"),  # step 0: init_cka
        layer_stability=LAYOUT.table_path("{arch}", "layer_stability"),
    output:
        table=LAYOUT.table_path("{arch}", "residual_cka"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "residual_cka")),
        layers=LAYOUT.table_path("{arch}", "residual_cka_layers"),
        layers_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "residual_cka_layers")),
        figure=report(
            LAYOUT.figure_path("{arch}", "residual_stream"),
            caption="../report/residual_stream.rst",
            category="{arch}",
            subcategory="Residual stream (§4.7)",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "residual_stream")),
    log:
        LAYOUT.log("residual_cka", "{arch}"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=lookup(dpath="{arch}", within=RESIDUAL_CKA_MEM_MB),
        runtime=60,  # four CKA tables: trained and step 0, with and without the BOS rows
    params:
        configuration=by_arch("configuration"),
        seeds=by_arch("seeds"),
        promptsets=CKA_PROMPT_SETS,  # the paper's §4.7 (common.smk)
        figure_promptset=PRIMARY,
        hook=config["analysis"]["cka_hook"],
        kernel=config["analysis"]["cka_kernel"],
        threshold=config["analysis"]["cka_threshold"],
        debiased=config["analysis"]["cka_debiased"],
        max_tokens=config["analysis"]["cka_max_tokens"],
        pairs=config["analysis"]["cka_pairs"],
        statistics=STATISTICS,  # the per-layer mean's interval, refits resampled
    script:
        "../scripts/residual_cka.py"
