"""On-disk format identifiers, importable without numpy or h5py (the Snakefile reads them at parse time).

Bump a version when a file's layout changes: the `cache_activations` rule carries
CACHE_FORMAT_VERSION as a param, so Snakemake rebuilds caches written by older code, and the
reader rejects them with the rebuild command.
"""

CACHE_FORMAT = "headstab-activation-cache"
# 4: datasets named after their TransformerLens hooks (hook_pattern, hook_z, hook_resid_mid, ...);
# 3: fletcher32 on every dataset; 2: patterns packed as lower triangles; 1: padded, compressed squares.
CACHE_FORMAT_VERSION = 4
