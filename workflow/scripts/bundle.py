from pathlib import Path

from harness.evidence import bundle
from harness.jobs import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)


def make() -> None:
    notes: list[str] = []  # what the scrub by value withheld or left out, one sentence a file
    bundle.make_bundle(sm.params.ns, Path(sm.output.bundle), notes=notes)
    for note in notes:
        print(f"note: {note}")


run_step(sm.log[0], make)
