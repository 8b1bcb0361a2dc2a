from harness.jobs import run_step
from harness.tables import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params
run_step(sm.log[0], lambda: step.targets_table(namespace=p.namespace, targets=list(p.targets),
                                               operations=dict(p.operations), sweep=sm.input.sweep,
                                               kernel_time=sm.input.kernel_time, span=sm.input.span,
                                               controls=sm.input.controls, out=sm.output.targets))
