from harness.tables import step as tables_step
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], lambda: tables_step.shape_table(sm.params.cfg, list(sm.input.details), sm.input.span, sm.output.table))
