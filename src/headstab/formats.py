"""On-disk format identifiers, importable without numpy or h5py (the Snakefile reads them at parse time).

Bump a version when a file's layout changes: the `cache_activations` rule carries
CACHE_FORMAT_VERSION as a param, so Snakemake rebuilds caches written by older code, and the
reader rejects them with the rebuild command.
"""

CACHE_FORMAT = "headstab-activation-cache"
# Version 3 puts a fletcher32 checksum on every dataset and chunks attn_pattern; version 2 packed
# attn_pattern as lower triangles; version 1 stored padded, gzip-compressed squares.
CACHE_FORMAT_VERSION = 3
