from harness.jobs import run_step
from harness.report import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
ns_logs = sm.log[0].rsplit("/", 1)[0]
run_step(sm.log[0], lambda: step.provenance(sm.params.cfg, list(sm.input.records), f"{ns_logs}/commands.jsonl",
                                            sm.output.provenance))
