"""Attention-pattern similarity between refits, streamed from the activation caches: every head pair
(`pairs`, paper Eq. 1-2) and same-layer similarity per prompt group with its null (`prompt_groups`)."""
