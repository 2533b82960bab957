# Beyond the paper (docs/beyond_the_paper.md): initialisation seed vs data-order seed. An architecture with
# `seed_grid: {init_seeds, data_seeds}` has one refit per pair, {RESULTS}/{arch}/checkpoints/seed{init}-{data}/,
# trained (train_seed_grid: rule train, blocks of training.seeds_per_job refits, init seed for the weights, data
# seed for the window order; publish_refit) and cached (rule cache_activations) like any refit; no paper section
# runs on it (common.smk: ARCHITECTURES).
#
#   seed_grid  {RESULTS}/{arch}/tables/seed_grid_pairs.csv, seed_grid.csv, figures/seed_grid.png
#
# Library: headstab.plan.seed_design, headstab.sections.seed_grid, headstab.plots.seed_grid (docs/beyond_the_paper.md).

SEED_GRID_TARGETS = {
    arch: ARCH[arch]["weights"]
    + ARCH[arch]["caches"]
    + [LAYOUT.table_path(arch, name) for name in ("seed_grid_pairs", "seed_grid")]
    + [LAYOUT.figure_path(arch, "seed_grid")]
    for arch in SEED_GRID_ARCHITECTURES
}


use rule train as train_seed_grid with:
    wildcard_constraints:
        arch=jobs.names_regex(SEED_GRID_ARCHITECTURES),


# A grid whose settings equal a selected paper architecture's, its paper twin (PAPER_TWINS, common.smk), reuses
# that one's refit s as its s-s: same init seed, data seed and settings, so the same bits; only the off-diagonal refits train.
PAPER_TWIN_DIAGONAL = jobs.paper_twin_diagonal(SPECS, PAPER_TWINS)

add_outputs(seed_grid=[path for arch in SEED_GRID_ARCHITECTURES for path in SEED_GRID_TARGETS[arch]])


ruleorder: reuse_paper_refit > publish_refit


rule reuse_paper_refit:
    """The grid's refit s-s as a copy of its paper twin's refit s, meta.json saying so."""
    input:
        weights=paper_refit("final.pt"),
        train_log=paper_refit("train_log.csv"),
        meta=paper_refit("meta.json"),
    output:
        weights=LAYOUT.final_weights("{arch}", "{seed}"),
        train_log=LAYOUT.checkpoint_file("{arch}", "{seed}", "train_log.csv"),
        meta=LAYOUT.checkpoint_file("{arch}", "{seed}", "meta.json"),
    log:
        LAYOUT.log("reuse_paper_refit", "{arch}", "seed{seed}"),
    wildcard_constraints:
        arch=jobs.names_regex(PAPER_TWINS),
        seed=jobs.names_regex(PAPER_TWIN_DIAGONAL),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        twin=paper_twin,
    script:
        "../scripts/reuse_paper_refit.py"


rule seed_grid:
    """Per layer, pair stability (same-layer best matches on the primary prompts) of the refit pairs that share
    the init seed, the data seed or neither, and the fraction of head instability due to initialisation, data
    order and both, refits resampled."""
    input:
        caches=by_arch("caches"),
    output:
        pairs=LAYOUT.table_path("{arch}", "seed_grid_pairs"),
        pairs_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "seed_grid_pairs")),
        table=LAYOUT.table_path("{arch}", "seed_grid"),
        table_record=LAYOUT.table_record(LAYOUT.table_path("{arch}", "seed_grid")),
        figure=report(
            LAYOUT.figure_path("{arch}", "seed_grid"),
            caption="../report/seed_grid.rst",
            category="{arch}",
            subcategory="Beyond the paper: init vs data-order seed",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.figure_path("{arch}", "seed_grid")),
    log:
        LAYOUT.log("seed_grid", "{arch}"),
    wildcard_constraints:
        arch=jobs.names_regex(SEED_GRID_ARCHITECTURES),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=by_arch("similarity_mem_mb"),
        runtime=by_arch("similarity_runtime"),
    params:
        seeds=by_arch("seeds"),
        configuration=by_arch("configuration"),
        promptset=PRIMARY,
        prompt_chunk=config["similarity"]["prompt_chunk"],
        statistics=STATISTICS,
    script:
        "../scripts/seed_grid.py"
