from harness.tables import step as tables_step
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
w, p = sm.wildcards, sm.params
run_step(sm.log[0], lambda: tables_step.kernel_time(sm.input.meta, p.range, p.iterations, w.op, w.shape, w.impl, sm.output.detail))
