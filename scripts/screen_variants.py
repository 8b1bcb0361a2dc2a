#!/usr/bin/env python3
"""Screen an operation's variants in one process before spending a pipeline run on them.

For each sweep shape of each named operation, every implementation (cuda, triton, torch and the
listed variants) is checked against the float64 reference (harness.measure.check.run_check: a variant that
fails is not timed) and then timed by CUDA graph replay (harness.measure.graph_replay.measure: the config's
`cross_check.calls` calls in one graph, replayed between CUDA events), in `--rounds` rounds whose
order of implementations rotates. It prints one line per (shape, implementation) with the median of
the rounds' medians and the ratio to cuda and to triton, and writes them as CSV.

These are screening numbers: graph-replay time, hot cache (or the config's cache mode), one
process, no nsys. They choose which variants a run measures; the evidence is the pipeline's own
tables (`snakemake --cores 1 report`), never this output.

    python scripts/screen_variants.py --ops matmul --variants matmul.bk16 matmul.tile128x64 --out screen.csv
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import config, ops  # noqa: E402
from harness.measure import graph_replay  # noqa: E402
from harness.measure.check import run_check  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(config.ROOT / "config.yaml"))
    parser.add_argument("--ops", nargs="+", required=True)
    parser.add_argument("--variants", nargs="*", default=[], help="'op.variant' names from the config")
    parser.add_argument("--shapes", nargs="*", default=None, help="only these shapes (default: every sweep shape)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import torch

    # The listed variants replace the config's, validated like any config (an unknown name is refused).
    cfg = config.validate({**config.load(args.config), "variants": args.variants})
    rows = []
    for op in args.ops:
        params = cfg["operations"][op]
        impls = [i for i in config.implementations(cfg, op) if i != "external"]
        for shape in [s for s in config.shapes(cfg, op) if args.shapes is None or s in args.shapes]:
            calls, medians = {}, {i: [] for i in impls}
            for impl in impls:
                record = run_check(op, shape, impl, params, cfg["seed"])
                if record["passed"]:
                    calls[impl] = ops.bind(op, impl, shape, params, cfg["seed"], cfg["cache_mode"])
                    for _ in range(cfg["capture"]["warmup"]):
                        calls[impl]()
                else:
                    print(f"{op} {shape} {impl}: check FAILED, not timed: {record.get('reason', record)}")
            torch.cuda.synchronize()
            timed = [i for i in impls if i in calls]
            for r in range(args.rounds):
                for impl in timed[r % len(timed):] + timed[:r % len(timed)]:
                    row = graph_replay.measure(op, shape, impl, calls[impl], cfg["cross_check"]["calls"],
                                               cfg["cross_check"]["replays"], cfg["cross_check"]["max_seconds"])
                    if row["status"] == "ok":
                        medians[impl].append(row["graph_median_us"])
            best = {i: statistics.median(m) for i, m in medians.items() if m}
            for impl in impls:
                us = best.get(impl)
                ratio = {b: (us / best[b] if us and best.get(b) else None) for b in ("cuda", "triton")}
                rows.append({"op": op, "shape": shape, "impl": impl, "graph_us": us,
                             "rounds": len(medians[impl]), "spread_us": (max(medians[impl]) - min(medians[impl]))
                             if medians[impl] else None, "of_cuda": ratio["cuda"], "of_triton": ratio["triton"]})
                fmt = (lambda v: f"{v:.3f}" if v is not None else "-")
                print(f"{op:10s} {shape:18s} {impl:24s} {fmt(us):>10s} us  /cuda {fmt(ratio['cuda'])}  "
                      f"/triton {fmt(ratio['triton'])}", flush=True)
    with open(args.out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    from harness.errors import EvidenceError

    try:
        sys.exit(main())
    except EvidenceError as exc:  # a bad config or variant name: one sentence, no traceback
        print(exc, file=sys.stderr)
        sys.exit(2)
