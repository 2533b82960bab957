"""Rules cache_activations and cache_snapshot_activations: one refit's final.pt + the prompt sets -> caches/seed{seed}.h5
(paper §3.2)."""

import torch

from headstab.activations.writer import CacheOptions, cache_activations
from headstab.fileio import sha256_file
from headstab.joblog import run_job
from headstab.plan.seed_design import refit_name
from headstab.plan.spec import spec_from_dict
from headstab.prompts.loading import load_prompt_file
from headstab.provenance.records import environment_record, package_versions
from headstab.refits.models import load_trained_model, resolve_device
from headstab.refits.tokenizer import load_tokenizer, tokenizer_identity


def main():
    arch, seed = snakemake.wildcards.arch, refit_name(snakemake.wildcards.seed)  # int, or "init-data" of a seed grid
    spec = spec_from_dict({**snakemake.params.spec, "seeds": [seed]})
    options = snakemake.params.cache
    device = resolve_device(snakemake.params.device)
    torch.set_num_threads(snakemake.threads)

    prompt_sets, prompt_files = {}, {}
    for key, path in snakemake.params.prompt_sets.items():
        digest = sha256_file(path)
        for name, prompts in load_prompt_file(key, path).items():
            prompt_sets[name] = prompts
            prompt_files[name] = {"prompt_file": str(path), "prompt_file_sha256": digest}

    tokenizer = load_tokenizer(snakemake.params.tokenizer_dir)
    model = load_trained_model(
        spec,
        snakemake.input.weights,
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
        patterns_only=options.get("patterns_only", False),  # rule cache_snapshot_activations
        activation_sets=options.get("activation_sets"),  # hook_z, residual hooks: these sets only (cache_options)
    )
    cache_activations(
        snakemake.output[0],
        model,
        tokenizer,
        prompt_sets,
        options=cache_options,
        prepend_bos=options["prepend_bos"],
        prompt_files=prompt_files,
        attrs={
            "architecture": arch,
            "seed": seed,
            "spec": spec.to_dict(),
            "checkpoint": str(snakemake.input.weights),
            "checkpoint_sha256": sha256_file(snakemake.input.weights),
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
run_job(
    main, snakemake.rule, snakemake.log[0], label=f"{snakemake.wildcards.arch}{step} seed {snakemake.wildcards.seed}"
)
