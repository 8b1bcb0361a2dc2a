#!/usr/bin/env python3
"""Probe: is a ratio between two implementations a property of each kernel, or of one call of a
kernel following another call of the same kernel? Graph replay of each implementation's calls back
to back (as the capture and the cross-check run them) and spaced, each call followed by a GPU spin
of `--spin` clock cycles (torch.cuda._sleep: no memory traffic); the spaced time per call is the
spaced replay's less a replay of the spins alone.

    python3 scripts/probe_spacing.py --op layernorm --shape 4096x768 --impls cuda triton \\
        --calls 50 --rounds 15 --spin 4000 --out spacing.csv

The implementations are bound together on one input set (scripts/probe_ncu.py's warm_group:
harness.ops.bind_group, hot cache) and checked against the float64 reference first
(harness.measure.check.run_check); each round replays every graph in turn (order rotating), once
untimed and once between CUDA events (harness.measure.graph_replay.replay_rounds). It prints, per
implementation, the median time per call back to back and spaced, and each one's ratio to the first
implementation. Screening numbers for a kernel notebook, not evidence.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_ncu import group_arguments, group_config, warm_group  # noqa: E402

SPIN = "spin"
"""The key of the spins-alone replays."""


def summarize(back_to_back: Mapping[str, Sequence[float]], spaced: Mapping[str, Sequence[float]]) -> list[dict[str, float | str]]:
    """Per implementation (in `back_to_back`'s order, the spins aside): the median µs a call back to
    back, the median µs a call spaced less the median µs a spin alone, and each over the first
    implementation's."""
    spin = statistics.median(spaced[SPIN])
    rows: list[dict[str, float | str]] = []
    for impl in [i for i in back_to_back if i != SPIN]:
        rows.append({"impl": impl, "back_to_back_us": statistics.median(back_to_back[impl]),
                     "spaced_us": statistics.median(spaced[impl]) - spin, "spin_us": spin})
    first = rows[0]
    for r in rows:
        r["back_to_back_ratio"] = float(r["back_to_back_us"]) / float(first["back_to_back_us"])
        r["spaced_ratio"] = float(r["spaced_us"]) / float(first["spaced_us"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group_arguments(parser)
    parser.add_argument("--calls", type=int, default=50, help="calls in one replay")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--spin", type=int, default=4000, help="clock cycles of the spin after each spaced call")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import torch

    from harness.measure import graph_replay
    from harness.measure.check import run_check

    cfg = group_config(args)
    for impl in args.impls:
        record = run_check(args.op, args.shape, impl, cfg["operations"][args.op], cfg["seed"])
        if not record["passed"]:
            print(f"probe_spacing: {impl} failed its check: {record.get('reason', record)}", file=sys.stderr)
            return 2
    bound = warm_group(args, cfg)

    def spaced(call: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            call()
            torch.cuda._sleep(args.spin)
        return run

    plain = {impl: [graph_replay.record(bound[impl], args.calls)] for impl in args.impls}
    gaps = {impl: [graph_replay.record(spaced(bound[impl]), args.calls)] for impl in args.impls}
    gaps[SPIN] = [graph_replay.record(lambda: torch.cuda._sleep(args.spin), args.calls)]
    back = graph_replay.replay_rounds(plain, args.calls, args.rounds)
    apart = graph_replay.replay_rounds(gaps, args.calls, args.rounds)
    rows = summarize(back, apart)
    for r in rows:
        print(f"{args.op} {args.shape} {r['impl']:24s} back to back {float(r['back_to_back_us']):8.3f} us "
              f"({float(r['back_to_back_ratio']):.3f})   spaced {float(r['spaced_us']):8.3f} us "
              f"({float(r['spaced_ratio']):.3f})   spin alone {float(r['spin_us']):.3f} us")
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["op", "shape", *rows[0]])
        writer.writeheader()
        writer.writerows({"op": args.op, "shape": args.shape, **r} for r in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
