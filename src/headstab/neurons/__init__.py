"""MLP neurons beside heads: streamed statistics of two refits' `blocks.{layer}.mlp.hook_post` activations
(`streamed`, saved by `statistics_files`), their capture from a model (`capture`), random maps of a layer's
neurons (`rotations`) and neuron universality with its rotation null (`universality`, per-layer shares in
`shares`)."""
