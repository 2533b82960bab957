"""Rule check_prompts: every prompt set tokenized as the caches will tokenize it, checked against n_ctx.

Runs before the first `train` job of the architectures with this tokenizer and context, so that a
prompt longer than the context (BOS counted when cache.prepend_bos) fails in minutes, not at
cache_activations after all training. Writes a small record of what was checked.
"""

import logging

from headstab.activations.capture import check_known_words, check_prompt_lengths, tokenize_prompts
from headstab.fileio import sha256_file, write_json_atomic
from headstab.joblog import run_job
from headstab.prompts.loading import load_prompt_file
from headstab.refits.tokenizer import load_tokenizer

TOKENIZER, N_CTX = snakemake.wildcards.tokenizer, int(snakemake.wildcards.n_ctx)


def main():
    prepend_bos = snakemake.params.prepend_bos
    tokenizer = load_tokenizer(snakemake.params.tokenizer_dir)
    checked = {}
    for key, path in snakemake.params.prompt_sets.items():
        for name, prompts in load_prompt_file(key, path).items():
            check_known_words(tokenizer, prompts, name, path)
            token_lists = tokenize_prompts(tokenizer, prompts, prepend_bos)
            check_prompt_lengths(token_lists, N_CTX, name, path)
            checked[name] = {
                "prompt_file": str(path),
                "prompt_file_sha256": sha256_file(path),
                "n_prompts": len(token_lists),
                "max_tokens": max(len(ids) for ids in token_lists),
            }
            logging.info(
                "prompt set %s (%s): %d prompts, at most %d tokens <= n_ctx %d",
                name,
                path,
                len(token_lists),
                checked[name]["max_tokens"],
                N_CTX,
            )
    write_json_atomic(
        snakemake.output.record,
        {
            "tokenizer": TOKENIZER,
            "tokenizer_dir": str(snakemake.params.tokenizer_dir),
            "n_ctx": N_CTX,
            "prepend_bos": prepend_bos,
            "architectures": list(snakemake.params.architectures),
            "prompt_sets": checked,
        },
    )


run_job(
    main,
    "check_prompts",
    snakemake.log[0],
    label=f"tokenizer {TOKENIZER}, n_ctx {N_CTX}: architectures {', '.join(snakemake.params.architectures)}",
)
