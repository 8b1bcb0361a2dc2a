from harness import config as hconfig
from harness.jobs import run_step
from harness.measure import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params
run_step(sm.log[0], lambda: step.counters_session(groups=[dict(g) for g in p.groups], metrics=dict(p.metrics),
                                                  namespace=p.namespace, report=p.report, log=sm.log[0],
                                                  settings=hconfig.operational(hconfig.validate(sm.config))))
