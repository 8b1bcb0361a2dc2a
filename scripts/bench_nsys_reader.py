#!/usr/bin/env python3
"""Benchmark harness.tables.nsys on a large export built from the real fixture.

Builds an export of at least --kernels kernels (default 1,000,000) by replicating every kernel,
CUDA runtime and NVTX row of tests/fixtures/nsys/h200-torch-layer-norm.sqlite.gz, each copy shifted
later in time and given correlation ids of its own (so each kernel still joins to its own launch
call and each copy's kernels fall in that copy's `iters` range). Then times `kern_sum` and
`nvtx_kern_sum` on it (and, with --launches PREFIX, `range_launches` for that prefix), each in a
fresh process, and reports seconds and peak memory: the Python heap peak (tracemalloc) and the
process's peak resident set (resource.getrusage ru_maxrss, which includes SQLite's own page cache
and sorter memory). range_launches returns one dict per launch, so its Python heap grows with the
number of launches in the prefix ranges (a pipeline capture holds at most about 10^5), and
tracemalloc, which traces every allocation, makes its time here about three times its plain time.

  python scripts/bench_nsys_reader.py [--kernels N] [--launches PREFIX] [--out FILE.sqlite] [--keep]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "nsys" / "h200-torch-layer-norm.sqlite.gz"
REPLICATED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def build(out: Path, min_kernels: int) -> dict[str, int]:
    """Write the replicated export to `out`; returns row counts."""
    out.write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    conn = sqlite3.connect(out)
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    base = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    copies = math.ceil(min_kernels / base)
    lo, hi = conn.execute("""
        SELECT min(lo), max(hi) FROM (
            SELECT min(start) AS lo, max("end") AS hi FROM CUPTI_ACTIVITY_KIND_KERNEL
            UNION ALL SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_RUNTIME
            UNION ALL SELECT min(start), max("end") FROM NVTX_EVENTS)""").fetchone()
    shift = hi - lo + 1_000_000  # each copy starts 1 ms after the previous one ends
    corr = conn.execute("""
        SELECT max(m) + 1 FROM (SELECT max(correlationId) AS m FROM CUPTI_ACTIVITY_KIND_KERNEL
                                UNION ALL SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME)""").fetchone()[0]
    conn.execute(f"CREATE TEMP TABLE copies AS WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c "
                 f"WHERE i < {copies - 1}) SELECT i FROM c")
    for table in REPLICATED:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        conn.execute(f"CREATE TEMP TABLE base_{table} AS SELECT * FROM main.{table}")
        exprs = []
        for c in cols:
            if c in ("start", "end"):
                exprs.append(f'b."{c}" + c.i * {shift}')
            elif c in ("correlationId",):
                exprs.append(f'b."{c}" + c.i * {corr}')
            else:
                exprs.append(f'b."{c}"')
        col_list = ", ".join(f'"{c}"' for c in cols)
        conn.execute(f"INSERT INTO main.{table} ({col_list}) SELECT {', '.join(exprs)} "
                     f"FROM copies AS c, temp.base_{table} AS b ORDER BY c.i, b.rowid")
    conn.commit()
    counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in REPLICATED}
    conn.close()
    return counts


def measure(report: str, path: str, prefix: str | None = None) -> None:
    """Run one report in this (fresh) process and print its figures as JSON (for range_launches,
    only its first three rows)."""
    import resource
    import tracemalloc

    sys.path.insert(0, str(ROOT))
    from harness.tables import nsys

    baseline_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # after imports, before the report
    tracemalloc.start()
    t0 = time.perf_counter()
    rows = nsys.range_launches(path, prefix or "") if report == "range_launches" else getattr(nsys, report)(path)
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    maxrss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps({"report": report, "seconds": round(seconds, 2), "rows": len(rows),
                      "tracemalloc_peak_mib": round(peak / 2**20, 2),
                      "maxrss_mib": round(maxrss_kib / 1024, 1),
                      "maxrss_before_mib": round(baseline_kib / 1024, 1),
                      "result": rows[:3] if report == "range_launches" else rows}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=1_000_000, help="at least this many kernels")
    ap.add_argument("--out", type=Path, help="where to write the large export (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the large export")
    ap.add_argument("--launches", metavar="PREFIX", help="also time range_launches(PREFIX), e.g. iters")
    ap.add_argument("--measure", nargs="+", metavar=("REPORT", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        measure(*args.measure)
        return 0

    tmpdir = None
    if args.out is None:
        tmpdir = tempfile.mkdtemp(prefix="bench-nsys-")
        out = Path(tmpdir) / "large.sqlite"
    else:
        out = args.out
    try:
        t0 = time.perf_counter()
        counts = build(out, args.kernels)
        build_s = time.perf_counter() - t0
        size_mib = out.stat().st_size / 2**20
        print(f"built {out} in {build_s:.1f} s: {size_mib:.0f} MiB, "
              + ", ".join(f"{t} {n:,} rows" for t, n in counts.items()))
        runs = [["kern_sum"], ["nvtx_kern_sum"]] + ([["range_launches", args.launches]] if args.launches else [])
        for report, *extra in runs:
            proc = subprocess.run([sys.executable, __file__, "--measure", report, str(out), *extra],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return 1
            res = json.loads(proc.stdout)
            print(f"{report}: {res['seconds']:.2f} s, {res['rows']} rows, tracemalloc peak "
                  f"{res['tracemalloc_peak_mib']:.2f} MiB, maxrss {res['maxrss_mib']:.1f} MiB "
                  f"(process after imports: {res['maxrss_before_mib']:.1f} MiB)")
            for row in res["result"]:
                short = {k: (v[:48] + "..." if isinstance(v, str) and len(v) > 48 else v) for k, v in row.items()}
                print("   ", short)
    finally:
        if tmpdir and not args.keep:
            shutil.rmtree(tmpdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
