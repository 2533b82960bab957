# Paper §4.9, Fig. 11: meta-SNE of every head of every refit of every architecture.
#
#   meta_sne  {RESULTS}/summary/tables/meta_sne.csv, summary/figures/meta_sne.png; the same with scale-normalised
#             descriptions (meta_sne_scale_normalised), and meta_sne_mantel.csv (description distance vs |Δ depth|,
#             each refit's layers permuted as blocks; refits of 3 or more layers)
#
# Library: headstab.sections.meta_sne, headstab.plots.meta_sne.

from headstab.plan.resources import meta_sne_mem_mb

META_SNE_REFITS = [[arch, seed] for arch in ARCHITECTURES for seed in SEEDS[arch]]
META_SNE_CACHES = [LAYOUT.cache_path(arch, seed) for arch, seed in META_SNE_REFITS]
META_SNE_TARGETS = (
    [LAYOUT.summary_table_path(name) for name in ("meta_sne", "meta_sne_scale_normalised", "meta_sne_mantel")]
    + [LAYOUT.summary_figure_path(name) for name in ("meta_sne", "meta_sne_scale_normalised")]
    if ARCHITECTURES
    else []
)
# Every head's description, the primary set assumed to hold at most 200 prompts.
META_SNE_MEM_MB = meta_sne_mem_mb(
    sum(len(SEEDS[a]) * SPECS[a].n_layers * SPECS[a].n_heads for a in ARCHITECTURES),
    200,
    config["analysis"]["meta_sne_mantel_max_heads"],
)

add_outputs(shared=META_SNE_TARGETS)


rule meta_sne:
    """meta-SNE (paper §4.9, Fig. 11): every head of every refit of every architecture described by the
    Euclidean distances between primary prompts of its token-averaged output (hook_z); one t-SNE of
    all heads, coloured by relative depth, Adam and AdamW in separate panels. Optimizer and
    attention-only come from each architecture's spec. Controls for "clustered by depth" being "clustered by
    output norm": the same map of the descriptions divided by their norms, and a Mantel test of description
    distance against ``|Δ relative depth|``, each architecture's layers permuted as whole blocks in one order shared by its refits (refits of 3 or more
    layers; docs/statistics.md)."""
    input:
        caches=META_SNE_CACHES,
    output:
        table=LAYOUT.summary_table_path("meta_sne"),
        table_record=LAYOUT.table_record(LAYOUT.summary_table_path("meta_sne")),
        figure=report(
            LAYOUT.summary_figure_path("meta_sne"),
            caption="../report/meta_sne.rst",
            category="Across architectures",
            subcategory="meta-SNE (§4.9)",
        ),
        figure_record=LAYOUT.figure_record(LAYOUT.summary_figure_path("meta_sne")),
        normalised_table=LAYOUT.summary_table_path("meta_sne_scale_normalised"),
        normalised_table_record=LAYOUT.table_record(LAYOUT.summary_table_path("meta_sne_scale_normalised")),
        normalised_figure=report(
            LAYOUT.summary_figure_path("meta_sne_scale_normalised"),
            caption="../report/meta_sne_scale_normalised.rst",
            category="Across architectures",
            subcategory="meta-SNE (§4.9)",
        ),
        normalised_figure_record=LAYOUT.figure_record(LAYOUT.summary_figure_path("meta_sne_scale_normalised")),
        mantel=LAYOUT.summary_table_path("meta_sne_mantel"),
        mantel_record=LAYOUT.table_record(LAYOUT.summary_table_path("meta_sne_mantel")),
    log:
        LAYOUT.log("meta_sne", "summary"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=META_SNE_MEM_MB,
        runtime=60,  # two t-SNEs and the Mantel test's permutations
    params:
        configuration=RUN_SUMMARY,
        refits=META_SNE_REFITS,
        architectures=ARCHITECTURE_FACTS,
        promptset=PRIMARY,
        perplexity=config["analysis"]["meta_sne_perplexity"],
        embedding=config["analysis"]["meta_sne_embedding"],
        mantel_max_heads=config["analysis"]["meta_sne_mantel_max_heads"],
        permutations=STATISTICS["permutations"],
        seed=STATISTICS["seed"],
    script:
        "../scripts/meta_sne.py"
