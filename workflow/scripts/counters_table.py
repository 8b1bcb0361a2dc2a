from harness.jobs import run_step
from harness.tables import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], lambda: step.counters_table(list(sm.input.parts), dict(sm.params.metrics), sm.output.table))
