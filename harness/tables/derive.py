"""The evidence tables: one CSV per kind, the columns documented in the README.

Every figure a report prints comes from one of these tables; the tables come from the capture
exports (through harness.nsys, the same reader as `python -m harness nsys`), the span samples,
the check records and the build census.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from harness import ops
from harness.tables import nsys

KERNEL_TIME_DETAIL_COLUMNS = [
    "op", "shape", "impl", "kernel", "short_name", "instances", "per_iteration", "total_ns",
    "mean_ns", "median_ns", "min_ns", "max_ns", "stddev_ns", "grid", "block", "registers",
    "static_smem", "dynamic_smem",
]
KERNEL_TIME_COLUMNS = [
    "namespace", "op", "shape", "impl", "cache_mode", "iterations", "launches_per_iteration",
    "kernel_time_us", "main_kernel", "main_median_us", "main_min_us", "main_max_us", "kernels",
    "bytes_moved", "flops", "achieved_gbps", "achieved_tflops", "copy_bw_fraction", "fp32_peak_fraction",
    "gpu_uuid",
]
CEILING_COLUMNS = ["ceiling", "value", "unit", "median_ms", "min_ms", "max_ms", "repeats", "method"]
SPAN_COLUMNS = [
    "namespace", "op", "shape", "impl", "cache_mode", "samples", "rounds", "span_mean_us",
    "span_median_us", "span_std_us", "span_min_us", "span_max_us",
]
CHECK_COLUMNS = [
    "namespace", "op", "shape", "impl", "passed", "max_abs_err", "max_rel_err", "rel_l2_err",
    "atol", "rtol", "nonfinite_outputs", "unwritten_outputs", "elements", "error",
]
GPU_STATE_COLUMNS = [
    "namespace", "op", "shape", "impl", "gpu_uuid", "before_utilization_pct", "before_power_w",
    "before_sm_clock_mhz", "before_mem_clock_mhz", "before_temperature_c", "before_compute_processes",
    "waited_s", "during_samples", "during_throttle_reasons", "during_max_compute_processes",
    "after_power_w", "after_sm_clock_mhz", "disturbed", "flags",
]
GRAPH_COLUMNS = ["op", "shape", "impl", "status", "reason", "calls_per_replay", "replays",
                 "graph_median_us", "graph_min_us", "graph_max_us"]
"""graph.csv of a span job: the graph-replay timing of each implementation (harness.measure.graph_replay)."""

SWEEP_IMPLS = ("cuda", "triton", "torch", "external")
SWEEP_COLUMNS = [
    "namespace", "op", "shape", "cache_mode", "bytes_moved", "flops", "cuda_us", "triton_us", "torch_us",
    "external_us", "cuda_over_triton", "cuda_over_torch", "external_over_triton",
    "cuda_over_triton_lo", "cuda_over_triton_hi", "cuda_vs_triton", "gpus",
]


def kernel_time_detail(export: str | Path, range_name: str, iterations: int, op: str, shape: str, impl: str) -> list[dict[str, Any]]:
    """Per kernel launched inside the capture range: instances and durations, from the export."""
    rows = []
    for k in nsys.range_kernels(export, range_name):
        row = {"op": op, "shape": shape, "impl": impl, **k}
        row["per_iteration"] = k["instances"] / iterations
        rows.append(row)
    return rows


def ceiling_values(ceilings: pd.DataFrame | None) -> dict[str, float]:
    """{'copy_bandwidth': GB/s, 'fp32_matmul': TFLOP/s} from a ceilings table (empty without one)."""
    if ceilings is None or ceilings.empty:
        return {}
    return {str(r["ceiling"]): float(r["value"]) for _, r in ceilings.iterrows()}


def kernel_time_summary(detail: pd.DataFrame, iterations: int, namespace: str, cache_mode: str,
                        ceilings: pd.DataFrame | None = None,
                        gpus: Mapping[tuple[str, str, str], str] | None = None) -> list[dict[str, Any]]:
    """Kernel time per iteration = summed kernel durations inside the range / iterations; with the
    operation's bytes and flops, the rates they imply and their fractions of the session's ceilings;
    `gpus` maps (op, shape, impl) to the UUID of the GPU that captured it (gpus_of_captures)."""

    ceil = ceiling_values(ceilings)
    out = []
    for (op, shape, impl), grp in detail.groupby(["op", "shape", "impl"], sort=False):
        main = grp.sort_values("total_ns", ascending=False).iloc[0]
        kernel_us = float(grp["total_ns"].sum()) / iterations / 1000.0
        operation = ops.get(str(op))
        moved, flops = operation.bytes_moved(str(shape)), operation.flops(str(shape))
        gbps = moved / (kernel_us * 1e3) if kernel_us > 0 else None  # bytes per ns = GB/s
        tflops = flops / (kernel_us * 1e6) if kernel_us > 0 and flops else None
        out.append({
            "namespace": namespace, "op": op, "shape": shape, "impl": impl, "cache_mode": cache_mode,
            "iterations": iterations,
            "launches_per_iteration": float(grp["instances"].sum()) / iterations,
            "kernel_time_us": kernel_us,
            "main_kernel": main["short_name"],
            "main_median_us": float(main["median_ns"]) / 1000.0,
            "main_min_us": float(main["min_ns"]) / 1000.0,
            "main_max_us": float(main["max_ns"]) / 1000.0,
            "kernels": ";".join(str(s) for s in grp["short_name"]),
            "bytes_moved": moved, "flops": flops, "achieved_gbps": gbps, "achieved_tflops": tflops,
            "copy_bw_fraction": gbps / ceil["copy_bandwidth"] if gbps and "copy_bandwidth" in ceil else None,
            "fp32_peak_fraction": tflops / ceil["fp32_matmul"] if tflops and "fp32_matmul" in ceil else None,
            "gpu_uuid": (gpus or {}).get((str(op), str(shape), str(impl))),
        })
    return out


def measured(record: Mapping[str, Any]) -> bool:
    """Whether a capture record stands for a capture ('measured': false when its check failed and
    nothing was timed; records from before the key existed are captures)."""
    return record.get("measured", True) is not False


def gpus_of_captures(metas: Iterable[str | Path]) -> dict[tuple[str, str, str], str]:
    """(op, shape, impl) -> GPU UUID, from the capture records that name one."""
    out = {}
    for path in metas:
        meta = json.loads(Path(path).read_text())
        if meta.get("gpu_uuid") and measured(meta):
            out[(str(meta.get("op")), str(meta.get("shape")), str(meta.get("impl")))] = str(meta["gpu_uuid"])
    return out


def same_gpu(a: Any, b: Any) -> bool:
    """Whether two rows' GPUs may be compared: the same UUID, or one not recorded (older tables)."""
    def uuid(row: Any) -> str | None:
        value = row.get("gpu_uuid") if isinstance(row, Mapping) else None
        return None if value is None or (isinstance(value, float) and math.isnan(value)) or value == "" else str(value)

    ua, ub = uuid(a), uuid(b)
    return ua is None or ub is None or ua == ub


def check_rows(paths: Iterable[str | Path], namespace: str) -> list[dict[str, Any]]:
    rows = []
    for p in paths:
        rec = json.loads(Path(p).read_text())
        rows.append({"namespace": namespace, **rec})
    return rows


def _ratio(t: dict[str, float], a: str, b: str) -> float | None:
    return t[a] / t[b] if t.get(a) and t.get(b) else None


def spread(row: Mapping[str, Any]) -> tuple[float, float] | None:
    """The kernel time per call, scaled by the spread of its main kernel's launches: (time·min/median,
    time·max/median). None where the row lacks the durations."""
    try:
        kt, lo, med, hi = (float(row[k]) for k in ("kernel_time_us", "main_min_us", "main_median_us", "main_max_us"))
    except (KeyError, TypeError, ValueError):
        return None
    if not med > 0:
        return None
    return kt * lo / med, kt * hi / med


def ratio_interval(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> tuple[float | None, float | None, str | None]:
    """Interval of a/b from the two spreads (lowest a over highest b to highest a over lowest b), and
    a verdict: 'faster' or 'slower' when the whole interval is below or above 1, else 'no difference'
    (the difference is inside the spread of the launches)."""
    sa, sb = (spread(a) if a is not None else None), (spread(b) if b is not None else None)
    if sa is None or sb is None or not sb[0] > 0:
        return None, None, None
    lo, hi = sa[0] / sb[1], sa[1] / sb[0]
    return lo, hi, "faster" if hi < 1 else ("slower" if lo > 1 else "no difference")


def sweep_rows(kernel_time: pd.DataFrame, namespace: str, cache_mode: str) -> list[dict[str, Any]]:
    """Per (op, shape): each implementation's kernel time, the ratios to the control (triton) and to
    the library (torch), and for cuda/triton an interval from the spread of the launches with its
    verdict (a difference inside the spread is no difference)."""
    out = []
    for (op, shape), grp in kernel_time.groupby(["op", "shape"], sort=False):
        rows = {r["impl"]: r for r in grp.to_dict("records")}
        # the evidence rule: a ratio is only taken between captures of one GPU
        t = {impl: us for impl, us in zip(grp["impl"], grp["kernel_time_us"])}
        uuids = {str(u) for u in grp["gpu_uuid"].dropna()} if "gpu_uuid" in grp else set()
        row: dict[str, Any] = {"namespace": namespace, "op": op, "shape": shape, "cache_mode": cache_mode,
                               "bytes_moved": grp["bytes_moved"].iloc[0] if "bytes_moved" in grp else None,
                               "flops": grp["flops"].iloc[0] if "flops" in grp else None}
        for impl in SWEEP_IMPLS:
            row[f"{impl}_us"] = t.get(impl)
        def comparable(a: str, b: str) -> bool:
            return same_gpu(rows.get(a), rows.get(b))

        row["cuda_over_triton"] = _ratio(t, "cuda", "triton") if comparable("cuda", "triton") else None
        row["cuda_over_torch"] = _ratio(t, "cuda", "torch") if comparable("cuda", "torch") else None
        row["external_over_triton"] = _ratio(t, "external", "triton") if comparable("external", "triton") else None
        lo, hi, verdict = ratio_interval(rows.get("cuda"), rows.get("triton")) if comparable("cuda", "triton") else (
            None, None, "different GPUs" if "cuda" in rows and "triton" in rows else None)
        row.update({"cuda_over_triton_lo": lo, "cuda_over_triton_hi": hi, "cuda_vs_triton": verdict,
                    "gpus": len(uuids) if uuids else None})
        out.append(row)
    return out


def gpu_state_row(meta: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """One row of gpu_state.csv from a capture's metadata: NVML before, during and after it."""
    gpu = meta.get("gpu", {})
    before, during, after = gpu.get("before", {}), gpu.get("during", {}), gpu.get("after", {})
    flags = list(during.get("flags", []))
    return {
        "namespace": namespace, "op": meta.get("op"), "shape": meta.get("shape"), "impl": meta.get("impl"),
        "gpu_uuid": meta.get("gpu_uuid"),
        "before_utilization_pct": before.get("utilization_pct"), "before_power_w": before.get("power_w"),
        "before_sm_clock_mhz": before.get("sm_clock_mhz"), "before_mem_clock_mhz": before.get("mem_clock_mhz"),
        "before_temperature_c": before.get("temperature_c"),
        "before_compute_processes": before.get("compute_processes"), "waited_s": gpu.get("waited_s"),
        "during_samples": during.get("samples"), "during_throttle_reasons": during.get("throttle_reasons"),
        "during_max_compute_processes": during.get("max_compute_processes"),
        "after_power_w": after.get("power_w"), "after_sm_clock_mhz": after.get("sm_clock_mhz"),
        "disturbed": bool(flags), "flags": "; ".join(flags),
    }


def capture_paths(meta: str | Path) -> tuple[Path, Path]:
    """The report and SQLite export a capture record stands for: <impl>.nsys-rep and <impl>.sqlite
    beside <impl>.json."""
    meta = Path(meta)
    return meta.with_suffix(".nsys-rep"), meta.with_suffix(".sqlite")


def measured_file(meta: str | Path) -> bool:
    """Whether a capture record stands for a capture (False: its check failed, nothing was timed)."""
    return measured(json.loads(Path(meta).read_text()))
