from harness.tables import step as tables_step
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
i = sm.input
run_step(sm.log[0], lambda: tables_step.all_tables(sm.params.cfg, list(i.details), list(i.spans), list(i.checks), i.ceilings, dict(sm.output.items()), list(i.metas), list(i.graphs)))
