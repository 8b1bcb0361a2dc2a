"""How long the census of the default configuration takes on a fresh namespace, with the build
cache cold and then warm (harness.build.cache), and the quick configuration's after it, on this
machine (no GPU needed):

    python3 scripts/bench_build_cache.py

It copies the repository's files (tracked, and untracked but not ignored) into a temporary
folder, points the build cache at an empty folder there, runs `snakemake --cores 1 census` twice
(namespaces bench-cold and bench-warm), then with the quick configuration
(workflow/configs/defaults-only.yaml, namespace bench-quick: other shapes, the same instances for
its default ones), and prints each run's wall time and how many census rows came from the cache."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-build-cache-") as work:
        copy = Path(work) / "repo"
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode()
        for rel in filter(None, listed.split("\0")):
            if rel.startswith(("artifacts/", "report/h200", "docs/evidence/")):
                continue
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            (copy / rel).write_bytes((ROOT / rel).read_bytes())
        env = {**os.environ, "PYTHONPATH": str(copy), "EVIDENCE_BUILD_CACHE": str(Path(work) / "cache")}
        for ns, extra in (("bench-cold", []), ("bench-warm", []),
                          ("bench-quick", ["--configfile", "workflow/configs/defaults-only.yaml"])):
            start = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "census", *extra, "--config",
                                   f"namespace={ns}"], cwd=copy, env=env, capture_output=True, text=True)
            wall = time.monotonic() - start
            if proc.returncode != 0:
                sys.stderr.write(proc.stderr[-3000:])
                return proc.returncode
            with open(copy / "artifacts" / ns / "tables" / "census.csv", newline="") as fh:
                rows = list(csv.DictReader(fh))
            cached = sum(r["build"].startswith("cache") for r in rows)
            print(f"{ns}: snakemake --cores 1 census {' '.join(extra)}: {wall:.1f} s, {len(rows)} census rows, "
                  f"{cached} from the build cache")
    return 0


if __name__ == "__main__":
    sys.exit(main())
