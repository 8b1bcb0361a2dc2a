#!/usr/bin/env python3
"""How long the trust step takes over the committed namespaces, on this machine (no GPU needed).

    python3 scripts/bench_trust.py [NAMESPACE ...] [--repeat 3]

The trust job reads every namespace retained before the run's own (its kernel time, census, NVML
record and provenance) for the control bands and the drift bound, so its time grows with the
history. This copies artifacts/ into a temporary folder, runs the step's own call
(harness.tables.trust.trust_tables, with the configuration's control and margin) for each
namespace named (default: the newest full run and resolution run committed), each in a fresh
process so no read is shared between them, and prints the seconds of each and how many
namespaces were retained before it."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.tables import trust  # noqa: E402

DEFAULT = ("h200-ops-10", "h200-resolution-12")

ONE = """
import sys
from pathlib import Path
from harness.tables import trust
art, ns = Path(sys.argv[1]), sys.argv[2]
trust.trust_tables(art, ns, art / ns / "tables" / "controls.csv", art / ns / "tables" / "drift.csv", "triton", 0.01, None)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("namespaces", nargs="*", default=list(DEFAULT))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-trust-") as work:
        art = Path(work) / "artifacts"
        shutil.copytree(ROOT / "artifacts", art)
        for ns in args.namespaces:
            if not (art / ns / "tables" / "kernel_time.csv").is_file():
                print(f"bench_trust: {ns} is not a committed namespace with tables.", file=sys.stderr)
                return 2
            before = len(trust.earlier_namespaces(art, ns))
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                subprocess.run([sys.executable, "-c", ONE, str(art), ns], cwd=ROOT, check=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
                times.append(time.perf_counter() - t)
            print(f"{ns}: trust step {min(times):.2f} s (best of {args.repeat}, process start and imports included), "
                  f"{before} namespaces retained before it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
