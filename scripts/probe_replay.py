#!/usr/bin/env python3
"""Probe: why a short kernel's planted slowdown replays smaller than its kernel time.

    nsys profile --trace cuda,nvtx --cuda-graph-trace node --sample none --cpuctxsw none \\
        --export sqlite --force-overwrite true -o /tmp/probe python3 scripts/probe_replay.py --out DIR
    python3 scripts/probe_replay.py --read /tmp/probe.sqlite --out DIR

For each operation of the resolution config (workflow/configs/resolution.yaml over config.yaml, or
`--configfile`) at its one shape, our kernel and its variants (the A/A twin, the planted
slowdowns) are bound as the measurement group binds them (harness.ops.bind_group, one placement) and timed in interleaved rounds
(harness.measure.order.balanced) three ways, each slot in an NVTX range `<op>/<way>/<impl>`:

    eager   `--calls` calls launched one by one from Python, as the capture launches them
            (CUDA events around the slot: launch gaps included)
    b2b     a CUDA graph of `--calls` calls back to back (the pipeline's cross-check until now)
    gap     a CUDA graph of `--calls` x (an idle spin of `--spin` cycles on one thread, the call):
            a graph of the spins alone (`spin`) is replayed in the same rounds and subtracted
    idle    `--calls` calls, each started on an idle GPU with no launch path between its events
            (harness.measure.idle_start.Waiter, what the pipeline's idle starts use)

Per slot the CUDA-event time per call goes to events.csv; under nsys with graph nodes traced,
`--read` attributes every kernel to its range by its start and prints, per (op, way, impl), the
mean kernel duration and the mean idle time before each kernel, so it can be seen whether a
plant's extra time shrinks in a graph because its kernels run faster back to back or because the
next kernel starts sooner. Screening numbers for the measurement design, not evidence.
"""

from __future__ import annotations

import argparse
import csv
import sqlite3
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import config, ops  # noqa: E402
from harness.measure import graph_replay, idle_start  # noqa: E402
from harness.measure.order import balanced  # noqa: E402
from harness.ops import variants  # noqa: E402

def measure(args: argparse.Namespace) -> int:
    import torch

    cfg = config.validate(config.load(str(config.ROOT / "config.yaml"), str(config.ROOT / args.configfile)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    rows: list[dict[str, Any]] = []
    for op in args.ops or list(cfg["operations"]):
        params = cfg["operations"][op]
        shape = config.shapes(cfg, op)[0]
        names = [i for i in config.implementations(cfg, op) if variants.split(i)[0] == "cuda"]
        calls = ops.bind_group(op, names, shape, params, cfg["seed"], "hot", 1)
        for call in calls.values():
            for _ in range(10):
                call()
        torch.cuda.synchronize()

        def spin() -> None:
            torch.cuda._sleep(args.spin)

        b2b = {n: graph_replay.record(c, args.calls) for n, c in calls.items()}
        gap = {n: graph_replay.record(lambda c=c: (spin(), c()), args.calls) for n, c in calls.items()}
        gap["spin"] = graph_replay.record(spin, args.calls)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        idle = idle_start.Waiter(torch)

        def slot(way: str, name: str, run: Any, r: int) -> None:
            run()  # untimed, as the capture and the replay do
            torch.cuda.synchronize()
            push(f"{op}/{way}/{name}")
            start.record()
            run()
            end.record()
            end.synchronize()
            pop()
            rows.append({"op": op, "shape": shape, "way": way, "impl": name, "round": r,
                         "us_per_call": start.elapsed_time(end) * 1000.0 / args.calls})

        for r in range(args.rounds):
            for name in balanced(names, r):
                slot("eager", name, lambda c=calls[name]: [c() for _ in range(args.calls)], r)
            for name in balanced(names, r):
                slot("b2b", name, b2b[name].replay, r)
            for name in balanced([*names, "spin"], r):
                slot("gap", name, gap[name].replay, r)
            for name in balanced(names, r):
                calls[name]()
                torch.cuda.synchronize()
                push(f"{op}/idle/{name}")
                values = idle.times(calls[name], args.calls)
                pop()
                rows.append({"op": op, "shape": shape, "way": "idle", "impl": name, "round": r,
                             "us_per_call": statistics.fmean(values)})
        del b2b, gap, calls
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    with open(out / "events.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print_events(rows)
    return 0


def print_events(rows: list[dict[str, Any]]) -> None:
    """Median per call by (op, way, impl); the gap way less the spins; plant and twin over cuda."""
    med: dict[tuple[str, str, str], float] = {}
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for row in rows:
        groups[(row["op"], row["way"], row["impl"])].append(float(row["us_per_call"]))
    for key, values in groups.items():
        med[key] = statistics.median(values)
    print("events: op way impl us_per_call (gap: less the spins) ratio_to_cuda")
    for op in dict.fromkeys(k[0] for k in med):
        for way in ("eager", "b2b", "gap", "idle"):
            less = med.get((op, "gap", "spin"), 0.0) if way == "gap" else 0.0
            base = med[(op, way, "cuda")] - less
            for impl in [k[2] for k in med if k[:2] == (op, way) and k[2] != "spin"]:
                value = med[(op, way, impl)] - less
                print(f"  {op:22s} {way:5s} {impl:13s} {value:10.4f} {value / base:8.4f}")


def read(args: argparse.Namespace) -> int:
    """Kernel durations and the idle time before each kernel, by NVTX range (module docstring)."""
    con = sqlite3.connect(args.read)
    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    ranges = []
    for start, end, text, text_id in con.execute("SELECT start, end, text, textId FROM NVTX_EVENTS WHERE end IS NOT NULL"):
        name = text if text is not None else strings.get(text_id, "")
        if name.count("/") == 2:
            ranges.append((start, end, name))
    ranges.sort()
    kernels = sorted(con.execute("SELECT start, end, shortName, gridX FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    stats: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    previous_end = None
    i = 0
    for k_start, k_end, short, grid in kernels:
        name = strings.get(short, "")
        while i < len(ranges) and ranges[i][1] < k_start:
            i += 1
        inside = i < len(ranges) and ranges[i][0] <= k_start <= ranges[i][1]
        if inside and "spin" not in name and "sleep" not in name.lower():
            key = ranges[i][2]
            stats[key]["duration"].append((k_end - k_start) / 1000.0)
            if previous_end is not None:
                stats[key]["idle_before"].append((k_start - previous_end) / 1000.0)
            stats[key]["grid"].append(float(grid))
        previous_end = k_end
    rows = []
    for key in sorted(stats):
        op, way, impl = key.split("/")
        d, idle = stats[key]["duration"], stats[key]["idle_before"]
        rows.append({"op": op, "way": way, "impl": impl, "kernels": len(d),
                     "mean_us": statistics.fmean(d), "median_us": statistics.median(d),
                     "idle_before_us": statistics.median(idle) if idle else float("nan"),
                     "grid": int(statistics.median(stats[key]["grid"]))})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "kernels.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    base = {(r["op"], r["way"]): r["mean_us"] for r in rows if r["impl"] == "cuda"}
    print("nsys: op way impl kernels mean_us median_us idle_before_us grid mean/cuda")
    for r in rows:
        print(f"  {r['op']:22s} {r['way']:5s} {r['impl']:13s} {r['kernels']:6d} {r['mean_us']:9.4f} "
              f"{r['median_us']:9.4f} {r['idle_before_us']:8.3f} {r['grid']:6d} {r['mean_us'] / base[(r['op'], r['way'])]:8.4f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--ops", nargs="*", default=None)
    parser.add_argument("--configfile", default="workflow/configs/resolution.yaml",
                        help="merged over config.yaml; its CUDA implementations and variants are probed")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--spin", type=int, default=10000, help="cycles of the idle spin between calls (gap way)")
    parser.add_argument("--read", help="an nsys SQLite export of a probe run: print its kernels by range")
    args = parser.parse_args()
    return read(args) if args.read else measure(args)


if __name__ == "__main__":
    raise SystemExit(main())
