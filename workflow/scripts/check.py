from harness.measure import step as measure_step
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
w = sm.wildcards
run_step(sm.log[0], lambda: measure_step.check(sm.params.cfg, w.op, w.shape, w.impl, sm.output.check))
