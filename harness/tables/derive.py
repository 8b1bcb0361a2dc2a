"""The evidence tables of a namespace, derived from what its measurement groups wrote; the one
derivation the tables step and `verify` both call (`namespace_tables`).

A measurement group (harness.measure.group) leaves under `artifacts/<ns>/measure/<op>/<shape>/`:
`record.json` (checks, calls per round, GPU state, the facts of the run), `launches.csv` (every
kernel launch the capture attributed to an implementation's round, read from the SQLite export by
`launch_rows`), `spans.csv` (event-span samples) and `graph.csv` (graph-replay timings). Every figure
a report prints comes from the tables below; docs/outputs.md documents their columns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import baseline, ops
from harness.io import row_dicts
from harness.ops import variants as config_variants
from harness.tables import nsys, stats
from harness.tables.cross_check import CROSS_CHECK_COLUMNS, IDLE_COLUMNS, compare

if TYPE_CHECKING:
    import pandas as pd

RANGE_PREFIX = "capture/"
"""The captured calls of implementation I in round R run inside the NVTX range 'capture/I/R'."""

LAUNCH_COLUMNS = ["op", "shape", "impl", "round", "kernel", "short_name", "duration_ns", "grid", "block",
                  "registers", "static_smem", "dynamic_smem"]
KERNEL_TIME_DETAIL_COLUMNS = [
    "op", "shape", "impl", "kernel", "short_name", "instances", "per_iteration", "total_ns",
    "mean_ns", "median_ns", "min_ns", "max_ns", "stddev_ns", "grid", "block", "registers",
    "static_smem", "dynamic_smem",
]
KERNEL_TIME_COLUMNS = [
    "namespace", "op", "shape", "impl", "cache_mode", "iterations", "rounds", "launches_per_iteration",
    "kernel_time_us", "kernel_time_lo_us", "kernel_time_hi_us", "main_kernel", "main_median_us", "main_min_us",
    "main_max_us", "kernels", "bytes_moved", "flops", "achieved_gbps", "achieved_tflops", "copy_bw_fraction",
    "fp32_peak_fraction", "same_size_copy_fraction", "launch_path", "gpu_uuid",
]
CEILING_COLUMNS = ["ceiling", "value", "unit", "median_ms", "min_ms", "max_ms", "repeats", "method", "bytes"]
SPAN_COLUMNS = [
    "namespace", "op", "shape", "impl", "cache_mode", "samples", "rounds", "span_mean_us",
    "span_median_us", "span_std_us", "span_min_us", "span_max_us", "launch_path", "exclusive", "threads",
]
SPAN_SAMPLE_COLUMNS = ["op", "shape", "impl", "round", "sample", "span_us"]
CHECK_COLUMNS = [
    "namespace", "op", "shape", "impl", "passed", "max_abs_err", "max_rel_err", "rel_l2_err",
    "atol", "rtol", "nonfinite_outputs", "unwritten_outputs", "elements", "error",
]
GPU_STATE_COLUMNS = [
    "namespace", "op", "shape", "impl", "gpu_uuid", "before_utilization_pct", "before_power_w",
    "before_sm_clock_mhz", "before_mem_clock_mhz", "before_temperature_c", "before_compute_processes",
    "waited_s", "during_samples", "during_throttle_reasons", "during_max_compute_processes",
    "after_power_w", "after_sm_clock_mhz", "disturbed", "flags",
    "before_power_limit_w", "before_max_sm_clock_mhz", "during_busy_samples", "during_busy_throttle_reasons",
    "during_busy_sm_clock_min_mhz", "during_busy_sm_clock_max_mhz", "during_busy_power_max_w",
    "during_extent", "session_flags",
]
GRAPH_COLUMNS = ["op", "shape", "impl", "status", "reason", "calls_per_replay", "replays",
                 "graph_median_us", "graph_min_us", "graph_max_us", *IDLE_COLUMNS]
"""graph.csv of a group: the graph-replay timing of each implementation (harness.measure.graph_replay)
and, where the run asked for it, its idle-start timing (harness.measure.idle_start)."""

ROUND_COLUMNS = ["namespace", "op", "shape", "impl", "round", "calls", "kernel_time_us"]
"""rounds.csv: each implementation's kernel time per call in each round of its capture (what the
intervals resample; `python -m harness compare` reads it across namespaces)."""
RATIO_COLUMNS = ["ratio", "ratio_lo", "ratio_hi", "half_width", "verdict", "between_runs"]
SWEEP_IMPLS = ("cuda", "triton", "torch", "external")
SWEEP_PAIRS = ops.PAIRS
"""The ratios a/b the sweep table holds (`<a>_over_<b>`, its `_lo`/`_hi` and the verdict `<a>_vs_<b>`)."""
SWEEP_COLUMNS = [
    "namespace", "op", "shape", "cache_mode", "bytes_moved", "flops", "cuda_us", "triton_us", "torch_us",
    "external_us", "cuda_over_triton", "cuda_over_triton_lo", "cuda_over_triton_hi", "cuda_vs_triton",
    "cuda_over_torch", "cuda_over_torch_lo", "cuda_over_torch_hi", "cuda_vs_torch",
    "external_over_triton", "external_over_triton_lo", "external_over_triton_hi", "external_vs_triton",
    "half_width", "between_runs", "margin", "rounds", "gpus", "placements",
]
VARIANT_COLUMNS = ["namespace", "op", "shape", "variant", "base", "description", "cache_mode", "base_us",
                   "variant_us", "ratio", "ratio_lo", "ratio_hi", "verdict", "half_width", "between_runs", "margin"]

CHANGE_COLUMNS = ["namespace", "op", "shape", "impl", "revision", "commit", "commit_date", "dispatch", "cache_mode",
                  "current_us", "baseline_us", "ratio", "ratio_lo", "ratio_hi", "verdict", "half_width", "between_runs",
                  "margin"]
"""change.csv: each implementation of ours against itself at a baseline revision, measured in the
same group: ratio = current / baseline (below 1: the change made it faster), its paired interval
over the rounds and the verdict; `dispatch` says whose dispatch chose and launched the revision's
kernels ('its own' or "this checkout's", the group record's `baseline_dispatch`)."""


# ----------------------------------------------------------------------------------- one group


def group_files(group_dir: str | Path) -> dict[str, Path]:
    """The files a measurement group writes into its folder (raw capture files included)."""
    d = Path(group_dir)
    return {"record": d / "record.json", "launches": d / "launches.csv", "spans": d / "spans.csv",
            "graph": d / "graph.csv", "report": d / "capture.nsys-rep", "export": d / "capture.sqlite"}


def parse_range(name: str) -> tuple[str, int] | None:
    """(impl, round) of a round range (`parse_round_range`), else None."""
    parsed = parse_round_range(name)
    return (parsed[2], parsed[3]) if parsed else None


def parse_round_range(name: str) -> tuple[str | None, str | None, str, int] | None:
    """(op, shape, impl, round) of a range named 'capture/<op>/<shape>/<impl>/<round>', or (None,
    None, impl, round) of one named 'capture/<impl>/<round>' (before sessions), else None."""
    if not name.startswith(RANGE_PREFIX):
        return None
    rest, sep, index = name[len(RANGE_PREFIX):].rpartition("/")
    if not sep or not rest or not index.isdigit():
        return None
    parts = rest.split("/")
    if len(parts) == 1:
        return None, None, parts[0], int(index)
    if len(parts) == 3 and all(parts):
        return parts[0], parts[1], parts[2], int(index)
    return None


def launch_rows(export: str | Path, op: str, shape: str) -> list[dict[str, Any]]:
    """Every kernel launch the export attributes to an implementation's round of (op, shape) (the
    innermost round range open over its launch call, `parse_round_range`), in LAUNCH_COLUMNS."""
    rows = []
    for k in nsys.range_launches(export, RANGE_PREFIX):
        parsed = parse_round_range(str(k["range"]).lstrip(":"))
        if parsed is None or (parsed[0] is not None and (parsed[0], parsed[1]) != (op, shape)):
            continue
        _, _, impl, index = parsed
        rows.append({"op": op, "shape": shape, "impl": impl, "round": index, "kernel": k["kernel"],
                     "short_name": k["short_name"], "duration_ns": int(k["duration_ns"]), "grid": k["grid"],
                     "block": k["block"], "registers": k["registers"], "static_smem": k["static_smem"],
                     "dynamic_smem": k["dynamic_smem"]})
    return rows


def _frame(columns: list[str]) -> pd.DataFrame:
    """An empty table with these columns."""
    import pandas as pd  # here, not at the top: the measure step imports this module and needs pandas
    # only after its group process has run, which it overlaps the import with (harness.jobs.preload)

    return pd.DataFrame(columns=columns)


@dataclass
class Group:
    """What one measurement group left, read back."""

    record: dict[str, Any]
    launches: pd.DataFrame
    spans: pd.DataFrame = field(default_factory=lambda: _frame(SPAN_SAMPLE_COLUMNS))
    graph: pd.DataFrame = field(default_factory=lambda: _frame(GRAPH_COLUMNS))

    @property
    def key(self) -> tuple[str, str]:
        return str(self.record["op"]), str(self.record["shape"])


def read_group(group_dir: str | Path, launches: pd.DataFrame | None = None) -> Group:
    """A group's files as a Group (`launches` replaces launches.csv, as verify re-derives it)."""
    f = group_files(group_dir)
    record = json.loads(f["record"].read_text())

    def frame(path: Path, columns: list[str]) -> pd.DataFrame:
        import pandas as pd

        if path.is_file() and path.stat().st_size:
            df = pd.read_csv(path, dtype={"shape": str, "impl": str, "op": str})
            return df if not df.empty else _frame(columns)
        return _frame(columns)

    return Group(record=record, launches=launches if launches is not None else frame(f["launches"], LAUNCH_COLUMNS),
                 spans=frame(f["spans"], SPAN_SAMPLE_COLUMNS), graph=frame(f["graph"], GRAPH_COLUMNS))


def round_values(group: Group) -> dict[str, list[float]]:
    """impl -> its kernel time per call in each round (µs), for the implementations captured."""
    calls = group.record.get("calls_per_round") or {}
    rounds = int(group.record.get("rounds") or 0)
    out: dict[str, list[float]] = {}
    if group.launches.empty:
        return out
    sums = group.launches.groupby(["impl", "round"])["duration_ns"].sum()
    for impl in calls:
        k = int(calls[impl])
        out[str(impl)] = [float(sums.get((impl, r), 0.0)) / k / 1000.0 for r in range(rounds)]
    return out


def _detail_rows(group: Group) -> list[dict[str, Any]]:
    calls = {str(i): int(k) * int(group.record.get("rounds") or 0) for i, k in (group.record.get("calls_per_round") or {}).items()}
    rows: list[dict[str, Any]] = []
    if group.launches.empty:
        return rows
    op, shape = group.key
    for (impl, kernel), grp in group.launches.groupby(["impl", "kernel"], sort=False):
        d = grp["duration_ns"].astype("int64")
        first = grp.iloc[0]
        rows.append({"op": op, "shape": shape, "impl": impl, "kernel": kernel, "short_name": first["short_name"],
                     "instances": int(d.size), "per_iteration": d.size / calls[str(impl)] if calls.get(str(impl)) else None,
                     "total_ns": int(d.sum()), "mean_ns": round(float(d.mean()), 1), "median_ns": round(float(d.median()), 1),
                     "min_ns": int(d.min()), "max_ns": int(d.max()),
                     "stddev_ns": round(float(d.std(ddof=1)), 1) if d.size > 1 else 0.0,
                     "grid": first["grid"], "block": first["block"], "registers": first["registers"],
                     "static_smem": first["static_smem"], "dynamic_smem": first["dynamic_smem"]})
    return rows


def ceiling_values(ceilings: pd.DataFrame | None) -> dict[str, float]:
    """{'copy_bandwidth': GB/s, 'fp32_matmul': TFLOP/s, 'copy_bandwidth@<bytes>': GB/s} from a
    ceilings table (empty without one)."""
    if ceilings is None or ceilings.empty:
        return {}
    return {str(r["ceiling"]): float(r["value"]) for _, r in ceilings.iterrows()}


def same_size_ceiling(ceil: Mapping[str, float], moved: int) -> float | None:
    """The copy bandwidth measured at this byte count (the same-size copy ceiling), if measured."""
    return ceil.get(f"copy_bandwidth@{moved}")


def _kernel_time_rows(group: Group, detail: pd.DataFrame, namespace: str, cache_mode: str,
                      ceil: Mapping[str, float]) -> list[dict[str, Any]]:
    op, shape = group.key
    operation = ops.get(op)
    moved, flops = operation.bytes_moved(shape), operation.flops(shape)
    per_round = round_values(group)
    rounds = int(group.record.get("rounds") or 0)
    out = []
    for impl, grp in detail.groupby("impl", sort=False):
        calls = int(group.record["calls_per_round"][impl]) * rounds
        main = grp.sort_values("total_ns", ascending=False).iloc[0]
        kernel_us = float(grp["total_ns"].sum()) / calls / 1000.0
        _, lo, hi = stats.mean_interval(per_round[impl], seed=stats.seed_of(op, shape, impl), clusters=placements(group))
        gbps = moved / (kernel_us * 1e3) if kernel_us > 0 else None  # bytes per ns = GB/s
        tflops = flops / (kernel_us * 1e6) if kernel_us > 0 and flops else None
        same_size = same_size_ceiling(ceil, moved)
        out.append({
            "namespace": namespace, "op": op, "shape": shape, "impl": impl, "cache_mode": cache_mode,
            "iterations": calls, "rounds": rounds, "launches_per_iteration": float(grp["instances"].sum()) / calls,
            "kernel_time_us": kernel_us, "kernel_time_lo_us": lo, "kernel_time_hi_us": hi,
            "main_kernel": main["short_name"], "main_median_us": float(main["median_ns"]) / 1000.0,
            "main_min_us": float(main["min_ns"]) / 1000.0, "main_max_us": float(main["max_ns"]) / 1000.0,
            "kernels": ";".join(str(s) for s in grp["short_name"]),
            "bytes_moved": moved, "flops": flops, "achieved_gbps": gbps, "achieved_tflops": tflops,
            "copy_bw_fraction": gbps / ceil["copy_bandwidth"] if gbps and "copy_bandwidth" in ceil else None,
            "fp32_peak_fraction": tflops / ceil["fp32_matmul"] if tflops and "fp32_matmul" in ceil else None,
            "same_size_copy_fraction": gbps / same_size if gbps and same_size else None,
            "launch_path": (group.record.get("launch_paths") or {}).get(impl),
            "gpu_uuid": group.record.get("gpu_uuid"),
        })
    return out


def placements(group: Group) -> list[int] | None:
    """The placement of each of the group's rounds (its record's `round_placements`), None for a
    record of one placement or of none (before placements existed)."""
    sequence = group.record.get("round_placements")
    rounds = int(group.record.get("rounds") or 0)
    if not sequence or int(group.record.get("placements") or 1) < 2 or len(sequence) != rounds:
        return None
    return [int(p) for p in sequence]


def ratio(per_round: Mapping[str, Sequence[float]], a: str, b: str, key: Sequence[str],
          margin: float = stats.MARGIN, clusters: Sequence[int] | None = None,
          between_runs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """RATIO_COLUMNS of a/b from the rounds of one capture (paired; `clusters` the placement of
    each round), or empty values where either was not captured. The interval is widened by the
    between-run component of a/b at the key's operation (`between_runs`, the config's
    `verdict.between_runs`; harness.tables.stats), whose relative half-width is `between_runs`."""
    if a not in per_round or b not in per_round or not per_round[a] or not per_round[b]:
        return {c: None for c in RATIO_COLUMNS}
    r, lo, hi = stats.ratio_interval(per_round[a], per_round[b], paired=True, seed=stats.seed_of(*key, a, b),
                                     clusters=clusters)
    lo, hi, added = stats.widen(r, lo, hi, *stats.between_run(between_runs, key[0], a, b))
    return {"ratio": r, "ratio_lo": lo, "ratio_hi": hi, "half_width": stats.half_width(lo, hi, r),
            "verdict": stats.verdict(lo, hi, margin), "between_runs": added}


def ratio_pairs(impls: Iterable[str]) -> list[tuple[str, str]]:
    """Every pair a/b the tables give a ratio of among the implementations of one group: the
    sweep's (SWEEP_PAIRS), each variant over its base (variants.csv) and ours over each of its
    baselines (change.csv)."""
    present = set(impls)
    out = [(a, b) for a, b in SWEEP_PAIRS if a in present and b in present]
    for impl in sorted(present):
        base, name = config_variants.split(impl)
        if name is not None and base in present:
            out.append((impl, base))
        ours, revision = baseline.split(impl)
        if revision is not None and ours in present:
            out.append((ours, impl))
    return out


def _sweep_row(group: Group, kt_rows: list[dict[str, Any]], namespace: str, cache_mode: str,
               margin: float, between_runs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    op, shape = group.key
    per_round = round_values(group)
    t = {r["impl"]: r["kernel_time_us"] for r in kt_rows}
    operation = ops.get(op)
    row: dict[str, Any] = {"namespace": namespace, "op": op, "shape": shape, "cache_mode": cache_mode,
                           "bytes_moved": operation.bytes_moved(shape), "flops": operation.flops(shape),
                           "margin": margin, "rounds": group.record.get("rounds"), "gpus": 1,
                           "placements": len(set(placements(group) or [0]))}
    for impl in SWEEP_IMPLS:
        row[f"{impl}_us"] = t.get(impl)
    for a, b in SWEEP_PAIRS:
        r = ratio(per_round, a, b, (op, shape), margin, placements(group), between_runs)
        row[f"{a}_over_{b}"], row[f"{a}_over_{b}_lo"], row[f"{a}_over_{b}_hi"] = r["ratio"], r["ratio_lo"], r["ratio_hi"]
        row[f"{a}_vs_{b}"] = r["verdict"]
        if (a, b) == ("cuda", "triton"):
            row["half_width"], row["between_runs"] = r["half_width"], r["between_runs"]
    return row


def _variant_rows(group: Group, kt_rows: list[dict[str, Any]], descriptions: Mapping[str, str], namespace: str,
                  cache_mode: str, margin: float,
                  between_runs: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    op, shape = group.key
    per_round = round_values(group)
    t = {r["impl"]: r["kernel_time_us"] for r in kt_rows}
    out = []
    for impl in per_round:
        base, name = config_variants.split(impl)
        if name is None:
            continue
        r = ratio(per_round, impl, base, (op, shape), margin, placements(group), between_runs)
        out.append({"namespace": namespace, "op": op, "shape": shape, "variant": impl, "base": base,
                    "description": descriptions.get(name, ""), "cache_mode": cache_mode,
                    "base_us": t.get(base), "variant_us": t.get(impl), **r, "margin": margin})
    return out


def _change_rows(group: Group, kt_rows: list[dict[str, Any]], namespace: str, cache_mode: str,
                 margin: float, between_runs: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """change.csv rows of a group (CHANGE_COLUMNS): one per implementation '<impl>@<revision>' it
    captured beside '<impl>'."""
    op, shape = group.key
    per_round = round_values(group)
    t = {r["impl"]: r["kernel_time_us"] for r in kt_rows}
    commits, dates = group.record.get("baselines") or {}, group.record.get("baseline_dates") or {}
    dispatch = group.record.get("baseline_dispatch") or {}
    out = []
    for impl in per_round:
        ours, revision = baseline.split(impl)
        if revision is None:
            continue
        r = ratio(per_round, ours, impl, (op, shape), margin, placements(group), between_runs)
        out.append({"namespace": namespace, "op": op, "shape": shape, "impl": ours, "revision": revision,
                    "commit": commits.get(revision), "commit_date": dates.get(revision),
                    "dispatch": dispatch.get(revision), "cache_mode": cache_mode,
                    "current_us": t.get(ours), "baseline_us": t.get(impl), **r, "margin": margin})
    return out


def _span_rows(group: Group, namespace: str, cache_mode: str) -> list[dict[str, Any]]:
    span_facts = group.record.get("span") or {}
    out: list[dict[str, Any]] = []
    if group.spans.empty:
        return out
    for impl, grp in group.spans.groupby("impl", sort=False):
        v = grp["span_us"].astype(float)
        out.append({"namespace": namespace, "op": group.key[0], "shape": group.key[1], "impl": impl,
                    "cache_mode": cache_mode, "samples": int(v.size), "rounds": int(grp["round"].nunique()),
                    "span_mean_us": float(v.mean()), "span_median_us": float(v.median()),
                    "span_std_us": float(v.std(ddof=1)) if v.size > 1 else 0.0,
                    "span_min_us": float(v.min()), "span_max_us": float(v.max()),
                    "launch_path": (group.record.get("launch_paths") or {}).get(impl),
                    "exclusive": span_facts.get("exclusive"), "threads": span_facts.get("threads")})
    return out


def _check_rows(group: Group, namespace: str) -> list[dict[str, Any]]:
    return [{"namespace": namespace, **rec} for rec in (group.record.get("checks") or {}).values()]


def gpu_state_rows(group: Group, namespace: str) -> list[dict[str, Any]]:
    """gpu_state.csv rows of a group, every implementation captured there with the same row. The
    `during_*` columns, `flags` and `disturbed` are what NVML saw while this group ran (its
    record's `gpu.group`: the readings in its own windows, `during_extent` "group") where the
    record has it, else over the whole measurement session (`gpu.during`, "session": records from
    before the windows were noted); `session_flags` is what the session's watch flagged, whichever
    group it came with."""
    gpu = group.record.get("gpu") or {}
    before, after = gpu.get("before", {}) or {}, gpu.get("after", {}) or {}
    session = gpu.get("during", {}) or {}
    own = gpu.get("group")
    extent = "group" if isinstance(own, dict) else "session"
    during = own if isinstance(own, dict) else session
    flags = list(during.get("flags", []))
    return [{
        "namespace": namespace, "op": group.key[0], "shape": group.key[1], "impl": impl,
        "gpu_uuid": group.record.get("gpu_uuid"),
        "before_utilization_pct": before.get("utilization_pct"), "before_power_w": before.get("power_w"),
        "before_sm_clock_mhz": before.get("sm_clock_mhz"), "before_mem_clock_mhz": before.get("mem_clock_mhz"),
        "before_temperature_c": before.get("temperature_c"),
        "before_compute_processes": before.get("compute_processes"), "waited_s": gpu.get("waited_s"),
        "during_samples": during.get("samples"), "during_throttle_reasons": during.get("throttle_reasons"),
        "during_max_compute_processes": during.get("max_compute_processes"),
        "after_power_w": after.get("power_w"), "after_sm_clock_mhz": after.get("sm_clock_mhz"),
        "disturbed": bool(flags), "flags": "; ".join(flags),
        "before_power_limit_w": before.get("power_limit_w"), "before_max_sm_clock_mhz": before.get("max_sm_clock_mhz"),
        "during_busy_samples": during.get("busy_samples"), "during_busy_throttle_reasons": during.get("busy_throttle_reasons"),
        "during_busy_sm_clock_min_mhz": during.get("busy_sm_clock_min_mhz"),
        "during_busy_sm_clock_max_mhz": during.get("busy_sm_clock_max_mhz"),
        "during_busy_power_max_w": during.get("busy_power_max_w"),
        "during_extent": extent,
        "session_flags": "; ".join(session.get("flags", [])),
    } for impl in group.record.get("passed") or []]


def cross_check_rows(group: Group, kt_rows: list[dict[str, Any]], rtol: float, atol_us_per_kernel: float,
                     namespace: str, cache_mode: str) -> list[dict[str, Any]]:
    by_impl = {str(r["impl"]): r for r in row_dicts(group.graph)}
    return [compare(k, by_impl.get(str(k["impl"])), rtol, atol_us_per_kernel, namespace, cache_mode) for k in kt_rows]


# ----------------------------------------------------------------------------------- a namespace


TABLES = ("kernel_time_detail", "kernel_time", "rounds", "span", "check", "sweep", "variants", "change", "cross_check",
          "gpu_state")
"""The tables `namespace_tables` derives (tables/<name>.csv, or as harness.tables.table_files names them)."""

COLUMNS = {"kernel_time_detail": KERNEL_TIME_DETAIL_COLUMNS, "kernel_time": KERNEL_TIME_COLUMNS, "rounds": ROUND_COLUMNS,
           "span": SPAN_COLUMNS, "check": CHECK_COLUMNS, "sweep": SWEEP_COLUMNS, "variants": VARIANT_COLUMNS,
           "change": CHANGE_COLUMNS,
           "cross_check": CROSS_CHECK_COLUMNS, "gpu_state": GPU_STATE_COLUMNS}


def namespace_tables(groups: Iterable[Group], *, namespace: str, cache_mode: str,
                     descriptions: Mapping[str, Mapping[str, str]], ceilings: pd.DataFrame | None = None,
                     cross_check: Mapping[str, Any] | None = None,
                     margin: float = stats.MARGIN,
                     between_runs: Mapping[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every table of TABLES, as rows, from the groups of a namespace: the pipeline's tables step and
    `python -m harness verify` call this one function. `between_runs` is the config's
    `verdict.between_runs` (every ratio's interval is widened by it; harness.tables.stats)."""
    import pandas as pd

    ceil = ceiling_values(ceilings)
    cc = cross_check or {"rtol": 0.1, "atol_us_per_kernel": 1.5}
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    for group in groups:
        detail = _detail_rows(group)
        out["kernel_time_detail"] += detail
        kt = _kernel_time_rows(group, pd.DataFrame(detail, columns=KERNEL_TIME_DETAIL_COLUMNS), namespace, cache_mode,
                               ceil) if detail else []
        out["kernel_time"] += kt
        calls = group.record.get("calls_per_round") or {}
        out["rounds"] += [{"namespace": namespace, "op": group.key[0], "shape": group.key[1], "impl": impl, "round": r,
                           "calls": calls.get(impl), "kernel_time_us": value}
                          for impl, values in round_values(group).items() for r, value in enumerate(values)]
        out["span"] += _span_rows(group, namespace, cache_mode)
        out["check"] += _check_rows(group, namespace)
        out["sweep"].append(_sweep_row(group, kt, namespace, cache_mode, margin, between_runs))
        out["variants"] += _variant_rows(group, kt, descriptions.get(group.key[0], {}), namespace, cache_mode, margin,
                                         between_runs)
        out["change"] += _change_rows(group, kt, namespace, cache_mode, margin, between_runs)
        out["cross_check"] += cross_check_rows(group, kt, float(cc["rtol"]), float(cc["atol_us_per_kernel"]),
                                               namespace, cache_mode)
        out["gpu_state"] += gpu_state_rows(group, namespace)
    return out


def frames(tables: Mapping[str, list[dict[str, Any]]]) -> dict[str, pd.DataFrame]:
    """The rows of `namespace_tables` as DataFrames with exactly each table's columns."""
    import pandas as pd

    out = {}
    for name, rows in tables.items():
        cols = COLUMNS[name]
        frame = pd.DataFrame(list(rows))
        for c in cols:
            if c not in frame.columns:
                frame[c] = pd.NA
        out[name] = frame[cols]
    return out


# ----------------------------------------------------------------------------------- helpers


def same_gpu(a: Any, b: Any) -> bool:
    """Whether two rows' GPUs may be compared: the same UUID, or one not recorded (older tables)."""
    def uuid(row: Any) -> str | None:
        value = row.get("gpu_uuid") if isinstance(row, Mapping) else None
        return None if value is None or (isinstance(value, float) and math.isnan(value)) or value == "" else str(value)

    ua, ub = uuid(a), uuid(b)
    return ua is None or ub is None or ua == ub


def spread(row: Mapping[str, Any]) -> tuple[float, float] | None:
    """The kernel time per call scaled by the spread of its main kernel's launches (time·min/median,
    time·max/median): the envelope tables written before the rounds had (kept to read them)."""
    try:
        kt, lo, med, hi = (float(row[k]) for k in ("kernel_time_us", "main_min_us", "main_median_us", "main_max_us"))
    except (KeyError, TypeError, ValueError):
        return None
    if not med > 0:
        return None
    return kt * lo / med, kt * hi / med


def envelope_interval(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> tuple[float | None, float | None]:
    """The min-max envelope of a/b from two spreads, for tables without rounds."""
    sa, sb = (spread(a) if a is not None else None), (spread(b) if b is not None else None)
    if sa is None or sb is None or not sb[0] > 0:
        return None, None
    return sa[0] / sb[1], sa[1] / sb[0]
