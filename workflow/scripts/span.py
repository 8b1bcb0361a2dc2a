from harness.measure import step as measure_step
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
w, o = sm.wildcards, sm.output
run_step(sm.log[0], lambda: measure_step.span(sm.params.cfg, w.op, w.shape, list(sm.params.impls), o.samples, o.summary, o.graph, list(sm.input.checks)))
