from harness.report import step as report_step
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
ns_logs = sm.log[0].rsplit("/", 1)[0]
run_step(sm.log[0], lambda: report_step.provenance(sm.params.cfg, list(sm.input.captures), f"{ns_logs}/commands.txt", sm.output.provenance))
