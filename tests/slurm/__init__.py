"""Real-Slurm test harness: a throwaway single-node cluster and helpers to run Snakemake on it."""
