from harness import steps
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], lambda: steps.counters_table(sm.params.cfg, list(sm.input.parts), sm.output.table))
