"""MLP neurons beside heads: streamed statistics of two refits' `blocks.{layer}.mlp.hook_post` activations
(`streamed`, saved by `statistics_files`), their capture from a model (`capture`), random maps of a layer's
neurons (`rotations`) and neuron universality with its rotation null (`universality`), which need torch; and
the universal shares across refits (`shares`), which do not, so an analysis job reads them without torch."""
