from harness.jobs import run_step
from harness.report import provenance

sm = snakemake  # noqa: F821 (injected by Snakemake)
commands = sm.output.provenance.rsplit("/", 1)[0] + "/commands.jsonl"  # beside it, written by the workflow
run_step(sm.log[0], lambda: provenance.write(sm.params.cfg, list(sm.input.records), commands, sm.output.provenance))
