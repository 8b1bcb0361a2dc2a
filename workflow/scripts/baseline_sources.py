from pathlib import Path

from harness import baseline
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], lambda: baseline.extract(sm.params.commit, Path(sm.output.commit).parent, list(sm.params.ops)))
