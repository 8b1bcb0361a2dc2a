from pathlib import Path

from harness.evidence import bundle
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], lambda: bundle.make_bundle(sm.params.ns, Path(sm.output.bundle)))
