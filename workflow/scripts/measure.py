from harness import config as hconfig
from harness.jobs import run_step
from harness.measure import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
w, p = sm.wildcards, sm.params
run_step(sm.log[0], lambda: step.measure(op=w.op, shape=w.shape, impls=list(p.impls), plan=dict(p.plan),
                                         group_dir=sm.output.record.rsplit("/", 1)[0], log=sm.log[0],
                                         settings=hconfig.operational(hconfig.validate(sm.config)),
                                         exclusive=sm.threads >= int(sm.resources.get("_cores", sm.threads)),
                                         threads=sm.threads))
