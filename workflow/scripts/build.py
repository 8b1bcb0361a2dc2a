from harness.build import step
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params
run_step(sm.log[0], lambda: step.build(sm.wildcards.op, list(p.impls), list(p.shapes), p.arch, dict(p.block),
                                       sm.output.census, dict(p.baselines)))
