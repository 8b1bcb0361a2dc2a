from harness import steps
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], lambda: steps.trust(sm.params.cfg, sm.output.controls, sm.output.drift))
