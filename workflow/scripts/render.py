from harness.report import step as report_step
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
o = sm.output
run_step(sm.log[0], lambda: report_step.render(sm.params.cfg, dict(sm.input.items()), o.field_note, o.issue_comment, list(o.figures)))
