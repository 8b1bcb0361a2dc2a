from harness.build import step as build_step
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], lambda: build_step.build(sm.wildcards.op, sm.wildcards.impl, sm.params.shapes, sm.params.arch, sm.output.census, sm.params.external, sm.params.op_cfg))
