from harness.jobs import run_step
from harness.tables import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params
run_step(sm.log[0], lambda: step.controls_and_drift(namespace=p.namespace, control=p.control, margin=p.margin,
                                                    earlier=p.earlier, controls_out=sm.output.controls,
                                                    drift_out=sm.output.drift))
