"""Rule neuron_statistics: the first neurons.refits refits' final.pt + held-out shards -> neurons/pairs/seed<a>_seed<b>.npz
(streamed statistics of every refit pair, headstab.neurons.statistics_files) and neurons/maxima.npz (every
ordered pair's maximum correlations and null maxima, headstab.neurons.universality; docs/beyond_the_paper.md)."""

import logging
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from headstab.data.shards import load_shards
from headstab.evaluation import check_heldout_vocabulary, heldout_windows
from headstab.fileio import atomic_path
from headstab.joblog import run_job
from headstab.neurons.capture import neuron_pair_passes, newline_token_ids, special_token_ids, stream_all_pairs
from headstab.neurons.shares import stack_pairs
from headstab.neurons.statistics_files import save_pair_statistics
from headstab.neurons.streamed import accumulator_bytes
from headstab.neurons.universality import pair_universality
from headstab.plan.spec import spec_from_dict
from headstab.refits.models import load_trained_model, resolve_device
from headstab.refits.tokenizer import load_tokenizer


def main():
    params, inp, out = snakemake.params, snakemake.input, snakemake.output
    spec, neurons = spec_from_dict(params.spec), params.neurons
    torch.set_num_threads(snakemake.threads)
    windows = heldout_windows(load_shards(inp.heldout), neurons["tokens"], spec.seq_len, "neurons.tokens")
    check_heldout_vocabulary(windows, spec.d_vocab, list(inp.heldout))
    tokenizer = load_tokenizer(params.tokenizer_dir)
    newline = newline_token_ids(tokenizer) if neurons["skip_newline"] else []
    special = special_token_ids(tokenizer) if neurons["skip_special"] else []
    skip = sorted(set(newline + special))
    expected = int((~np.isin(windows, skip)).sum())
    logging.info(
        "neurons: %d windows of %d tokens, %d streamed (newline ids %s, BOS/EOS/padding ids %s left out)",
        *windows.shape,
        expected,
        newline,
        special,
    )
    device = resolve_device(params.device)
    labels = [str(seed) for seed in params.seeds]
    models = {
        label: load_trained_model(spec, path, device, weight_processing=params.weight_processing)
        for label, path in zip(labels, inp.weights, strict=True)
    }
    budget = neurons["pass_memory_gb"]
    pair_bytes = accumulator_bytes(spec.n_layers, spec.d_mlp, neurons["scope"])
    Path(out.statistics).mkdir(parents=True, exist_ok=True)
    found = {}
    for pairs in neuron_pair_passes(labels, pair_bytes, None if budget is None else int(budget * 1e9)):
        logging.info("neurons: one pass over the tokens for the pairs %s (%.3g GB each)", pairs, pair_bytes / 1e9)
        batches = (
            windows[start : start + neurons["batch_size"]] for start in range(0, len(windows), neurons["batch_size"])
        )
        total = -(-len(windows) // neurons["batch_size"])
        progress = tqdm(batches, total=total, unit="batch", mininterval=10)
        for (a, b), statistics in stream_all_pairs(models, progress, neurons["scope"], device, skip, pairs).items():
            path = Path(out.statistics) / f"seed{a}_seed{b}.npz"
            if statistics.n_tokens != expected:
                raise ValueError(f"{path}: {statistics.n_tokens} tokens streamed, {expected} expected from the windows")
            save_pair_statistics(statistics, path)
            found |= pair_universality(statistics, neurons["null_draws"], params.seed, neurons["null"])
            del statistics
    arrays = {
        f"{kind}_{scope}": stack_pairs({pair: values[f"{kind}_{scope}"] for pair, values in found.items()}, labels)
        for kind in ("max", "null")
        for scope in ("same_layer", "cross_layer")
        if f"{kind}_{scope}" in next(iter(found.values()))
    }
    with atomic_path(out.maxima) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, refits=np.array(labels), n_tokens=np.array(expected), **arrays)


run_job(main, "neuron_statistics", snakemake.log[0])
