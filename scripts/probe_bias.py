#!/usr/bin/env python3
"""Probe: where an A/A pair's difference comes from, and how large each planted slowdown is.

    python3 scripts/probe_bias.py --out DIR [--ops OP ...] [--blocks 5] [--rounds 30] [--tag T]

For each operation of the resolution config (workflow/configs/resolution.yaml, merged over
config.yaml) at its one shape, in one process and without nsys, the implementations the
resolution run measures (cuda, triton, the twin cuda.twin and the plant cuda.planted) are bound
as the group bound them before it shared its buffers (harness.ops.bind: each on inputs of its own)
and measured in blocks of `--rounds` rounds, the way
the group's capture makes them (per round, per implementation: one untimed call, then its calls
of the round; harness.measure.group), under these designs:

    rotation          the group's order rotated by one per round (the capture until now)
    rotation-swapped  the same, twin and cuda exchanged in the order
    rotation-shared   the same, the twin launched on cuda's own input and output buffers
    rotation-noplant  the same, without the planted slowdown
    balanced          the Williams orders (harness.measure.order.balanced)
    random            a fresh random order per round (seeded), to estimate carryover
    fresh-balanced    balanced, every block on freshly allocated buffers behind a random pad

Each slot is timed by CUDA events around its calls (GPU time of back-to-back launches: the
launch gaps are in it, so it is not the capture's kernel time). Per block it writes the ratios
twin/cuda, planted/cuda and cuda/triton (sums over the rounds) with the group's paired bootstrap
interval; every slot goes to slots.csv (design, block, round, position, impl, predecessor, µs).

Plants: the plant's size by CUDA graph replay (harness.measure.graph_replay.replay_times, 20
calls a graph, 30 replays) at several growth fractions, against cuda's, three times in turn.

Screening numbers for the measurement design, not evidence: the pipeline's tables are.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import config, ops  # noqa: E402
from harness.measure import graph_replay  # noqa: E402
from harness.measure.group import calls_per_round  # noqa: E402
from harness.measure.order import balanced, rotation  # noqa: E402
from harness.tables import stats  # noqa: E402

DESIGNS = ("rotation", "rotation-swapped", "rotation-shared", "rotation-noplant", "balanced", "random",
           "fresh-balanced")
FRACTIONS = {
    "layernorm": (0.01, 0.015, 0.02, 0.025),
    "matmul": (16 / 1024, 20 / 1024, 24 / 1024, 28 / 1024, 32 / 1024),
    "softmax": (0.025, 0.05, 0.075, 0.1, 0.15),
    "neighbor_aggregation": (0.015, 0.02, 0.025, 0.03, 0.04),
    "transpose": (64 / 4096, 96 / 4096, 102 / 4096, 128 / 4096),
}


def order_of(design: str, names: list[str], r: int, rng: random.Random) -> list[str]:
    if design == "random":
        out = list(names)
        rng.shuffle(out)
        return out
    if design.endswith("balanced"):
        return balanced(names, r)
    return rotation(names, r)


def block(torch: Any, calls: dict[str, Any], names: list[str], design: str, rounds: int, k: int,
          rng: random.Random) -> list[dict[str, Any]]:
    """One block: `rounds` rounds of the design; a row per slot."""
    rows: list[dict[str, Any]] = []
    torch.cuda.synchronize()
    for r in range(rounds):
        order = order_of(design, names, r, rng)
        events = []
        for impl in order:
            call = calls[impl]
            call()  # untimed, as in the capture
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(k):
                call()
            e.record()
            events.append((impl, s, e))
        torch.cuda.synchronize()
        for pos, (impl, s, e) in enumerate(events):
            rows.append({"round": r, "position": pos, "impl": impl, "before": order[pos - 1] if pos else "",
                         "us": s.elapsed_time(e) * 1000.0 / k})
    return rows


def ratios(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    per: dict[str, list[float]] = {}
    for row in sorted(rows, key=lambda x: x["round"]):
        per.setdefault(row["impl"], []).append(row["us"])
    out: dict[str, Any] = {}
    for a, b in (("twin", "cuda"), ("planted", "cuda"), ("cuda", "triton")):
        if a in per and b in per:
            r, lo, hi = stats.ratio_interval(per[a], per[b], paired=True, seed=stats.seed_of(key, a, b))
            out[f"{a}/{b}"] = [round(r, 5), round(lo, 5), round(hi, 5), stats.verdict(lo, hi)]
    return out


def bind_all(op: str, shape: str, impls: dict[str, str], params: dict[str, Any], seed: int, mode: str,
             torch: Any, pad: int = 0) -> dict[str, Any]:
    keep = torch.empty(pad, dtype=torch.uint8, device="cuda") if pad else None
    calls: dict[str, Any] = {name: ops.bind(op, impl, shape, params, seed, mode) for name, impl in impls.items()}
    calls["_pad"] = keep
    return calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--ops", nargs="*", default=None)
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--tag", default="p1")
    parser.add_argument("--designs", nargs="*", default=list(DESIGNS))
    parser.add_argument("--no-plants", action="store_true")
    args = parser.parse_args()
    import torch

    cfg = config.validate(config.load(str(config.ROOT / "config.yaml"),
                                      str(config.ROOT / "workflow/configs/resolution.yaml")))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    slots_path, summary_path = out / f"slots-{args.tag}.csv", out / f"bias-{args.tag}.jsonl"
    rng = random.Random(12345)
    cap = cfg["capture"]
    with open(slots_path, "w", newline="") as fh, open(summary_path, "w") as summary:
        writer = csv.DictWriter(fh, ["design", "op", "shape", "block", "round", "position", "impl", "before", "us"])
        writer.writeheader()
        for op in args.ops or list(cfg["operations"]):
            params = dict(cfg["operations"][op])
            shape = config.shapes(cfg, op)[0]
            impls = {"cuda": "cuda", "triton": "triton", "twin": "cuda.twin", "planted": "cuda.planted"}
            t0 = time.perf_counter()
            calls = bind_all(op, shape, impls, params, cfg["seed"], cfg["cache_mode"], torch)
            for name in impls:
                for _ in range(int(cap["warmup"])):
                    calls[name]()
            torch.cuda.synchronize()
            per_call = {}
            for name in impls:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(10):
                    calls[name]()
                e.record()
                e.synchronize()
                per_call[name] = s.elapsed_time(e) * 100.0
            k = calls_per_round(max(per_call.values()), float(cap["round_us"]), int(cap["max_calls"]))
            cuda_sets = calls["cuda"].sets
            shared = ops.launcher(ops.get(op), "cuda", params, shape)(cuda_sets[0][0], cuda_sets[0][1], params)
            print(json.dumps({"op": op, "shape": shape, "k": k, "per_call_us": per_call,
                              "bind_s": round(time.perf_counter() - t0, 2)}), flush=True)
            for design in args.designs:
                names = list(impls)
                use = calls
                if design == "rotation-swapped":
                    names = ["twin", "triton", "cuda", "planted"]
                elif design == "rotation-shared":
                    use = {**calls, "twin": shared}
                elif design == "rotation-noplant":
                    names = ["cuda", "triton", "twin"]
                for b in range(args.blocks):
                    if design == "fresh-balanced":
                        use = bind_all(op, shape, impls, params, cfg["seed"], cfg["cache_mode"], torch,
                                       pad=rng.randrange(1, 64) * 2**21 + rng.randrange(0, 2**21, 512))
                        for name in impls:
                            for _ in range(3):
                                use[name]()
                    rows = block(torch, use, names, design, args.rounds, k, rng)
                    for row in rows:
                        writer.writerow({"design": design, "op": op, "shape": shape, "block": b, **row,
                                         "us": round(row["us"], 4)})
                    line = {"design": design, "op": op, "block": b, **ratios(rows, f"{op}/{design}/{b}")}
                    summary.write(json.dumps(line) + "\n")
                    print(json.dumps(line), flush=True)
                if design == "fresh-balanced":
                    del use
            if not args.no_plants:
                base = dict(params)
                for _ in range(3):
                    row = {"design": "plant-replay", "op": op}
                    ref = statistics.median(graph_replay.replay_times(calls["cuda"], 20, 30))
                    twin = statistics.median(graph_replay.replay_times(calls["twin"], 20, 30))
                    row["twin"] = round(twin / ref, 5)
                    for f in FRACTIONS.get(op, ()):
                        variants = {**(base.get("variants") or {}), "pf": {"base": "cuda", "grow": f, "defines": {}, "description": "probe"}}
                        p = {**base, "variants": variants}
                        call = ops.bind(op, "cuda.pf", shape, p, cfg["seed"], cfg["cache_mode"])
                        t = statistics.median(graph_replay.replay_times(call, 20, 30))
                        row[f"{f:.5f}"] = round(t / ref, 5)
                        del call
                    summary.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
            del calls, shared
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
