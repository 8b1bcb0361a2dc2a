"""Probe: interleaved rounds inside one capture range, and spans after the range (bench script).

    python3 scripts/probe_rounds.py run [--ranges]        (under nsys with --ranges)
    python3 scripts/probe_rounds.py analyse EXPORT.sqlite

`run` binds cuda, triton, torch and an A/A twin of cuda for layernorm 4096x768 and matmul
1024^3, measures spans, then (with --ranges) opens one cudaProfilerStart/Stop range in which
ROUNDS rounds call each implementation CALLS times inside an NVTX range 'capture/<impl>/<round>',
the order rotated per round, then measures the spans again. `analyse` bootstraps the ratio of
trimmed means over rounds from the export.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

T0 = time.perf_counter()
ROUNDS, CALLS = 12, 25


def stamp(what: str, **extra: object) -> None:
    print(json.dumps({"t": round(time.perf_counter() - T0, 3), "phase": what, **extra}), flush=True)


def spans(torch, calls) -> dict[str, float]:  # type: ignore[no-untyped-def]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out: dict[str, list[float]] = {k: [] for k in calls}
    for r in range(6):
        for k, c in calls.items():
            for _ in range(25):
                start.record(); c(); end.record(); end.synchronize()
                out[k].append(start.elapsed_time(end) * 1e3)
    return {k: round(statistics.median(v), 2) for k, v in out.items()}


def run(argv: list[str]) -> None:
    ranges = "--ranges" in argv
    import torch
    import triton  # noqa: F401
    import cupy  # noqa: F401

    from harness import config, ops

    stamp("imports")
    cfg = config.load("config.yaml")
    allc = {}
    for op, shape in (("layernorm", "4096x768"), ("matmul", "1024x1024x1024"), ("softmax", "4096x1024")):
        params = cfg["operations"][op]
        for i in ("cuda", "triton", "torch"):
            allc[f"{op}/{i}"] = ops.bind(op, i, shape, params, cfg["seed"], "hot")
        allc[f"{op}/cuda_aa"] = ops.bind(op, "cuda", shape, params, cfg["seed"] + 7, "hot")
    for c in allc.values():
        for _ in range(10):
            c()
    torch.cuda.synchronize()
    stamp("bind")
    stamp("spans-before", spans=spans(torch, allc))
    keys = list(allc)
    if ranges:
        torch.cuda.profiler.start()
    t = time.perf_counter()
    for r in range(ROUNDS):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            torch.cuda.nvtx.range_push(f"capture/{k}/{r}")
            for _ in range(CALLS):
                allc[k]()
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
    stamp("rounds", seconds=round(time.perf_counter() - t, 3))
    t = time.perf_counter()
    if ranges:
        torch.cuda.profiler.stop()
    stamp("stop", seconds=round(time.perf_counter() - t, 3))
    time.sleep(0.5)
    stamp("spans-after", spans=spans(torch, allc))
    stamp("spans-after2", spans=spans(torch, allc))


def analyse(argv: list[str]) -> None:
    import numpy as np

    from harness.tables import nsys

    ex = nsys.open_export(argv[0])
    text = {r["id"]: r["value"] for r in ex.query("SELECT id, value FROM StringIds")}
    nv = list(ex.query("SELECT start, end, text, textId FROM NVTX_EVENTS WHERE end IS NOT NULL"))
    rt = {r["correlationId"]: r["start"] for r in ex.query("SELECT correlationId, start FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
    ks = list(ex.query("SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    ranges = []
    for n in nv:
        name = n["text"] or text.get(n["textId"], "")
        if name and name.startswith("capture/"):
            _, op, impl, rnd = name.split("/")
            ranges.append((n["start"], n["end"], op, impl, int(rnd)))
    ranges.sort()
    import bisect

    starts = [r[0] for r in ranges]
    per: dict[tuple[str, str, int], list[float]] = {}
    for k in ks:
        launch = rt.get(k["correlationId"])
        if launch is None:
            continue
        i = bisect.bisect_right(starts, launch) - 1
        if i >= 0 and ranges[i][0] <= launch <= ranges[i][1]:
            _, _, op, impl, rnd = ranges[i]
            per.setdefault((op, impl, rnd), []).append((k["end"] - k["start"]) / 1e3)
    quanta = sorted({round(d * 1000) % 32 for v in per.values() for d in v})[:5]
    print(json.dumps({"ns_mod_32": quanta}))

    def tmean(v):  # noqa: ANN001
        a = np.sort(np.asarray(v))
        k = len(a) // 4
        return float(a[k: len(a) - k].mean()) if len(a) > 4 else float(a.mean())

    rng = np.random.default_rng(1)
    ops_ = sorted({k[0] for k in per})
    for op in ops_:
        impls = sorted({k[1] for k in per if k[0] == op})
        rounds = sorted({k[2] for k in per if k[0] == op})
        m = {i: np.array([tmean(per[(op, i, r)]) for r in rounds]) for i in impls}
        med = {i: round(float(np.median(np.concatenate([per[(op, i, r)] for r in rounds]))), 3) for i in impls}
        out = {"op": op, "median_us": med}
        for a, b in (("cuda", "triton"), ("cuda", "cuda_aa"), ("triton", "torch")):
            ratio = m[a] / m[b]
            boots = [float(np.median(ratio[rng.integers(0, len(ratio), len(ratio))])) for _ in range(4000)]
            pooled = [float(np.mean(m[a][idx]) / np.mean(m[b][idx])) for idx in (rng.integers(0, len(ratio), len(ratio)) for _ in range(4000))]
            out[f"{a}/{b}"] = {"median_round_ratio": round(float(np.median(ratio)), 4),
                              "ci_median": [round(float(np.quantile(boots, q)), 4) for q in (0.025, 0.975)],
                              "ratio_of_means": round(float(m[a].mean() / m[b].mean()), 4),
                              "ci_means": [round(float(np.quantile(pooled, q)), 4) for q in (0.025, 0.975)]}
        print(json.dumps(out))


if __name__ == "__main__":
    {"run": run, "analyse": analyse}[sys.argv[1]](sys.argv[2:])
