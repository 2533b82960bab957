"""On-disk format identifiers, importable without numpy or h5py (the Snakefile reads them at parse time).

Bump a version when a file's layout changes: the rules that write the file carry its version as a
param (`cache_activations` and `cache_snapshot_activations` CACHE_FORMAT_VERSION, `pair_similarity`
SIMILARITY_FORMAT_VERSION, `prompt_group_similarity` and its snapshot variant GROUPED_FORMAT_VERSION),
so Snakemake rebuilds files written by older code, and the readers reject them with the rebuild command.
"""

# Every HDF5 file of the workflow stores a sha256 of each of its attributes in this attribute (JSON),
# checked on every read (headstab.activations.h5util.attribute_digest_mismatches).
ATTRS_DIGEST = "attrs_sha256"

CACHE_FORMAT = "headstab-activation-cache"
# 5: attrs_sha256 over every attribute; 4: datasets named after their TransformerLens hooks (hook_pattern,
# hook_z, hook_resid_mid, ...); 3: fletcher32 on every dataset; 2: patterns packed as lower triangles;
# 1: padded, compressed squares.
CACHE_FORMAT_VERSION = 5

SIMILARITY_FORMAT = "headstab-pair-similarity"
# 4: the optional null (`pair_similarity_null`, the same shape, and the prompt pairing `partners`); 3:
# attrs_sha256 over every attribute; 2: a fletcher32 checksum on `pair_similarity`.
SIMILARITY_FORMAT_VERSION = 4

GROUPED_FORMAT = "headstab-prompt-group-similarity"
# 4: the content variant's template leaves out the prompt and its null partner, and `content_share`
# [seed, layer, head] sits beside it; 3: head entropy (`entropy` [seed, layer, head]) and the optional content
# variant (content_observed, content_null) beside attrs_sha256; 2: attrs_sha256 over every attribute.
GROUPED_FORMAT_VERSION = 4
