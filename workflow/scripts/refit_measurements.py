"""Rule refit_measurements: everything measured from the weights of one architecture's refits ->
- tables/validation_perplexity.csv: seed, perplexity, n_tokens (paper §4.5, Table B.7);
- tables/ablation_perplexity.csv: seed, layer, head, ppl_ablated, ppl_baseline (anchor refit, §4.8);
- tables/qnorm.csv: seed, layer, matrix, frobenius_norm (§4.4.1, Table B.5);
- tables/activation_norms.csv: seed, layer, activation, mean_norm (attn_out, resid_mid; §4.5, Fig. 35).

One job per architecture so torch and transformer_lens (seconds to import) load once. Weight norms
and activation norms read final.pt and the caches only; the models run just for the held-out text
(not in any cache) and the head ablations.
"""

import logging

import numpy as np
import pandas as pd
import torch

from headstab.ablation import head_ablation_perplexities, perplexity, perplexity_from_loss, summed_token_loss
from headstab.analyses import activation_norms, attention_output_from_z, layer_weight_norms, output_weights
from headstab.caches import open_cache
from headstab.config import spec_from_dict
from headstab.data.shards import load_shards
from headstab.joblog import run_job
from headstab.models import load_trained_model, resolve_device


def heldout_windows(shards, n_tokens, seq_len):
    """The first `n_tokens` tokens of the concatenated shards as whole windows, [window, seq_len] int64.

    A tail shorter than seq_len is dropped; every refit of an architecture sees the same windows.
    """
    stream, remaining = [], n_tokens
    for shard in shards:
        if remaining <= 0:
            break
        stream.append(np.asarray(shard[:remaining], dtype=np.int64))
        remaining -= len(stream[-1])
    stream = np.concatenate(stream) if stream else np.zeros(0, np.int64)
    if len(stream) < n_tokens:
        logging.warning("held-out text has %d tokens, fewer than analysis.heldout_tokens=%d; using all of it",
                        len(stream), n_tokens)
    n_windows = len(stream) // seq_len
    if n_windows == 0:
        raise ValueError(f"held-out text has {len(stream)} tokens, less than one window of seq_len={seq_len}; "
                         "raise analysis.heldout_tokens or use a larger held-out corpus")
    return stream[: n_windows * seq_len].reshape(n_windows, seq_len)


def refit_activation_norms(cache, state, promptset, spec):
    """Mean per-token norms of one refit, one layer at a time (attention output rebuilt from hook_z and W_O)."""
    W_O, b_O = output_weights(state, spec.n_layers, spec.n_heads, spec.d_head)
    lengths = cache.lengths(promptset)
    frames = []
    for layer in range(cache.n_layers):
        head_out = cache.head_out(promptset, layer=layer)[None]  # [1, prompt, pos, head, d_head]
        attn_out = attention_output_from_z(head_out, W_O[layer : layer + 1], b_O[layer : layer + 1], lengths)
        norms = activation_norms(attn_out, cache.resid_mid(promptset, layer=layer)[None], lengths)
        frames.append(norms.assign(layer=layer))
    return pd.concat(frames, ignore_index=True)


def ablation_rows(model, cache, promptset, batch_size, seed):
    """Perplexity on the cached prompts' tokens, unablated and with each head zeroed (§4.8)."""
    tokens, lengths = cache.tokens(promptset), cache.lengths(promptset)
    order = np.argsort(lengths, kind="stable")  # similar lengths per batch: less padding, same sums
    tokens, lengths = tokens[order], lengths[order]
    baseline = perplexity(model, tokens, lengths, batch_size=batch_size)
    ablated = head_ablation_perplexities(model, tokens, lengths, batch_size=batch_size)
    logging.info("anchor seed %d: %s perplexity %.3f, ablated %.3f .. %.3f",
                 seed, promptset, baseline, ablated.min(), ablated.max())
    n_layers, n_heads = ablated.shape
    layer, head = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    return pd.DataFrame({"seed": seed, "layer": layer.ravel(), "head": head.ravel(),
                         "ppl_ablated": ablated.ravel(), "ppl_baseline": baseline})


def main():
    params, inp, out = snakemake.params, snakemake.input, snakemake.output
    spec = spec_from_dict(params.spec)
    device = resolve_device(params.device)
    torch.set_num_threads(snakemake.threads)

    windows = heldout_windows(load_shards(inp.heldout), params.heldout_tokens, spec.seq_len)
    if windows.max() >= spec.d_vocab:
        raise ValueError(f"held-out token id {windows.max()} is outside the model's vocabulary ({spec.d_vocab}); "
                         f"the held-out shards {list(inp.heldout)} use another tokenizer")
    window_lengths = np.full(len(windows), spec.seq_len)
    logging.info("validation: %d windows of %d tokens", len(windows), spec.seq_len)

    perplexities, weight_norms, act_norms = [], [], []
    for seed, weights, cache_path in zip(params.seeds, inp.weights, inp.caches, strict=True):
        # Checked against its meta.json's sha256; processed as the caches were (analysis.weight_processing).
        model = load_trained_model(spec, weights, device, weight_processing=params.weight_processing)
        state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
        weight_norms.append(layer_weight_norms(state, spec.n_layers, spec.n_heads, spec.d_head,
                                               params.attention_norm).assign(seed=seed))
        total, count = summed_token_loss(model, windows, window_lengths, batch_size=params.batch_size)
        perplexities.append((seed, perplexity_from_loss(total, count), count))
        logging.info("seed %d: validation perplexity %.3f over %d predicted tokens", seed, perplexities[-1][1], count)
        with open_cache(cache_path) as cache:
            act_norms.append(refit_activation_norms(cache, state, params.promptset, spec).assign(seed=seed))
            if seed == params.anchor_seed:
                ablation_rows(model, cache, params.promptset, params.batch_size, seed).to_csv(out.ablation, index=False)

    pd.DataFrame(perplexities, columns=["seed", "perplexity", "n_tokens"]).to_csv(out.perplexity, index=False)
    pd.concat(weight_norms, ignore_index=True)[["seed", "layer", "matrix", "frobenius_norm"]].to_csv(
        out.qnorm, index=False)
    pd.concat(act_norms, ignore_index=True)[["seed", "layer", "activation", "mean_norm"]].to_csv(
        out.activation_norms, index=False)


run_job(main, "refit_measurements", snakemake.log[0])
