"""Rules cache_activations and cache_snapshot_activations: each refit of a block, its final.pt (or snapshot) + the prompt
sets -> caches/blocks/{block}/seed{seed}.h5, one after the other, then the block's record (paper §3.2)."""

import logging

import torch

from headstab.activations.writer import CacheOptions, cache_activations
from headstab.fileio import sha256_file, write_json_atomic
from headstab.joblog import run_job
from headstab.plan.seed_design import refit_name
from headstab.plan.spec import spec_from_dict
from headstab.prompts.loading import load_prompt_file
from headstab.provenance.records import environment_record, package_versions
from headstab.refits.models import load_trained_model, resolve_device
from headstab.refits.tokenizer import load_tokenizer, tokenizer_identity


def main():
    device = resolve_device(snakemake.params.device)
    torch.set_num_threads(snakemake.threads)

    prompt_sets, prompt_files = {}, {}
    for key, path in snakemake.params.prompt_sets.items():
        digest = sha256_file(path)
        for name, prompts in load_prompt_file(key, path).items():
            prompt_sets[name] = prompts
            prompt_files[name] = {"prompt_file": str(path), "prompt_file_sha256": digest}

    tokenizer = load_tokenizer(snakemake.params.tokenizer_dir)
    refits = list(zip(snakemake.params.refits, snakemake.input.weights, snakemake.params.caches, strict=True))
    for index, (refit, weights, path) in enumerate(refits):
        logging.info("refit %s (%d of %d in block %s)", refit, index + 1, len(refits), snakemake.wildcards.block)
        cache_refit(refit_name(str(refit)), weights, path, tokenizer, prompt_sets, prompt_files, device)
    write_json_atomic(
        snakemake.output.record,
        {"refits": [str(refit) for refit in snakemake.params.refits], "caches": snakemake.params.caches},
    )


def cache_refit(seed, weights, path, tokenizer, prompt_sets, prompt_files, device):
    """One refit's cache at `path` (seed: an int, or "init-data" of a seed grid)."""
    spec = spec_from_dict({**snakemake.params.spec, "seeds": [seed]})
    options = snakemake.params.cache
    model = load_trained_model(
        spec,
        weights,
        device=device,
        tokenizer=tokenizer,
        weight_processing=snakemake.params.weight_processing,
    )
    cache_options = CacheOptions(
        batch_size=options["batch_size"],
        dtype=options["dtype"],
        compression_level=options["compression_level"],  # hook_z, residual hooks
        pattern_compression_level=options.get("pattern_compression_level"),  # hook_pattern (cache_options)
        extra_resid_hooks=options.get("extra_resid_hooks", ()),  # from analysis.cka_hook (cache_options)
        patterns_only=options.get("patterns_only", False),  # rule cache_snapshot_activations, step > 0
        residual_only=options.get("residual_only", False),  # rule cache_snapshot_activations, step 0
        activation_sets=options.get("activation_sets"),  # hook_z, residual hooks: these sets only (cache_options)
    )
    cache_activations(
        path,
        model,
        tokenizer,
        prompt_sets,
        options=cache_options,
        prepend_bos=options["prepend_bos"],
        prompt_files=prompt_files,
        attrs={
            "architecture": snakemake.wildcards.arch,
            "seed": seed,
            "spec": spec.to_dict(),
            "checkpoint": str(weights),
            "checkpoint_sha256": sha256_file(weights),
            "weight_processing": list(snakemake.params.weight_processing),
            "prompt_file_sha256": {key: sha256_file(path) for key, path in snakemake.params.prompt_sets.items()},
            "tokenizer": snakemake.params.tokenizer,
            "tokenizer_identity": tokenizer_identity(snakemake.params.tokenizer_dir),
            "environment": environment_record(str(device)),
            "packages": package_versions(),
        },
    )


# snakemake.rule: this script also runs rule cache_snapshot_activations.
step = f" step {snakemake.wildcards.step}" if "step" in snakemake.wildcards.keys() else ""
run_job(main, snakemake.rule, snakemake.log[0], label=f"{snakemake.wildcards.arch}{step} {snakemake.wildcards.block}")
