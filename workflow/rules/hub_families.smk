# Seeded families from the hub (README "Seeded families from the hub"; headstab.plan.hub_families,
# headstab.refits.hub_models). An architecture whose `source` is hub_family is not trained:
#
#   fetch_family -> {RESULTS}/{arch}/checkpoints/seed{seed}/final.pt, meta.json (+ config.json, tokenizer files)
#
# reads the seed's Hugging Face model from a local save_pretrained directory, or downloads it from the hub
# (id at revision; needs internet: `snakemake network_inputs`), checks its dimensions against the entry
# and its tokenizer against the configured one, and keeps its weights as they are. The analyses load it
# with TransformerBridge.boot_transformers (headstab.refits.models.load_trained_model); every rule downstream of
# final.pt runs unchanged. No step-0 baseline (common.smk: SOURCES[arch].trained) and no snapshots.

from headstab.plan.hub_families import HUB_FAMILY

FAMILY_ARCHITECTURES = [arch for arch in ARCHITECTURES if SOURCES[arch].kind == HUB_FAMILY]
FAMILIES = {
    arch: {
        "mem_mb": fetch_mem_mb(SPECS[arch]),
        "tokenizer": LAYOUT.tokenizer_target(SPECS[arch].tokenizer),
    }
    for arch in FAMILY_ARCHITECTURES
}


rule fetch_family:
    """One seed of a seeded family trained elsewhere (a Hugging Face causal LM from the hub or a local
    save_pretrained directory), kept as it is for the analyses of §4.1-4.9."""
    input:
        model=family_model_files,
        tokenizer=jobs.WildcardLookup(FAMILIES, "arch", "tokenizer"),
    output:
        weights=LAYOUT.final_weights("{arch}", "{seed}"),
        meta=LAYOUT.checkpoint_file("{arch}", "{seed}", "meta.json"),
    log:
        LAYOUT.log("fetch_family", "{arch}", "seed{seed}"),
    wildcard_constraints:
        arch=jobs.names_regex(FAMILY_ARCHITECTURES),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=jobs.WildcardLookup(FAMILIES, "arch", "mem_mb"),
        runtime=30,
    params:
        spec=by_arch("job_spec"),
        source=family_seed_source,
        tokenizer_dir=by_arch("tokenizer_dir"),
    script:
        "../scripts/fetch_family.py"
