from harness.jobs import run_step
from harness.report import step as report_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
o = sm.output
outputs = {"field_note": o.field_note, "issue_comment": o.issue_comment, "html": o.html, "overview": o.overview,
           "summary": o.summary, "figures": list(o.figures)}
run_step(sm.log[0], lambda: report_step.render(sm.params.cfg, dict(sm.input.items()), outputs))
