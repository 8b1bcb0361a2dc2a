from harness.build import step as build_step
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], lambda: build_step.census_table(sm.params.cfg, list(sm.input.census), sm.output.table))
