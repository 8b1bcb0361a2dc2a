from harness.measure import step as measure_step
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], lambda: measure_step.ceilings(sm.params.cfg, sm.output.table))
