# The HTML report (`snakemake --report {RESULTS}/report.html`): every figure is marked with report(...)
# in its own rule, with a caption under workflow/report/; the front page is workflow/report/workflow.rst
# (the `report:` directive in the Snakefile). This file adds the run's resolved configuration, so a
# reader of the report sees every setting (schema defaults filled in) that produced its figures.


rule report_configuration:
    """The resolved configuration of this run (schema defaults filled in), shown in the report."""
    output:
        report(
            LAYOUT.report_configuration_path(),
            caption="../report/configuration.rst",
            category="Configuration",
        ),
    log:
        f"{RESULTS}/logs/report_configuration/summary.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    params:
        config=config,
    script:
        "../scripts/report_configuration.py"
