# The rest of the paper (§4.4-4.9, Appendix B): per architecture, per Adam/AdamW pair and across
# architectures. Every analysis reads the activation caches, the stability tables or the saved
# weights; one job per architecture (refit_measurements) runs the models, because only two analyses
# need them: the validation perplexity of every refit (held-out text is in no cache) and the head
# ablations of the anchor. It also reads the weight and activation norms, so torch loads once.
#
#   per architecture  {RESULTS}/{arch}/tables/*.csv, figures/*.png      (§4.4.1, §4.4.2, §4.7, §4.8)
#   per Adam/AdamW    {RESULTS}/compare/{arch}/...  ({arch} = the Adam member, its twin {arch}_wd; §4.5)
#   across all        {RESULTS}/summary/...                              (§4.6, §4.9, Table B.5)
#
# Paths and target lists: the "issue 4 targets" block of common.smk. Library: headstab.analyses,
# headstab.cka, headstab.ablation, headstab.meta_sne, headstab.plots.analyses.

rule refit_measurements:
    """Everything measured from the weights of an architecture's refits, in one job so torch and
    transformer_lens load once: validation perplexity of every refit on the first
    analysis.heldout_tokens tokens of held-out text in seq_len windows (paper §4.5, Table B.7); the
    anchor's perplexity on the primary prompts with each head's hook_z zeroed in turn (§4.8; the
    prompts' tokens come from its cache, nothing is re-tokenized); per-layer weight norms from final.pt
    (§4.4.1); mean per-token norms of the attention output (cached hook_z x W_O + b_O) and resid_mid,
    padding excluded (§4.5, Fig. 35). Small: a GPU only where the run has one."""
    input:
        weights=arch_weights,
        caches=arch_caches,
        heldout=heldout_shards,
    output:
        perplexity=table_path("{arch}", "validation_perplexity"),
        ablation=table_path("{arch}", "ablation_perplexity"),
        qnorm=table_path("{arch}", "qnorm"),
        activation_norms=table_path("{arch}", "activation_norms"),
    log:
        f"{RESULTS}/logs/refit_measurements/{{arch}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/refit_measurements/{{arch}}.tsv"
    params:
        spec=lambda wildcards: SPECS[wildcards.arch].to_dict(),
        seeds=lambda wildcards: seeds(wildcards.arch),
        anchor_seed=lambda wildcards: anchor_seed(wildcards.arch),
        promptset=PRIMARY,
        heldout_tokens=config["analysis"]["heldout_tokens"],
        batch_size=config["analysis"]["ablation_batch_size"],
        attention_norm=config["analysis"]["attention_norm"],
        weight_processing=config["analysis"]["weight_processing"],
        device=config["compute"]["device"],
    threads: 1
    resources:
        gpu=model_gpus,
        mem_mb=4000,
        runtime=60,
    conda:
        CONDA_ENV
    script:
        "../scripts/refit_measurements.py"


rule qnorm_correlation:
    """Weight norms vs layer stability (paper §4.4.1, Table B.5): Pearson correlation over layers between
    each refit's per-layer mean Frobenius norm of W_Q (and W_K, W_V, W_O, MLP W_in/W_out, LayerNorm
    gains) and that refit's layer-wise stability as anchor."""
    input:
        qnorm=table_path("{arch}", "qnorm"),
        layer_stability=table_path("{arch}", "layer_stability"),
    output:
        correlation=table_path("{arch}", "qnorm_correlation"),
        figure=report(
            figure_path("{arch}", "qnorm_vs_stability"),
            caption="../report/qnorm_vs_stability.rst",
            category="{arch}",
            subcategory="Weight norms (§4.4.1)",
        ),
    log:
        f"{RESULTS}/logs/qnorm_correlation/{{arch}}.log",
    params:
        configuration=lambda wildcards: architecture_summary(wildcards.arch),
        promptset=PRIMARY,
        attention_norm=config["analysis"]["attention_norm"],
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        CONDA_ENV
    script:
        "../scripts/qnorm_correlation.py"


rule prompt_length:
    """Layer-wise stability for every prompt length len5 ... len50 (paper §4.4.2, Fig. 5 / B.4),
    first seed as anchor."""
    input:
        layer_stability=table_path("{arch}", "layer_stability"),
    output:
        table=table_path("{arch}", "prompt_length"),
        figure=report(
            figure_path("{arch}", "prompt_length"),
            caption="../report/prompt_length.rst",
            category="{arch}",
            subcategory="Prompt length (§4.4.2)",
        ),
    log:
        f"{RESULTS}/logs/prompt_length/{{arch}}.log",
    params:
        configuration=lambda wildcards: architecture_summary(wildcards.arch),
        anchor_seed=lambda wildcards: anchor_seed(wildcards.arch),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        CONDA_ENV
    script:
        "../scripts/prompt_length.py"


rule residual_cka:
    """Residual-stream CKA between every pair of refits, per layer and prompt set (paper §4.7,
    Fig. 9 / B.8): real-token activations of the residual hook analysis.cka_hook names (default
    hook_resid_mid, the paper's text; the authors' code used hook_resid_pre; the caches store it, see
    cache_activations) of all prompts stacked; RBF kernel with bandwidth cka_threshold x median distance
    (Kornblith et al. 2019) or linear; optionally debiased."""
    input:
        caches=arch_caches,
        layer_stability=table_path("{arch}", "layer_stability"),
    output:
        table=table_path("{arch}", "residual_cka"),
        figure=report(
            figure_path("{arch}", "residual_stream"),
            caption="../report/residual_stream.rst",
            category="{arch}",
            subcategory="Residual stream (§4.7)",
        ),
    log:
        f"{RESULTS}/logs/residual_cka/{{arch}}.log",
    params:
        configuration=lambda wildcards: architecture_summary(wildcards.arch),
        seeds=lambda wildcards: seeds(wildcards.arch),
        promptsets=[PRIMARY],  # the paper's §4.7; add len{N} or the user's sets here, ~1 s each on the demo
        figure_promptset=PRIMARY,
        hook=config["analysis"]["cka_hook"],
        kernel=config["analysis"]["cka_kernel"],
        threshold=config["analysis"]["cka_threshold"],
        debiased=config["analysis"]["cka_debiased"],
        max_tokens=config["analysis"]["cka_max_tokens"],
        pairs=config["analysis"]["cka_pairs"],
    threads: 1
    resources:
        mem_mb=residual_cka_mem_mb,
        runtime=30,
    conda:
        CONDA_ENV
    script:
        "../scripts/residual_cka.py"


rule ablation:
    """Ablation importance vs head stability (paper §4.8, Fig. 10 / B.9): ΔPPL = ablated - baseline per
    head of the anchor refit, the per-layer Pearson correlation with head stability and its linear
    trend across layers."""
    input:
        ablation_perplexity=table_path("{arch}", "ablation_perplexity"),
        head_stability=table_path("{arch}", "head_stability"),
    output:
        table=table_path("{arch}", "ablation"),
        correlation=table_path("{arch}", "ablation_correlation"),
        figure=report(
            figure_path("{arch}", "ablation_correlation"),
            caption="../report/ablation_correlation.rst",
            category="{arch}",
            subcategory="Ablation (§4.8)",
        ),
    log:
        f"{RESULTS}/logs/ablation/{{arch}}.log",
    params:
        configuration=lambda wildcards: architecture_summary(wildcards.arch),
        promptset=PRIMARY,
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        CONDA_ENV
    script:
        "../scripts/ablation.py"


rule heldout_wikitext:
    """The paper's held-out text for validation perplexity (§4.5): wikitext-2-raw-v1 test through
    `datasets`, joined with blank lines and tokenized with `tokenizer` into one token shard. Used when
    analysis.heldout_corpus is null (the full paper); needs internet on the node that runs it."""
    input:
        tokenizer=lambda wildcards: tokenizer_target(wildcards.tokenizer),
    output:
        tokens=heldout_hub_shard("{tokenizer}"),
        record=heldout_hub_shard("{tokenizer}").replace(".npy", ".json"),
    log:
        f"{RESULTS}/logs/heldout_wikitext/{{tokenizer}}.log",
    params:
        dataset=HELDOUT_HUB,
        tokenizer_dir=lambda wildcards: tokenizer_dir(wildcards.tokenizer),
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    conda:
        CONDA_ENV
    script:
        "../scripts/heldout_wikitext.py"


# ---------------------------------------------------------------- per Adam/AdamW pair
rule optimizer_comparison:
    """Adam vs AdamW (paper §4.5): layer-wise stability side by side (Fig. 6 / B.6), attention-output
    and resid_mid norms (Fig. 35), and performance parity of the refits' validation perplexities with
    mean, spread and Welch's two-sided test (Table B.7)."""
    input:
        unpack(twin_inputs),
    output:
        perplexity=compare_table_path("{arch}", "perplexity"),
        optimizer_stability=report(
            compare_figure_path("{arch}", "optimizer_stability"),
            caption="../report/optimizer_stability.rst",
            category="Adam vs AdamW (§4.5)",
            subcategory="{arch}",
        ),
        activation_norms=report(
            compare_figure_path("{arch}", "activation_norms"),
            caption="../report/activation_norms.rst",
            category="Adam vs AdamW (§4.5)",
            subcategory="{arch}",
        ),
        perplexity_figure=report(
            compare_figure_path("{arch}", "perplexity"),
            caption="../report/perplexity.rst",
            category="Adam vs AdamW (§4.5)",
            subcategory="{arch}",
        ),
    log:
        f"{RESULTS}/logs/optimizer_comparison/{{arch}}.log",
    params:
        configuration=lambda wildcards: " | ".join(architecture_summary(a) for a in (wildcards.arch, f"{wildcards.arch}_wd")),
        adamw=lambda wildcards: f"{wildcards.arch}_wd",
        promptset=PRIMARY,
        heldout_label=config["analysis"]["heldout_corpus"] or "wikitext-2-raw-v1 test",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        CONDA_ENV
    script:
        "../scripts/optimizer_comparison.py"


# ---------------------------------------------------------------- across architectures
rule stability_gap:
    """Stability gap ΔS = S_lmax - S_lmin and relative depth r = l/L of the most and least stable layer,
    for every architecture and anchor (paper §4.6, Fig. 7-8)."""
    input:
        layer_stability=[table_path(arch, "layer_stability") for arch in ARCHITECTURES],
    output:
        table=summary_table_path("stability_gap"),
        stability_gap=report(
            summary_figure_path("stability_gap"),
            caption="../report/stability_gap.rst",
            category="Across architectures",
            subcategory="Stability gap (§4.6)",
        ),
        extreme_layer_depth=report(
            summary_figure_path("extreme_layer_depth"),
            caption="../report/extreme_layer_depth.rst",
            category="Across architectures",
            subcategory="Stability gap (§4.6)",
        ),
    log:
        f"{RESULTS}/logs/stability_gap/summary.log",
    params:
        configuration=f"{len(ARCHITECTURES)} architectures ({', '.join(ARCHITECTURES)}), results_dir {RESULTS}",
        architectures=architecture_facts(ARCHITECTURES),
        promptset=PRIMARY,
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        CONDA_ENV
    script:
        "../scripts/stability_gap.py"


rule qnorm_summary:
    """Table B.5 across architectures (paper §4.4.1): per architecture and weight matrix, the Pearson
    correlation of its norm with layer stability, mean and spread over anchors and the first seed's."""
    input:
        correlations=[table_path(arch, "qnorm_correlation") for arch in ARCHITECTURES],
    output:
        table=summary_table_path("qnorm_correlation"),
    log:
        f"{RESULTS}/logs/qnorm_summary/summary.log",
    params:
        architectures=architecture_facts(ARCHITECTURES),
        anchor_seeds={arch: anchor_seed(arch) for arch in ARCHITECTURES},
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        CONDA_ENV
    script:
        "../scripts/qnorm_summary.py"


rule meta_sne:
    """meta-SNE (paper §4.9, Fig. 11): every head of every refit of every architecture described by the
    Euclidean distances between primary prompts of its token-averaged output (hook_z); one t-SNE of
    all heads, coloured by relative depth, Adam and AdamW in separate panels."""
    input:
        caches=[cache_path(arch, seed) for arch in ARCHITECTURES for seed in seeds(arch)],
    output:
        table=summary_table_path("meta_sne"),
        figure=report(
            summary_figure_path("meta_sne"),
            caption="../report/meta_sne.rst",
            category="Across architectures",
            subcategory="meta-SNE (§4.9)",
        ),
    log:
        f"{RESULTS}/logs/meta_sne/summary.log",
    params:
        configuration=f"{len(ARCHITECTURES)} architectures ({', '.join(ARCHITECTURES)}), results_dir {RESULTS}",
        refits=[[arch, seed] for arch in ARCHITECTURES for seed in seeds(arch)],
        optimizers={arch: optimizer_label(arch) for arch in ARCHITECTURES},
        promptset=PRIMARY,
        perplexity=config["analysis"]["meta_sne_perplexity"],
        seed=config["analysis"]["meta_sne_seed"],
        embedding=config["analysis"]["meta_sne_embedding"],
    threads: 1
    resources:
        mem_mb=meta_sne_mem_mb,
        runtime=30,
    conda:
        CONDA_ENV
    script:
        "../scripts/meta_sne.py"


# The report's extra page (the resolved configuration); figures are marked with report(...) above.
include: "report.smk"
