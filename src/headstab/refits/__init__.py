"""Where a refit's weights come from: built and loaded models, the authors' published refits, seeded
families from the hub, tokenizers, and the TransformerLens 2 weight processing the authors applied on load."""
