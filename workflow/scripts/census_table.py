from harness.build import step
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], lambda: step.census_table(sm.params.namespace, list(sm.input.census), sm.output.table))
