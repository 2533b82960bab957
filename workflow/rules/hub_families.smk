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
#
# Before any of that, the family's provenance audit (headstab.refits.audit; docs/refits.md "Audit"):
#
#   digest_revision -> {RESULTS}/{arch}/audit/seed{seed}/revisions/{revision}.digest.json  (audit.revisions; hub: internet)
#   digest_refit    -> {RESULTS}/{arch}/audit/seed{seed}/final.digest.json                 (of final.pt)
#   audit_family    -> {RESULTS}/{arch}/audit/audit.json, written only when the audit passes
#
# Every rule that reads a family's weights has the audit record as an input (functions.smk: family_audit), so
# nothing of a family is analysed before its audit passes.

import re

from headstab.plan.family_audit import audit_peers
from headstab.plan.hub_families import HUB_FAMILY, audit_files

FAMILY_ARCHITECTURES = [arch for arch in ARCHITECTURES if SOURCES[arch].kind == HUB_FAMILY]
FAMILIES = {
    arch: {
        "mem_mb": fetch_mem_mb(SPECS[arch]),
        "tokenizer": LAYOUT.tokenizer_target(SPECS[arch].tokenizer),
    }
    for arch in FAMILY_ARCHITECTURES
}
# A family's audit reads its own digests and those of its peers (the families of the same dimensions).
AUDIT_FILES = {arch: audit_files(LAYOUT, arch, SOURCES[arch]) for arch in FAMILY_ARCHITECTURES}
AUDIT_PEERS = audit_peers({arch: SPECS[arch] for arch in FAMILY_ARCHITECTURES}, FAMILY_ARCHITECTURES)
AUDIT_INPUTS = {
    arch: {
        "digests": [path for _, _, path in AUDIT_FILES[arch]],
        "peer_digests": [path for peer in AUDIT_PEERS[arch] for _, _, path in AUDIT_FILES[peer]],
    }
    for arch in FAMILY_ARCHITECTURES
}
AUDITS = {
    arch: {
        "settings": SOURCES[arch].audit.to_dict(),
        "checkpoints": {arch: AUDIT_FILES[arch], **{peer: AUDIT_FILES[peer] for peer in AUDIT_PEERS[arch]}},
    }
    for arch in FAMILY_ARCHITECTURES
}
AUDIT_REVISIONS = sorted({r for arch in FAMILY_ARCHITECTURES for r in SOURCES[arch].audit.revisions}, key=len)

add_outputs(upstream={arch: [LAYOUT.audit_record(arch)] for arch in FAMILY_ARCHITECTURES})


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


rule digest_revision:
    """The weights digest of one audited revision of a family's seed (audit.revisions: its step 0 and first
    step), read from the hub (downloaded beside the output, deleted once digested) or a local directory."""
    input:
        model=family_revision_files,
    output:
        digest=LAYOUT.revision_digest("{arch}", "{seed}", "{revision}"),
    log:
        LAYOUT.log("digest_revision", "{arch}", "seed{seed}", "{revision}"),
    wildcard_constraints:
        arch=jobs.names_regex(FAMILY_ARCHITECTURES),
        revision="|".join(map(re.escape, reversed(AUDIT_REVISIONS))) or "(?!x)x",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=jobs.WildcardLookup(FAMILIES, "arch", "mem_mb"),
        runtime=30,
    params:
        spec=by_arch("job_spec"),
        source=family_seed_source,
    script:
        "../scripts/digest_revision.py"


rule digest_refit:
    """The weights digest of a fetched family refit's final.pt (its analysed revision)."""
    input:
        weights=LAYOUT.final_weights("{arch}", "{seed}"),
        meta=LAYOUT.checkpoint_file("{arch}", "{seed}", "meta.json"),
    output:
        digest=LAYOUT.refit_digest("{arch}", "{seed}"),
    log:
        LAYOUT.log("digest_refit", "{arch}", "seed{seed}"),
    wildcard_constraints:
        arch=jobs.names_regex(FAMILY_ARCHITECTURES),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=jobs.WildcardLookup(FAMILIES, "arch", "mem_mb"),
        runtime=30,
    script:
        "../scripts/digest_refit.py"


rule audit_family:
    """The provenance audit of a family: sha256 of every audited checkpoint, duplicates (also against its
    peers), the step-0 distances between seeds against the declared axis, the descent ratio of every seed.
    Writes the record only when it passes; otherwise fails naming the checkpoints and the numbers."""
    input:
        unpack(lookup(dpath="{arch}", within=AUDIT_INPUTS)),
    output:
        record=LAYOUT.audit_record("{arch}"),
    log:
        LAYOUT.log("audit_family", "{arch}"),
    wildcard_constraints:
        arch=jobs.names_regex(FAMILY_ARCHITECTURES),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        settings=lookup(dpath="{arch}/settings", within=AUDITS),
        checkpoints=lookup(dpath="{arch}/checkpoints", within=AUDITS),
    script:
        "../scripts/audit_family.py"
