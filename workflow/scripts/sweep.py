from harness.jobs import run_step
from harness.tables import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params
run_step(sm.log[0], lambda: step.sweep(list(sm.input.groups), dict(sm.output.items()), namespace=p.namespace,
                                       cache_mode=p.cache_mode, descriptions=dict(p.descriptions), margin=p.margin,
                                       between_runs=p.between_runs))
