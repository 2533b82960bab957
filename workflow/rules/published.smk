# The paper's published refits (README "Reproducing the paper from the published refits"; headstab.plan.sources,
# headstab.refits.published). An architecture whose `source` is published or published_local is not trained:
#
#   fetch_published -> {RESULTS}/{arch}/checkpoints/seed{seed}/final.pt, meta.json
#
# downloads the seed's TransformerLens 2 final.pt from the hub repository (repo_id at revision; needs
# internet: `snakemake network_inputs` fetches them all on a login node) or reads it from a local copy
# (path), and converts it into our checkpoint format, with meta.json recording the source, the original
# file's sha256, the conversion and the refit's identity. Every rule downstream of final.pt runs
# unchanged; nothing reads train_log.csv, which a published refit does not have.

from headstab.plan.sources import fetch_mem_mb

PUBLISHED_ARCHITECTURES = [arch for arch in ARCHITECTURES if SOURCES[arch].kind in ("published", "published_local")]
# Per architecture, the checkpoint files its targets list: a published refit (or a hub family's) has no train_log.csv.
CHECKPOINT_OUTPUTS = {
    arch: (
        LAYOUT.train_outputs(arch, SEEDS[arch])
        if SOURCES[arch].trained
        else [
            f"{LAYOUT.checkpoint_dir(arch, seed)}/{name}" for seed in SEEDS[arch] for name in ("final.pt", "meta.json")
        ]
    )
    for arch in ARCHITECTURES
}
PUBLISHED = {
    arch: {"source": SOURCES[arch].to_dict(), "mem_mb": fetch_mem_mb(SPECS[arch])} for arch in PUBLISHED_ARCHITECTURES
}

add_outputs(upstream=CHECKPOINT_OUTPUTS)


rule fetch_published:
    """One published refit (paper §3.1, trained by the authors): its TransformerLens 2 final.pt from the hub
    repository or a local copy, converted to our checkpoint format; loaded with weights_only=True only."""
    input:
        published_refit_file,
    output:
        weights=LAYOUT.final_weights("{arch}", "{seed}"),
        meta=LAYOUT.checkpoint_file("{arch}", "{seed}", "meta.json"),
    log:
        LAYOUT.log("fetch_published", "{arch}", "seed{seed}"),
    wildcard_constraints:
        arch=jobs.names_regex(PUBLISHED_ARCHITECTURES),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=jobs.WildcardLookup(PUBLISHED, "arch", "mem_mb"),
        runtime=30,
    params:
        spec=by_arch("job_spec"),
        source=jobs.WildcardLookup(PUBLISHED, "arch", "source"),
    script:
        "../scripts/fetch_published.py"
