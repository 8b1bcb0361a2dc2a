from harness import config as hconfig
from harness.jobs import run_step
from harness.measure import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params
run_step(sm.log[0], lambda: step.measure_session(groups=[dict(g) for g in p.groups], session_dir=p.session_dir,
                                                 log=sm.log[0],
                                                 settings=hconfig.operational(hconfig.validate(sm.config)),
                                                 exclusive=sm.threads >= int(sm.resources.get("_cores", sm.threads)),
                                                 threads=sm.threads))
