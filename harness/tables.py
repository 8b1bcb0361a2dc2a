"""The evidence tables: one CSV per kind, the columns documented in the README.

Every figure a report prints comes from one of these tables; the tables come from the capture
exports (through harness.nsys, the same reader as `python -m harness nsys`), the span samples,
the check records and the build census.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from harness import nsys

KERNEL_TIME_DETAIL_COLUMNS = [
    "op", "shape", "impl", "kernel", "short_name", "instances", "per_iteration", "total_ns",
    "mean_ns", "median_ns", "min_ns", "max_ns", "stddev_ns", "grid", "block", "registers",
    "static_smem", "dynamic_smem",
]
KERNEL_TIME_COLUMNS = [
    "namespace", "op", "shape", "impl", "cache_mode", "iterations", "launches_per_iteration",
    "kernel_time_us", "main_kernel", "main_median_us", "main_min_us", "main_max_us", "kernels",
]
SPAN_COLUMNS = [
    "namespace", "op", "shape", "impl", "cache_mode", "samples", "rounds", "span_mean_us",
    "span_median_us", "span_std_us", "span_min_us", "span_max_us",
]
CHECK_COLUMNS = [
    "namespace", "op", "shape", "impl", "passed", "max_abs_err", "max_rel_err", "rel_l2_err",
    "atol", "rtol", "nonfinite_outputs", "unwritten_outputs", "elements",
]
SWEEP_COLUMNS = [
    "namespace", "op", "shape", "cache_mode", "cuda_us", "triton_us", "torch_us", "cuda_over_triton",
    "cuda_over_torch",
]


def write_csv(rows: Iterable[Mapping[str, Any]], columns: list[str], path: str | Path) -> pd.DataFrame:
    """Write rows with exactly these columns, atomically (temporary name, then rename)."""
    frame = pd.DataFrame(list(rows))
    for col in columns:
        if col not in frame.columns:
            frame[col] = pd.NA
    frame = frame[columns]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    frame.to_csv(tmp, index=False, float_format="%.6g")
    os.replace(tmp, path)
    return frame


def read_csvs(paths: Iterable[str | Path]) -> pd.DataFrame:
    frames = [pd.read_csv(p) for p in paths]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def kernel_time_detail(export: str | Path, range_name: str, iterations: int, op: str, shape: str, impl: str) -> list[dict[str, Any]]:
    """Per kernel launched inside the capture range: instances and durations, from the export."""
    rows = []
    for k in nsys.range_kernels(export, range_name):
        row = {"op": op, "shape": shape, "impl": impl, **k}
        row["per_iteration"] = k["instances"] / iterations
        rows.append(row)
    return rows


def kernel_time_summary(detail: pd.DataFrame, iterations: int, namespace: str, cache_mode: str) -> list[dict[str, Any]]:
    """Kernel time per iteration = summed kernel durations inside the range / iterations."""
    out = []
    for (op, shape, impl), grp in detail.groupby(["op", "shape", "impl"], sort=False):
        main = grp.sort_values("total_ns", ascending=False).iloc[0]
        out.append({
            "namespace": namespace, "op": op, "shape": shape, "impl": impl, "cache_mode": cache_mode,
            "iterations": iterations,
            "launches_per_iteration": float(grp["instances"].sum()) / iterations,
            "kernel_time_us": float(grp["total_ns"].sum()) / iterations / 1000.0,
            "main_kernel": main["short_name"],
            "main_median_us": float(main["median_ns"]) / 1000.0,
            "main_min_us": float(main["min_ns"]) / 1000.0,
            "main_max_us": float(main["max_ns"]) / 1000.0,
            "kernels": ";".join(str(s) for s in grp["short_name"]),
        })
    return out


def check_rows(paths: Iterable[str | Path], namespace: str) -> list[dict[str, Any]]:
    rows = []
    for p in paths:
        rec = json.loads(Path(p).read_text())
        rows.append({"namespace": namespace, **rec})
    return rows


def sweep_rows(kernel_time: pd.DataFrame, namespace: str, cache_mode: str) -> list[dict[str, Any]]:
    """Per (op, shape): each implementation's kernel time and the ratios cuda/triton, cuda/torch."""
    out = []
    for (op, shape), grp in kernel_time.groupby(["op", "shape"], sort=False):
        t = dict(zip(grp["impl"], grp["kernel_time_us"]))
        row: dict[str, Any] = {"namespace": namespace, "op": op, "shape": shape, "cache_mode": cache_mode}
        for impl in ("cuda", "triton", "torch"):
            row[f"{impl}_us"] = t.get(impl)
        row["cuda_over_triton"] = t["cuda"] / t["triton"] if t.get("cuda") and t.get("triton") else None
        row["cuda_over_torch"] = t["cuda"] / t["torch"] if t.get("cuda") and t.get("torch") else None
        out.append(row)
    return out
