from harness.jobs import run_step
from harness.tables import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params
run_step(sm.log[0], lambda: step.shape_table(list(sm.input.group), sm.output.table, namespace=p.namespace,
                                             cache_mode=p.cache_mode, margin=p.margin))
