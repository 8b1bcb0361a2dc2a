"""CUDA-event spans around one call: what a caller waits for, launch overhead included.

An event span is NOT kernel time: it covers the host launch path and any extra kernels, and for
short kernels it is dominated by launch overhead. Tables and reports name the two apart.

Method: every implementation of one (operation, shape) in one process, each on its own fresh
inputs (same seed), warmed up; then `rounds` rounds of `samples / rounds` samples each, the order of
implementations rotated between rounds so that no implementation always runs first or last.
Each sample records an event, calls once, records an event and waits for it (one call in flight).
"""

from __future__ import annotations

import statistics
from typing import Any

from harness import ops
from harness.gpu.device import require_gpu
from harness.measure import graph_replay


def rotation(impls: list[str], round_index: int) -> list[str]:
    k = round_index % len(impls)
    return impls[k:] + impls[:k]


def measure(cfg: dict[str, Any], op_name: str, shape: str, impls: list[str],
            graph_rows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Raw samples: one dict per (impl, round, sample) with the span in microseconds. With
    `graph_rows` (and cross_check enabled), after the spans each implementation is also timed by
    CUDA graph replay of `capture.iterations` calls (harness.graph_replay), appended there."""
    require_gpu()
    import torch

    sp = cfg["span"]
    params = cfg["operations"][op_name]
    calls = {impl: ops.bind(op_name, impl, shape, params, cfg["seed"], cfg["cache_mode"]) for impl in impls}
    for call in calls.values():
        for _ in range(sp["warmup"]):
            call()
    torch.cuda.synchronize()
    per_round = max(1, sp["samples"] // sp["rounds"])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rows: list[dict[str, Any]] = []
    for r in range(sp["rounds"]):
        for impl in rotation(impls, r):
            call = calls[impl]
            for i in range(per_round):
                start.record()
                call()
                end.record()
                end.synchronize()
                rows.append({"op": op_name, "shape": shape, "impl": impl, "round": r, "sample": i,
                             "span_us": start.elapsed_time(end) * 1000.0})
    if graph_rows is not None and cfg["cross_check"]["enabled"]:

        for impl in impls:
            graph_rows.append(graph_replay.measure(op_name, shape, impl, calls[impl], cfg["capture"]["iterations"],
                                                   cfg["cross_check"]["replays"], cfg["cross_check"]["max_seconds"]))
    return rows


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per implementation: samples, mean, median, standard deviation, min and max (microseconds)."""
    by_impl: dict[tuple[str, str, str], list[float]] = {}
    for row in rows:
        by_impl.setdefault((row["op"], row["shape"], row["impl"]), []).append(float(row["span_us"]))
    out = []
    for (op, shape, impl), values in by_impl.items():
        out.append({
            "op": op, "shape": shape, "impl": impl, "samples": len(values),
            "span_mean_us": statistics.fmean(values), "span_median_us": statistics.median(values),
            "span_std_us": statistics.stdev(values) if len(values) > 1 else 0.0,
            "span_min_us": min(values), "span_max_us": max(values),
        })
    return out
