# headstab: attention-head stability across independently seeded refits
# (Bali, Stanley, Suresh & Bzdok 2026). See README.md.
#
#   snakemake -n                                   # plan the full paper (config/config.yaml)
#   snakemake --cores all --configfile config/demo.yaml   # the offline demo (make demo)
#   snakemake --profile slurm                      # the full paper on a Slurm cluster
#
# A --configfile on the command line replaces config/config.yaml entirely (no silent merge of the
# paper's 26 architectures into a small run); --config key=value still overrides single keys.

from snakemake.utils import min_version

min_version("9.0")


report: "workflow/report/workflow.rst"


if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/functions.smk"
include: "workflow/rules/published.smk"
include: "workflow/rules/hub_families.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/cache.smk"
include: "workflow/rules/snapshots.smk"
include: "workflow/rules/similarity.smk"
include: "workflow/rules/stability.smk"
include: "workflow/rules/weight_norms.smk"
include: "workflow/rules/prompt_length.smk"
include: "workflow/rules/optimizers.smk"
include: "workflow/rules/stability_gap.smk"
include: "workflow/rules/residual_cka.smk"
include: "workflow/rules/ablation.smk"
include: "workflow/rules/meta_sne.smk"
include: "workflow/rules/statistics.smk"
include: "workflow/rules/training_dynamics.smk"
include: "workflow/rules/training_curves.smk"
include: "workflow/rules/effective_rank.smk"
include: "workflow/rules/layer_robustness.smk"
include: "workflow/rules/seed_grid.smk"
include: "workflow/rules/head_types.smk"
include: "workflow/rules/noise_ceiling.smk"
include: "workflow/rules/neurons.smk"
include: "workflow/rules/targets.smk"
include: "workflow/rules/report.smk"


# Everything this configuration's run selects.
rule all:
    default_target: True
    input:
        ALL_TARGETS + REPORT_TARGETS,
