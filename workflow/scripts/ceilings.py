from harness import config as hconfig
from harness.jobs import run_step
from harness.measure import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], lambda: step.ceilings(out=sm.output.table, same_size=list(sm.params.same_size),
                                          cache_mode=sm.params.cache_mode,
                                          settings=hconfig.operational(hconfig.validate(sm.config))))
