from harness import config as hconfig
from harness.jobs import run_step
from harness.measure import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
w, p, o = sm.wildcards, sm.params, sm.output
run_step(sm.log[0], lambda: step.counters(op=w.op, shape=w.shape, impls=list(p.impls), plan=dict(p.plan),
                                          metrics=dict(p.metrics), namespace=p.namespace, record_json=sm.input.record,
                                          raw_out=o.raw, table_out=o.table, log=sm.log[0],
                                          settings=hconfig.operational(hconfig.validate(sm.config))))
