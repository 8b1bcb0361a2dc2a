"""Probe of one measurement-group process on the GPU: where its time goes, and how precise the
interleaved-round statistic is (a bench script; its output is a design input, never evidence).

    python3 scripts/probe_group.py run [--ranges] [--groups layernorm:4096x768,...] [--aa]
    python3 scripts/probe_group.py analyse ORDER.json EXPORT.sqlite...

`run` binds every implementation of each group in one process, times spans, runs interleaved
rounds of CUDA-graph replays (ours, the control and an A/A twin alternating), and with --ranges
wraps each implementation's captured calls in cudaProfilerStart/Stop (for nsys
--capture-range=cudaProfilerApi --capture-range-end=repeat). It prints one JSON line per phase.
`analyse` reads the per-range exports in the order `run` wrote and prints, per range, the median
kernel time per call and the bootstrap interval of each pair's ratio of medians.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

T0 = time.perf_counter()


def stamp(what: str, **extra: object) -> None:
    print(json.dumps({"t": round(time.perf_counter() - T0, 3), "phase": what, **extra}), flush=True)


def boot_ratio(a: list[float], b: list[float], n: int = 2000, seed: int = 1) -> tuple[float, float, float]:
    import numpy as np

    rng = np.random.default_rng(seed)
    a_, b_ = np.asarray(a), np.asarray(b)
    ra = a_[rng.integers(0, len(a_), (n, len(a_)))]
    rb = b_[rng.integers(0, len(b_), (n, len(b_)))]
    ratios = np.median(ra, axis=1) / np.median(rb, axis=1)
    return float(np.median(a_) / np.median(b_)), float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))


def paired_ratio(a: list[float], b: list[float], n: int = 2000, seed: int = 1) -> tuple[float, float, float]:
    """Bootstrap over rounds of the median of per-round ratios (the rounds are paired)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    r = np.asarray(a) / np.asarray(b)
    idx = rng.integers(0, len(r), (n, len(r)))
    meds = np.median(r[idx], axis=1)
    return float(np.median(r)), float(np.quantile(meds, 0.025)), float(np.quantile(meds, 0.975))


def run(argv: list[str]) -> None:
    ranges = "--ranges" in argv
    one_range = "--one-range" in argv
    groups = "layernorm:4096x768,matmul:1024x1024x1024,transpose:4096x4096"
    rounds, iterations = 40, 100
    for i, a in enumerate(argv):
        if a == "--groups":
            groups = argv[i + 1]
        if a == "--rounds":
            rounds = int(argv[i + 1])
        if a == "--iterations":
            iterations = int(argv[i + 1])
    import torch
    import triton  # noqa: F401
    import cupy  # noqa: F401

    from harness import config, ops

    stamp("imports")
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    stamp("context")
    cfg = config.load("config.yaml")
    order = []
    for group in groups.split(","):
        op, shape = group.split(":")
        impls = ["cuda", "triton", "torch"]
        params = cfg["operations"][op]
        calls = {i: ops.bind(op, i, shape, params, cfg["seed"], "hot") for i in impls}
        calls["cuda_aa"] = ops.bind(op, "cuda", shape, params, cfg["seed"] + 7, "hot")
        for c in calls.values():
            for _ in range(10):
                c()
        torch.cuda.synchronize()
        stamp("bind", group=group)
        # spans, interleaved by rounds of 20 samples
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        spans: dict[str, list[float]] = {k: [] for k in calls}
        for r in range(10):
            for k, c in calls.items():
                for _ in range(20):
                    start.record(); c(); end.record(); end.synchronize()
                    spans[k].append(start.elapsed_time(end) * 1e3)
        stamp("spans", group=group, median_us={k: round(statistics.median(v), 2) for k, v in spans.items()})
        # host time per call, no sync
        host = {}
        for k, c in calls.items():
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(200):
                c()
            host[k] = round((time.perf_counter() - t) / 200 * 1e6, 2)
            torch.cuda.synchronize()
        stamp("host", group=group, host_us=host)
        # interleaved graph rounds
        graphs = {}
        for k, c in calls.items():
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                c()
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            try:
                with torch.cuda.graph(g):
                    for _ in range(20):
                        c()
            except Exception as exc:  # noqa: BLE001
                stamp("graph-fail", impl=k, reason=str(exc)[:100])
                continue
            g.replay(); torch.cuda.synchronize()
            graphs[k] = g
        times: dict[str, list[float]] = {k: [] for k in graphs}
        keys = list(graphs)
        for r in range(rounds):
            rot = keys[r % len(keys):] + keys[: r % len(keys)]
            for k in rot:
                start.record(); graphs[k].replay(); end.record(); end.synchronize()
                times[k].append(start.elapsed_time(end) * 1e3 / 20)
        res = {}
        if "cuda" in times and "triton" in times:
            res["cuda/triton unpaired"] = boot_ratio(times["cuda"], times["triton"])
            res["cuda/triton paired"] = paired_ratio(times["cuda"], times["triton"])
        if "cuda" in times and "cuda_aa" in times:
            res["cuda/cuda_aa unpaired"] = boot_ratio(times["cuda"], times["cuda_aa"])
            res["cuda/cuda_aa paired"] = paired_ratio(times["cuda"], times["cuda_aa"])
        stamp("rounds", group=group, rounds=rounds, medians={k: round(statistics.median(v), 3) for k, v in times.items()},
              ratios=res)
        del graphs
        # captures
        if one_range:
            torch.cuda.profiler.start()
        for k, c in calls.items():
            torch.cuda.synchronize()
            t = time.perf_counter()
            if ranges:
                torch.cuda.profiler.start()
            torch.cuda.nvtx.range_push("capture")
            for _ in range(iterations):
                c()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            if ranges:
                torch.cuda.profiler.stop()
            order.append({"group": group, "impl": k})
            stamp("range", group=group, impl=k, seconds=round(time.perf_counter() - t, 3))
        if one_range:
            t = time.perf_counter()
            torch.cuda.profiler.stop()
            stamp("one-range-stop", seconds=round(time.perf_counter() - t, 3))
        del calls
        torch.cuda.empty_cache()
    json.dump(order, open("/tmp/probe-order.json", "w"))
    stamp("end", wall=time.time())


def analyse(argv: list[str]) -> None:
    from harness.tables import nsys

    order = json.load(open(argv[0]))
    per: list[tuple[dict, list[float]]] = []
    for entry, path in zip(order, argv[1:]):
        ex = nsys.open_export(path)
        rows = list(ex.query("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start"))
        durs = [(r["end"] - r["start"]) / 1e3 for r in rows]
        per.append((entry, durs))
        print(json.dumps({"range": entry, "kernels": len(durs), "median_us": round(statistics.median(durs), 3) if durs else None,
                          "min": round(min(durs), 3) if durs else None, "max": round(max(durs), 3) if durs else None}))
    by = {(e["group"], e["impl"]): d for e, d in per}
    for (group, impl), d in by.items():
        if impl in ("triton", "cuda_aa") and (group, "cuda") in by:
            print(json.dumps({"group": group, "pair": f"cuda/{impl}", "ratio_ci": boot_ratio(by[(group, "cuda")], d)}))


if __name__ == "__main__":
    {"run": run, "analyse": analyse}[sys.argv[1]](sys.argv[2:])
