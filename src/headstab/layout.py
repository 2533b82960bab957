"""Facts about the workflow's rules that the Snakemake profiles share, importable without numpy.

slurm/config.yaml imports GPU_RULES (YTE `__definitions__`) to send exactly these rules to
HEADSTAB_GPU_PARTITION with the GPU constraint and model; tests/test_workflow_plan.py checks that
they are exactly the rules whose `resources:` declare `gpu` (workflow/rules/*.smk). A new rule that
runs a model declares `gpu=model_gpus` and is added here.
"""

# The rules that run a model: training, the activation caches, and the per-refit measurements
# (weight norms, perplexity, ablations) of paper_analyses.smk.
GPU_RULES = ("train", "cache_activations", "refit_measurements")
