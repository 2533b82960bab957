"""What Snakemake plans from the config, at parse time: validation, architecture specs, where refits
come from, output paths, job params and resources. No torch, no h5py (tests/plan/test_parse_time.py)."""
