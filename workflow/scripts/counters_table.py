from harness.jobs import run_step
from harness.tables import counters

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], lambda: counters.write_table(list(sm.input.parts), dict(sm.params.metrics), sm.output.table))
