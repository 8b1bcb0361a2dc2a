"""harness.tables.nsys: the SQLite export reader must print what `nsys stats` prints.

* The real H200 export must give, byte for byte, the CSVs that `nsys stats` printed for it.
* Synthetic exports (tests/nsys_exports.py) cover the schema variants of nsys 2022.4 .. 2026.x;
  their figures are checked against a plain-Python model of the nsys rules computed from the rows
  the test inserted (no SQL, no expected numbers written down).
* Bad input ends with one sentence on stderr and exit status 2; so do hand-made (hostile) exports
  (views, virtual tables, text where nsys writes integer times, reads that would run away), and
  within seconds.
* Names are printed with control characters escaped.
* range_launches attributes launches to the prefix ranges by the rules of nvtx_kern_sum.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from harness.__main__ import main as harness_main
from harness.tables import nsys

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nsys_exports import (  # noqa: E402
    Call, ExportBuilder, Kernel, Range, add_schema_row, global_tid, run_sql, set_schema_sql, store_as_text,
)
import nsys_fixtures  # noqa: E402

REAL = nsys_fixtures.export("h200-torch-layer-norm")
REAL_KERN_CSV = nsys_fixtures.stats("h200-torch-layer-norm", "cuda_gpu_kern_sum")
REAL_NVTX_CSV = nsys_fixtures.stats("h200-torch-layer-norm", "nvtx_kern_sum")


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | os.PathLike[str]) -> tuple[int, str, str]:
    rc = harness_main(["nsys", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


# ----------------------------------------------------------------------------------------------
# The real export against the CSVs nsys printed


def test_fixture_has_no_environment_rows() -> None:
    conn = sqlite3.connect(f"file:{REAL}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT count(*) FROM META_DATA_CAPTURE WHERE name LIKE '%ENV%'").fetchone()
    finally:
        conn.close()
    assert rows[0] == 0


def test_real_kern_sum_csv_is_byte_identical(capsys: pytest.CaptureFixture[str]) -> None:
    expected = REAL_KERN_CSV.read_text()
    assert nsys.format_csv(nsys.kern_sum(REAL), nsys.KERN_SUM_COLUMNS) == expected
    rc, out, err = run_cli(capsys, "kern-sum", REAL, "--format", "csv")
    assert (rc, out, err) == (0, expected, "")


def test_real_nvtx_kern_sum_csv_is_byte_identical(capsys: pytest.CaptureFixture[str]) -> None:
    expected = REAL_NVTX_CSV.read_text()
    assert nsys.format_csv(nsys.nvtx_kern_sum(REAL), nsys.NVTX_KERN_SUM_COLUMNS) == expected
    rc, out, err = run_cli(capsys, "nvtx-kern-sum", REAL, "--format=csv")
    assert (rc, out, err) == (0, expected, "")


def test_real_cli_as_a_subprocess() -> None:
    proc = subprocess.run([sys.executable, "-m", "harness", "nsys", "kern-sum", str(REAL), "--format", "csv"],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == REAL_KERN_CSV.read_text()


def test_real_range_kernels_is_the_nvtx_kern_sum_row() -> None:
    with open(REAL_NVTX_CSV, newline="") as fh:
        iters = [r for r in csv.DictReader(fh) if r["NVTX Range"] == ":iters"]
    got = nsys.range_kernels(REAL, "iters")
    assert len(got) == len(iters) >= 1
    for row, k in zip(iters, got):
        assert k["kernel"] == row["Kernel Name"]
        assert k["instances"] == int(row["Kern Inst"])
        assert k["range_instances"] == int(row["NVTX Inst"])
        assert k["total_ns"] == int(row["Total Time (ns)"])
        assert k["mean_ns"] == float(row["Avg (ns)"])
        assert k["median_ns"] == float(row["Med (ns)"])
        assert k["min_ns"] == int(row["Min (ns)"])
        assert k["max_ns"] == int(row["Max (ns)"])
        assert k["stddev_ns"] == float(row["StdDev (ns)"])
    # launch geometry, read straight from the kernel table
    conn = sqlite3.connect(f"file:{REAL}?mode=ro", uri=True)
    try:
        geo = conn.execute("""
            SELECT DISTINCT gridX || 'x' || gridY || 'x' || gridZ, blockX || 'x' || blockY || 'x' || blockZ,
                   registersPerThread, staticSharedMemory, dynamicSharedMemory, s.value
            FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName
            JOIN StringIds s ON s.id = k.shortName WHERE d.value = ?""", [got[0]["kernel"]]).fetchall()
    finally:
        conn.close()
    assert len(geo) == 1
    assert (got[0]["grid"], got[0]["block"], got[0]["registers"], got[0]["static_smem"],
            got[0]["dynamic_smem"], got[0]["short_name"]) == geo[0]


def test_real_export_info() -> None:
    conn = sqlite3.connect(f"file:{REAL}?mode=ro", uri=True)
    try:
        version = conn.execute("SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_PRODUCT_VERSION'").fetchone()[0]
        gpu = conn.execute("SELECT name, uuid FROM TARGET_INFO_GPU").fetchone()
    finally:
        conn.close()
    info = nsys.export_info(REAL)
    assert info["nsys_version"] == version
    assert (info["gpu_name"], info["gpu_uuid"]) == gpu
    assert [(g["name"], g["uuid"]) for g in info["gpus"]] == [gpu]


def test_table_format_is_aligned(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_cli(capsys, "nvtx-kern-sum", REAL)  # table is the default
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split("  ")[0] == "NVTX Range"
    assert set(lines[1].replace(" ", "")) == {"-"}
    rows = nsys.nvtx_kern_sum(REAL)
    assert len(lines) == 2 + len(rows)
    # every column starts at the same offset on every line: the rule's dashes mark the columns
    starts = [i for i, ch in enumerate(lines[1]) if ch == "-" and (i == 0 or lines[1][i - 1] == " ")]
    assert len(starts) == len(nsys.NVTX_KERN_SUM_COLUMNS)
    for row, line in zip(rows, lines[2:]):
        assert line.endswith(row["Kernel Name"])
        assert line[starts[-1]:] == row["Kernel Name"]
        assert f"{row['Total Time (ns)']:,}" in line


# ----------------------------------------------------------------------------------------------
# A plain-Python model of the nsys rules, for the synthetic exports


def _stats(durs: list[int]) -> dict[str, Any]:
    return {
        "total": sum(durs), "n": len(durs), "avg": statistics.fmean(durs),
        "med": float(statistics.median(durs)), "min": min(durs), "max": max(durs),
        "std": statistics.stdev(durs) if len(durs) > 1 else 0.0,
    }


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def model_kern_sum(b: ExportBuilder) -> list[dict[str, Any]]:
    by_name: dict[str, list[int]] = defaultdict(list)
    for k in b.kernels:
        by_name[_text(k.name)].append(k.dur)
    grand = sum(k.dur for k in b.kernels)
    rows = []
    for name, durs in by_name.items():
        s = _stats(durs)
        rows.append({"Time (%)": 100.0 * s["total"] / grand, "Total Time (ns)": s["total"],
                     "Instances": s["n"], "Avg (ns)": s["avg"], "Med (ns)": s["med"],
                     "Min (ns)": s["min"], "Max (ns)": s["max"], "StdDev (ns)": s["std"], "Name": name})
    rows.sort(key=lambda r: (-r["Total Time (ns)"], r["Instances"], r["Name"].encode()))
    return rows


def _range_name(b: ExportBuilder, r: Range) -> str:
    domain = ""
    if r.domain is not None:
        created = [d for d in b.domains if d.domain == r.domain and d.pid == r.pid]
        if created:
            domain = _text(min(created, key=lambda d: d.start).name)
    return f"{domain}:{_text(r.text)}"


def _pairs(b: ExportBuilder) -> list[tuple[Kernel, Call | None, Range | None]]:
    """(kernel, its launch call, one containing range) for every containing range; range None
    when none contains it (and call None when it has no runtime record)."""
    stamps = [t for r in b.ranges for t in (r.start, r.end) if t is not None]
    last = max(stamps, default=0)  # every range has a start: only unused when there are none
    ranges = b.ranges if b.with_nvtx else []
    out: list[tuple[Kernel, Call | None, Range | None]] = []
    for k in b.kernels:
        calls = [c for c in b.calls if c.pid == k.pid and c.corr == k.corr] if b.with_runtime else []
        assert len(calls) <= 1
        call = calls[0] if calls else None
        inside = [r for r in ranges if call is not None and r.end_tid is None
                  and (r.pid, r.tid) == (call.pid, call.tid)
                  and r.start <= call.start and call.end <= (r.end if r.end is not None else last)]
        out += [(k, call, r) for r in inside] or [(k, call, None)]
    return out


def model_nvtx_kern_sum(b: ExportBuilder) -> list[dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[tuple[Kernel, Range | None]]] = defaultdict(list)
    for k, call, r in _pairs(b):
        name = _range_name(b, r) if r else None
        style = {"pushpop": "PushPop", "startend": "StartEnd"}[r.kind] if r else None
        key = (call.pid if call else None, call.tid if call else None, name, style, _text(k.name))
        groups[key].append((k, r))
    rows = []
    for (pid, tid, name, style, kname), members in groups.items():
        s = _stats([k.dur for k, _ in members])
        rows.append({"NVTX Range": name, "Style": style, "PID": pid, "TID": tid,
                     "NVTX Inst": len({id(r) for _, r in members if r is not None}),
                     "Kern Inst": len({id(k) for k, _ in members}), "Total Time (ns)": s["total"],
                     "Avg (ns)": s["avg"], "Med (ns)": s["med"], "Min (ns)": s["min"], "Max (ns)": s["max"],
                     "StdDev (ns)": s["std"], "Kernel Name": kname})

    def none_first(v: Any) -> tuple[int, Any]:
        return (0, 0) if v is None else (1, v.encode() if isinstance(v, str) else v)
    rows.sort(key=lambda r: (none_first(r["NVTX Range"]), none_first(r["PID"]), none_first(r["TID"]),
                             -r["Total Time (ns)"], none_first(r["Style"]), r["Kernel Name"].encode()))
    return rows


ROUNDED = {"Time (%)", "Avg (ns)", "Med (ns)", "StdDev (ns)"}


def assert_rows(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """Exact equality, except the figures nsys rounds to one decimal: those must be the model's
    exact value rounded (within half a unit of the last place)."""
    assert [list(r) for r in got] == [list(r) for r in want]
    for g, w in zip(got, want):
        for col, value in w.items():
            if col in ROUNDED:
                assert g[col] == pytest.approx(w[col], abs=0.05 + 1e-9), (col, g, w)
                assert round(g[col], 1) == g[col]
            else:
                assert g[col] == value, (col, g, w)


def assert_reports_match_model(path: Path, b: ExportBuilder) -> None:
    assert_rows(nsys.kern_sum(path), model_kern_sum(b))
    assert_rows(nsys.nvtx_kern_sum(path), model_nvtx_kern_sum(b))


def basic_export(**switches: Any) -> ExportBuilder:
    """One process, two threads, a push/pop range with a nested one, a start/end range, kernels
    inside and outside, a single-instance kernel, two GPUs."""
    b = ExportBuilder(**switches)
    b.gpus = [{"id": 0, "name": "NVIDIA H200", "uuid": "uuid-0"}, {"id": 1, "name": "NVIDIA H200", "uuid": "uuid-1"}]
    pid, main, worker = 4242, 4242, 4250
    b.launch(pid, main, 1_000, 1_500, 700, "warmup_kernel(float *)")
    b.add_range(10_000, 90_000, "iters", pid, main)
    b.add_range(20_000, 40_000, "inner", pid, main)
    for i, dur in enumerate([1200, 1250, 1190, 1400, 1211, 1305]):
        b.launch(pid, main, 11_000 + i * 12_000, 12_000 + i * 12_000, dur, "void gemm<float, 128>(const float *, float *, int)",
                 short="gemm", device=i % 2)
    for i, dur in enumerate([333, 350, 333]):
        b.launch(pid, main, 14_000 + i * 20_000, 15_000 + i * 20_000, dur, "reduce_kernel", grid=(64 + i, 1, 1))
    b.launch(pid, main, 95_000, 95_500, 999, "tail_kernel")  # after every range: outside
    b.add_range(50_000, 70_000, "async", pid, worker, kind="startend")
    b.launch(pid, worker, 51_000, 52_000, 4321, "worker_kernel")  # single instance: StdDev 0.0
    b.launch(pid, worker, 69_500, 71_000, 100, "worker_kernel")  # call ends after the range: outside
    return b


# ----------------------------------------------------------------------------------------------
# Schema variants


@pytest.mark.parametrize("meta_table", ["META_DATA_EXPORT", "EXPORT_META_DATA"])
def test_metadata_table_names(tmp_path: Path, meta_table: str) -> None:
    b = basic_export(meta_table=meta_table, version="2022.4.2.1")
    path = b.write(tmp_path / "e.sqlite")
    info = nsys.export_info(path)
    assert info["nsys_version"] == "2022.4.2.1"
    assert info["metadata_table"] == meta_table
    assert [g["uuid"] for g in info["gpus"]] == [g["uuid"] for g in b.gpus]
    assert_reports_match_model(path, b)


@pytest.mark.parametrize("variant", [
    {},
    {"omit_kernel_columns": ("greenContextId",)},
    {"omit_kernel_columns": ("greenContextId", "mangledName", "sharedMemoryLimitConfig", "graphNodeId")},
    {"reverse_kernel_columns": True},
    {"omit_kernel_columns": ("globalPid",)},
    {"omit_kernel_columns": ("shortName", "gridX", "registersPerThread", "dynamicSharedMemory")},
    {"nvtx_text": "textid"},
    {"nvtx_text": "textid", "omit_nvtx_columns": ("jsonText", "jsonTextId", "binaryData")},
    {"omit_nvtx_columns": ("textId", "endGlobalTid")},
    {"with_enum": False},
    {"with_gpus": False},
], ids=lambda v: ",".join(f"{k}={v[k]}" for k in v) or "default")
def test_schema_variants_give_the_model_figures(tmp_path: Path, variant: dict[str, Any]) -> None:
    b = basic_export(**variant)
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    rows = nsys.nvtx_kern_sum(path)
    assert {r["NVTX Range"] for r in rows} == {None, ":iters", ":inner", ":async"}
    assert {r["Style"] for r in rows if r["NVTX Range"] == ":async"} == {"StartEnd"}
    if not variant.get("with_gpus", True):
        assert nsys.export_info(path)["gpus"] == []


def test_reports_differ_when_the_rules_are_broken(tmp_path: Path) -> None:
    """The model comparison can fail: a kernel moved out of its range changes the figures."""
    b = basic_export()
    path = b.write(tmp_path / "e.sqlite")
    b.calls[1].start -= 5_000  # the model now thinks the first gemm launch started before `iters`
    with pytest.raises(AssertionError):
        assert_rows(nsys.nvtx_kern_sum(path), model_nvtx_kern_sum(b))


def test_missing_optional_kernel_columns_leave_range_kernels_fields_empty(tmp_path: Path) -> None:
    b = basic_export(omit_kernel_columns=("shortName", "gridX", "registersPerThread"))
    path = b.write(tmp_path / "e.sqlite")
    got = nsys.range_kernels(path, "iters")
    assert [k["short_name"] for k in got] == [k["kernel"] for k in got]  # falls back to the full name
    assert {k["grid"] for k in got} == {None} and {k["registers"] for k in got} == {None}
    assert {k["block"] for k in got} == {"256x1x1"}


def test_without_rtree_module_the_figures_are_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite builds without the R*Tree module use an indexed table for the containment join."""
    b = basic_export()
    b.add_range(0, None, "outer_open", 4242, 4242)
    path = b.write(tmp_path / "e.sqlite")
    with_rtree = nsys.nvtx_kern_sum(path), nsys.range_kernels(path, "iters")
    monkeypatch.setattr(nsys._Export, "_rtree_available", lambda self: False)
    assert_reports_match_model(path, b)
    assert (nsys.nvtx_kern_sum(path), nsys.range_kernels(path, "iters")) == with_rtree


def test_range_boundaries_are_exact_at_large_timestamps(tmp_path: Path) -> None:
    """Containment is inclusive and exact to the nanosecond even where the R*Tree's 32-bit float
    boxes cannot tell the timestamps apart (ranges hours apart, timestamps near 1e15 ns)."""
    t0 = 10**15
    b = ExportBuilder()
    b.add_range(t0 - 3_600 * 10**9, t0 - 3_600 * 10**9 + 10, "early", 1, 1)  # an hour earlier
    b.add_range(t0, t0 + 10_000, "r", 1, 1)
    b.launch(1, 1, t0, t0 + 50, 5, "on_both_edges", call_dur=10_000)      # [t0, t0+10000]: inside
    b.launch(1, 1, t0 - 1, t0 + 60, 6, "starts_1ns_early", call_dur=500)   # outside
    b.launch(1, 1, t0 + 9_500, t0 + 70, 7, "ends_1ns_late", call_dur=501)  # outside
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    assert [k["kernel"] for k in nsys.range_kernels(path, "r")] == ["on_both_edges"]


def test_kern_sum_ties_sort_by_instances_then_name(tmp_path: Path) -> None:
    b = ExportBuilder()
    b.launch(1, 1, 0, 10, 1000, "z_one_launch")      # total 1000 in 1 instance
    b.launch(1, 1, 2000, 2010, 500, "b_two_launches")  # total 1000 in 2 instances
    b.launch(1, 1, 4000, 4010, 500, "b_two_launches")
    b.launch(1, 1, 6000, 6010, 700, "m1")
    b.launch(1, 1, 8000, 8010, 700, "m0")
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    assert [r["Name"] for r in nsys.kern_sum(path)] == ["z_one_launch", "b_two_launches", "m0", "m1"]


def test_an_average_exactly_at_a_tie_rounds_away_from_zero_as_nsys_prints_it(tmp_path: Path) -> None:
    """Four launches of 2733, 2733, 2733 and 2734 ns average exactly 2733.25 (a binary tie): nsys
    stats printed 2733.3 for such a layer norm row on the H200, where Python's round() gives 2733.2.
    A decimal tie that is no binary one (7653.45, below it in binary) rounds down: the pipeline
    fixtures hold those."""
    b = ExportBuilder()
    b.add_range(0, 100_000, "capture", 1, 1)
    for i, dur in enumerate((2733, 2733, 2733, 2734)):
        b.launch(1, 1, 1_000 + 10_000 * i, 1_010 + 10_000 * i, dur, "tie")
    b.launch(1, 1, 50_000, 50_010, 5_000, "other")
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    (tie,) = [r for r in nsys.kern_sum(path) if r["Name"] == "tie"]
    assert (tie["Avg (ns)"], tie["Med (ns)"]) == (2733.3, 2733.0)
    (inside,) = [r for r in nsys.nvtx_kern_sum(path) if r["Kernel Name"] == "tie" and r["NVTX Range"]]
    assert inside["Avg (ns)"] == 2733.3


def test_event_type_ids_come_from_the_enum_table(tmp_path: Path) -> None:
    """Ids are looked up by name in ENUM_NSYS_EVENT_TYPE; an export numbering them differently
    (push/pop as 34 here, start/end as 33) is read by name, not by the usual numbers."""
    ids = {"NvtxMark": 20, "NvtxPushPopRange": 34, "NvtxStartEndRange": 33, "NvtxtPushPopRange": 70,
           "NvtxtStartEndRange": 71, "NvtxDomainCreate": 75}
    b = basic_export(event_types=ids)
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)


def test_domains_name_ranges_per_process(tmp_path: Path) -> None:
    b = ExportBuilder(nvtx_text="textid")
    b.add_domain(7, "Torch", pid=100, tid=100, start=5)
    b.add_domain(7, "Other", pid=200, tid=201, start=5)  # same domain id, another process
    b.add_domain(8, "Late", pid=100, tid=100, start=50)
    b.add_domain(8, "Later", pid=100, tid=101, start=60)  # created twice: the first name counts
    b.add_range(1_000, 9_000, "step", 100, 100, domain=7)
    b.add_range(1_000, 9_000, "step", 200, 201, domain=7)
    b.add_range(1_000, 9_000, "step", 100, 100, domain=8)
    b.add_range(1_000, 9_000, "step", 100, 100)  # default domain
    b.launch(100, 100, 2_000, 2_500, 500, "k")
    b.launch(200, 201, 2_000, 2_600, 600, "k")
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    names = {(r["PID"], r["NVTX Range"]) for r in nsys.nvtx_kern_sum(path)}
    assert names == {(100, "Torch:step"), (100, "Late:step"), (100, ":step"), (200, "Other:step")}
    # range_kernels matches the text without the domain, across processes and domains
    got = nsys.range_kernels(path, "step")
    assert [(k["kernel"], k["instances"], k["range_instances"]) for k in got] == [("k", 2, 4)]


def test_several_processes_reuse_correlation_ids(tmp_path: Path) -> None:
    """Correlation ids restart in every process: each kernel must join its own process's call."""
    b = ExportBuilder()
    b.add_range(0, 10_000, "a", pid=1, tid=1)
    b.add_range(20_000, 30_000, "b", pid=2, tid=2)
    k1 = b.launch(1, 1, 1_000, 50_000, 800, "kern", device=0)   # corr 1 in pid 1, inside `a`
    k2 = b.launch(2, 2, 21_000, 60_000, 900, "kern", device=1)  # corr 1 in pid 2, inside `b`
    assert k1.corr == k2.corr
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    rows = nsys.nvtx_kern_sum(path)
    assert [(r["NVTX Range"], r["PID"], r["TID"], r["Total Time (ns)"]) for r in rows] == [
        (":a", 1, 1, 800), (":b", 2, 2, 900)]


def test_kernels_without_runtime_record(tmp_path: Path) -> None:
    b = basic_export()
    b.kernels.append(Kernel(5_000, 5_300, "orphan_kernel", pid=4242, corr=None))
    b.kernels.append(Kernel(6_000, 6_100, "orphan_kernel", pid=4242, corr=999))  # no such call
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    orphan = [r for r in nsys.nvtx_kern_sum(path) if r["Kernel Name"] == "orphan_kernel"]
    assert [(r["NVTX Range"], r["PID"], r["TID"], r["Kern Inst"]) for r in orphan] == [(None, None, None, 2)]
    text = nsys.format_csv(orphan, nsys.NVTX_KERN_SUM_COLUMNS)
    assert text.splitlines()[1].startswith(",,,,0,2,")


def test_cuda_graph_kernels_follow_their_graph_launch(tmp_path: Path) -> None:
    b = ExportBuilder()
    b.add_range(1_000, 5_000, "graph_step", 9, 9)
    b.graph_launch(9, 9, 2_000, [(10_000, 300, "node_a"), (10_400, 310, "node_b"), (10_800, 305, "node_a")])
    b.graph_launch(9, 9, 6_000, [(20_000, 299, "node_a"), (20_400, 320, "node_b"), (20_800, 301, "node_a")])
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    got = {k["kernel"]: k["instances"] for k in nsys.range_kernels(path, "graph_step")}
    assert got == {"node_a": 2, "node_b": 1}


def test_open_ranges_last_until_the_last_range_timestamp(tmp_path: Path) -> None:
    b = ExportBuilder()
    b.add_range(1_000, None, "never_popped", 3, 3)
    b.add_range(2_000, 50_000, "other", 3, 4)
    b.launch(3, 3, 40_000, 41_000, 111, "before_last")   # inside: call ends before 50_000
    b.launch(3, 3, 60_000, 61_000, 222, "after_last")    # after the last range timestamp
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    assert [k["kernel"] for k in nsys.range_kernels(path, "never_popped")] == ["before_last"]


def test_ranges_ending_on_another_thread_are_ignored(tmp_path: Path) -> None:
    b = ExportBuilder()
    b.add_range(1_000, 9_000, "handoff", 5, 5, kind="startend", end_tid=6)
    b.add_range(1_000, 9_000, "kept", 5, 5, kind="startend")
    b.launch(5, 5, 2_000, 2_100, 50, "k")
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    assert {r["NVTX Range"] for r in nsys.nvtx_kern_sum(path)} == {":kept"}
    with pytest.raises(nsys.NsysExportError, match="end on another thread"):
        nsys.range_kernels(path, "handoff")


def test_nested_ranges_of_the_same_name_count_as_nsys_counts(tmp_path: Path) -> None:
    """nsys sums durations over (range, kernel) pairs but counts distinct kernels."""
    b = ExportBuilder()
    b.add_range(0, 10_000, "loop", 1, 1)
    b.add_range(1_000, 9_000, "loop", 1, 1)
    b.launch(1, 1, 2_000, 2_000, 100, "k")
    b.launch(1, 1, 9_200, 9_600, 300, "k", call_dur=500)  # only in the outer one
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    (row,) = nsys.nvtx_kern_sum(path)
    assert (row["NVTX Inst"], row["Kern Inst"], row["Total Time (ns)"]) == (2, 2, 100 + 100 + 300)


def test_without_nvtx_table(tmp_path: Path) -> None:
    b = basic_export(with_nvtx=False)
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    assert {r["NVTX Range"] for r in nsys.nvtx_kern_sum(path)} == {None}
    with pytest.raises(nsys.NsysExportError, match="-t nvtx"):
        nsys.range_kernels(path, "iters")


def test_without_runtime_table(tmp_path: Path) -> None:
    b = basic_export(with_runtime=False)
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    assert {(r["NVTX Range"], r["PID"], r["TID"]) for r in nsys.nvtx_kern_sum(path)} == {(None, None, None)}


def test_range_kernels_figures_and_geometry(tmp_path: Path) -> None:
    b = basic_export()
    path = b.write(tmp_path / "e.sqlite")
    got = nsys.range_kernels(path, "iters")
    assert [k["kernel"] for k in got] == ["void gemm<float, 128>(const float *, float *, int)", "reduce_kernel"]
    for k in got:
        mine = [x for x in b.kernels if x.name == k["kernel"] and 10_000 <= x.start - 1_000 and x.start < 90_000]
        s = _stats([x.dur for x in mine])
        assert (k["instances"], k["total_ns"], k["min_ns"], k["max_ns"]) == (s["n"], s["total"], s["min"], s["max"])
        for key, ref in (("mean_ns", "avg"), ("median_ns", "med"), ("stddev_ns", "std")):
            assert k[key] == pytest.approx(s[ref], abs=0.05 + 1e-9)
        assert k["grid"] == ";".join(sorted({"x".join(map(str, x.grid)) for x in mine}))
        assert k["block"] == "256x1x1" and k["registers"] == 32 and k["range_instances"] == 1
    assert got[1]["grid"] == "64x1x1;65x1x1;66x1x1"
    assert got[0]["short_name"] == "gemm"
    assert set(got[0]) == set(nsys.RANGE_KERNEL_KEYS)
    with pytest.raises(nsys.NsysExportError, match="no NVTX push/pop or start/end range named 'nope'"):
        nsys.range_kernels(path, "nope")


def test_text_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = ExportBuilder()
    b.add_range(0, 10_000, b"caf\xe9 \xff range", 1, 1)
    b.launch(1, 1, 1_000, 1_000, 10, b"kern\xc3\x28el")
    b.launch(1, 1, 2_000, 2_000, 12, "fine_kernel")
    path = b.write(tmp_path / "e.sqlite")
    assert_reports_match_model(path, b)
    rc, out, err = run_cli(capsys, "nvtx-kern-sum", path, "--format", "csv")
    assert rc == 0 and err == ""
    assert ":caf\ufffd \ufffd range" in out and "kern\ufffd(el" in out


# ----------------------------------------------------------------------------------------------
# Bad input: one sentence on stderr, exit status 2, no traceback


def assert_one_sentence(rc: int, out: str, err: str, *fragments: str) -> None:
    assert rc == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].endswith("."), err
    for fragment in fragments:
        assert fragment in lines[0], err


@pytest.mark.parametrize("command", ["kern-sum", "nvtx-kern-sum"])
def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    missing = tmp_path / "nope.sqlite"
    assert_one_sentence(*run_cli(capsys, command, missing), str(missing), "does not exist")


def test_not_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "report.nsys-rep"
    path.write_bytes(b"QDSTRM\x00\x01 not a database at all" * 10)
    assert_one_sentence(*run_cli(capsys, "kern-sum", path), "is not an SQLite file", "nsys export --type sqlite")


def test_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.sqlite"
    path.write_bytes(b"")
    assert_one_sentence(*run_cli(capsys, "kern-sum", path), "is empty")


def test_sqlite_but_not_nsys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    conn.execute("INSERT INTO customers VALUES (1, 'x')")
    conn.commit()
    conn.close()
    assert_one_sentence(*run_cli(capsys, "nvtx-kern-sum", path), "not an nsys export")


@pytest.mark.parametrize("command", ["kern-sum", "nvtx-kern-sum"])
def test_export_without_kernel_table(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    b = basic_export(with_kernels=False)
    path = b.write(tmp_path / "nokernels.sqlite")
    assert_one_sentence(*run_cli(capsys, command, path), "CUPTI_ACTIVITY_KIND_KERNEL", "-t cuda")
    with pytest.raises(nsys.NsysExportError, match="-t cuda"):
        nsys.range_kernels(path, "iters")


def test_truncated_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "truncated.sqlite"
    data = REAL.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert_one_sentence(*run_cli(capsys, "kern-sum", path), "is truncated")
    path.write_bytes(data[:60])
    assert_one_sentence(*run_cli(capsys, "kern-sum", path), "is truncated")


def test_corrupt_pages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Header intact, size right, table pages overwritten: a read error becomes one sentence."""
    path = tmp_path / "corrupt.sqlite"
    shutil.copyfile(REAL, path)
    conn = sqlite3.connect(path)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
    conn.close()
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(b"\xa5" * page_size)
    assert_one_sentence(*run_cli(capsys, "kern-sum", path), "could not be read", "truncated or corrupt")


def test_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_sentence(*run_cli(capsys, "kern-sum", tmp_path), "is not a file")


@pytest.mark.parametrize("args, fragment", [
    ([], "a command and an export file are required"),
    (["frobnicate", "x.sqlite"], "unknown nsys command"),
    (["kern-sum"], "exactly one export file"),
    (["kern-sum", "a.sqlite", "b.sqlite"], "exactly one export file"),
    (["kern-sum", "a.sqlite", "--format", "json"], "unknown format 'json'"),
    (["kern-sum", "a.sqlite", "--format"], "--format needs a value"),
    (["kern-sum", "a.sqlite", "--bogus"], "unknown option '--bogus'"),
])
def test_bad_arguments(capsys: pytest.CaptureFixture[str], args: list[str], fragment: str) -> None:
    assert_one_sentence(*run_cli(capsys, *args), fragment)


def test_open_export_is_read_only(tmp_path: Path) -> None:
    path = basic_export().write(tmp_path / "e.sqlite")
    before = path.read_bytes()
    db = nsys.open_export(path)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        db.execute("CREATE TABLE main.x (a)")
    db.close()
    nsys.kern_sum(path)
    nsys.nvtx_kern_sum(path)
    nsys.range_kernels(path, "iters")
    assert path.read_bytes() == before


def test_global_tid_packing_matches_the_real_export() -> None:
    """The synthetic exports pack ids the way the real one does."""
    conn = sqlite3.connect(f"file:{REAL}?mode=ro", uri=True)
    try:
        gtid, gpid = conn.execute("""
            SELECT r.globalTid, k.globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL k
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId LIMIT 1""").fetchone()
    finally:
        conn.close()
    with open(REAL_NVTX_CSV, newline="") as fh:
        row = next(csv.DictReader(fh))
    assert gtid == global_tid(int(row["PID"]), int(row["TID"]))
    assert gpid == gtid - int(row["TID"])


def test_csv_quoting_and_nulls() -> None:
    rows = [{"a": None, "b": 'say "hi", twice', "c": 1.0, "d": 12}]
    text = nsys.format_csv(rows, ["a", "b", "c", "d"])
    assert text == 'a,b,c,d\n,"say ""hi"", twice",1.0,12\n'
    assert list(csv.reader(io.StringIO(text)))[1] == ["", 'say "hi", twice', "1.0", "12"]


# Every real export in tests/fixtures/nsys/ with what `nsys stats` printed for it beside it: the
# shared fixture and captures the pipeline itself made on the H200 (nsys 2025.3; two of them have
# averages at exact .x5 ties, where SQLite's round() and nsys's disagree).
REAL_EXPORTS = [n for n in nsys_fixtures.names() if nsys_fixtures.stats(n, "cuda_gpu_kern_sum").exists()]


def test_every_committed_export_is_compared_with_nsys_stats() -> None:
    assert REAL_EXPORTS and REAL_EXPORTS == nsys_fixtures.names()


@pytest.mark.parametrize("name", REAL_EXPORTS)
@pytest.mark.parametrize(("command", "report"), [("kern-sum", "cuda_gpu_kern_sum"), ("nvtx-kern-sum", "nvtx_kern_sum")])
def test_every_real_export_matches_nsys_stats(name: str, command: str, report: str, capsys: pytest.CaptureFixture[str]) -> None:
    expected = nsys_fixtures.stats(name, report).read_text()
    rc, out, err = run_cli(capsys, command, nsys_fixtures.export(name), "--format", "csv")
    assert (rc, err) == (0, "")
    assert out == expected


@pytest.mark.parametrize("name", [n for n in REAL_EXPORTS if "pipeline" in n])
def test_pipeline_range_kernels_are_the_capture_row_of_nsys_stats(name: str) -> None:
    import csv

    export = nsys_fixtures.export(name)
    rows = [r for r in csv.DictReader(nsys_fixtures.stats(name, "nvtx_kern_sum").open()) if r["NVTX Range"] == ":capture"]
    got = nsys.range_kernels(export, "capture")
    assert len(got) == len(rows) == 1
    assert got[0]["kernel"] == rows[0]["Kernel Name"]
    assert got[0]["instances"] == int(rows[0]["Kern Inst"]) == 100
    assert got[0]["total_ns"] == int(rows[0]["Total Time (ns)"])
    assert got[0]["median_ns"] == float(rows[0]["Med (ns)"])


# ----------------------------------------------------------------------------------------------
# Hand-made (hostile) exports: refused in one sentence, within seconds

KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
QUICKLY_S = 20.0  # generous: the point is that nothing hangs


def assert_refused(path: Path, capsys: pytest.CaptureFixture[str], commands: list[str], *fragments: str) -> None:
    """Every CLI command, and the API functions that read what it reads, end in one sentence,
    each within QUICKLY_S."""
    api: dict[str, list[Callable[[Path], list[dict[str, Any]]]]] = {
           "kern-sum": [nsys.kern_sum],
           "nvtx-kern-sum": [nsys.nvtx_kern_sum, lambda p: nsys.range_kernels(p, "iters"),
                             lambda p: nsys.range_launches(p, "it")]}
    for command in commands:
        t0 = time.monotonic()
        assert_one_sentence(*run_cli(capsys, command, path), str(path), *fragments)
        assert time.monotonic() - t0 < QUICKLY_S
        for fn in api[command]:
            assert_api_refused(partial(fn, path), *fragments)


def assert_api_refused(call: Callable[[], object], *fragments: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(nsys.NsysExportError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and message.endswith("."), message
    for fragment in fragments:
        assert fragment in message, message
    assert time.monotonic() - t0 < QUICKLY_S


UNBOUNDED = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)"


@pytest.mark.parametrize("table, view", [
    (KERNELS, (f'{UNBOUNDED} SELECT i AS start, i + 5 AS "end", 1 AS demangledName, 1 AS shortName, '
               'i AS correlationId, NULL AS globalPid FROM n')),
    ("StringIds", f"{UNBOUNDED} SELECT i AS id, 'k' AS value FROM n"),
    (RUNTIME, f'{UNBOUNDED} SELECT i AS start, i + 1 AS "end", i AS correlationId, 1 AS globalTid FROM n'),
    ("NVTX_EVENTS", (f'{UNBOUNDED} SELECT i AS start, i + 1 AS "end", 59 AS eventType, 1 AS globalTid, '
                     "'x' AS text FROM n")),
    ("ENUM_NSYS_EVENT_TYPE", f"{UNBOUNDED} SELECT i AS id, 'NvtxPushPopRange' AS name FROM n"),
], ids=lambda v: v if " " not in v else "")
def test_a_view_over_an_unbounded_query_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           table: str, view: str) -> None:
    path = basic_export().write(tmp_path / "view.sqlite")
    run_sql(path, f"DROP TABLE {table}", f"CREATE VIEW {table.lower()} AS {view}")  # any spelling
    commands = ["kern-sum", "nvtx-kern-sum"] if table in (KERNELS, "StringIds") else ["nvtx-kern-sum"]
    assert_refused(path, capsys, commands, f"has {table} as a view", "refused")
    assert not list(tmp_path.glob("view.sqlite-*"))  # nothing written beside the export


def test_export_info_refuses_a_metadata_view(tmp_path: Path) -> None:
    path = basic_export().write(tmp_path / "e.sqlite")
    run_sql(path, "DROP TABLE META_DATA_EXPORT",
            f"CREATE VIEW META_DATA_EXPORT AS {UNBOUNDED} SELECT 'k' || i AS name, i AS value FROM n")
    with pytest.raises(nsys.NsysExportError, match="has META_DATA_EXPORT as a view"):
        nsys.export_info(path)


def _fts5_kernels(path: Path) -> None:
    run_sql(path, f"DROP TABLE {KERNELS}",
            f'CREATE VIRTUAL TABLE {KERNELS} USING fts5(start, "end", demangledName, shortName)',
            f"INSERT INTO {KERNELS} VALUES (1000, 2000, 1, 1)")


def _unknown_module_kernels(path: Path) -> None:
    run_sql(path, f"DROP TABLE {KERNELS}")
    add_schema_row(path, "table", KERNELS, 0,
                   f'CREATE VIRTUAL TABLE {KERNELS} USING nosuchmodule(start, "end", demangledName)')


@pytest.mark.parametrize("make", [_fts5_kernels, _unknown_module_kernels], ids=["fts5", "unknown-module"])
def test_a_virtual_kernel_table_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any) -> None:
    path = basic_export().write(tmp_path / "virtual.sqlite")
    make(path)
    assert_refused(path, capsys, ["kern-sum", "nvtx-kern-sum"], f"has {KERNELS} as a virtual table")


def test_a_generated_time_column_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = basic_export().write(tmp_path / "generated.sqlite")
    cols = "start, demangledName, shortName, correlationId, globalPid"
    run_sql(path,
            'CREATE TABLE k2 (start INTEGER NOT NULL, "end" INTEGER GENERATED ALWAYS AS (start + 7) VIRTUAL, '
            "demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER)",
            f"INSERT INTO k2 ({cols}) SELECT {cols} FROM {KERNELS}",
            f"DROP TABLE {KERNELS}", f"ALTER TABLE k2 RENAME TO {KERNELS}")
    assert_refused(path, capsys, ["kern-sum", "nvtx-kern-sum"], f"{KERNELS}.end as a generated column")


def test_a_time_column_declared_as_text_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = basic_export().write(tmp_path / "declared.sqlite")
    conn = sqlite3.connect(path)
    declared = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", [KERNELS]).fetchone()[0]
    conn.close()
    set_schema_sql(path, KERNELS, declared.replace("[end] INTEGER NOT NULL", "[end] TEXT NOT NULL"))
    assert_refused(path, capsys, ["kern-sum", "nvtx-kern-sum"], f"declares {KERNELS}.end as 'TEXT'",
                   "nsys writes INTEGER")


@pytest.mark.parametrize("column", ["start", "end"])
@pytest.mark.parametrize("how", ["numeric text", "text", "real"])
def test_kernel_times_that_are_not_integers_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        column: str, how: str) -> None:
    """SQLite keeps text or a real number stored in an INTEGER column as it is: '12000' (which
    sorts and compares as text), 'abc' (which computes as 0) or 1.5 would give wrong times."""
    b = basic_export()
    path = b.write(tmp_path / "text.sqlite")
    if how == "numeric text":
        store_as_text(path, KERNELS, column, where="rowid = 3")  # the same number, stored as text
    else:
        value = "'abc'" if how == "text" else "1.5"
        run_sql(path, f"UPDATE {KERNELS} SET [{column}] = {value} WHERE rowid = 3")
    conn = sqlite3.connect(path)
    kind = conn.execute(f"SELECT typeof([{column}]) FROM {KERNELS} WHERE rowid = 3").fetchone()[0]
    conn.close()
    assert kind == ("real" if how == "real" else "text")
    assert_refused(path, capsys, ["kern-sum", "nvtx-kern-sum"], f"{KERNELS}.{column}", "not integers")


@pytest.mark.parametrize("table, column", [(RUNTIME, "start"), (RUNTIME, "correlationId"), (KERNELS, "correlationId")])
def test_launch_calls_and_links_that_are_not_integers_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  table: str, column: str) -> None:
    path = basic_export().write(tmp_path / "text.sqlite")
    store_as_text(path, table, column, where="rowid = 2")
    assert_refused(path, capsys, ["nvtx-kern-sum"], f"{table}.{column}", "not integers")
    nsys.kern_sum(path)  # cuda_gpu_kern_sum reads neither


@pytest.mark.parametrize("column, value", [("start", "'abc'"), ("end", "'99999'"), ("eventType", "'fifty-nine'"),
                                           ("globalTid", "2.5")])
def test_nvtx_values_that_are_not_integers_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       column: str, value: str) -> None:
    b = basic_export()
    path = b.write(tmp_path / "nvtx.sqlite")
    if value == "'99999'":
        store_as_text(path, "NVTX_EVENTS", column, where="text = 'iters'")
    else:
        run_sql(path, f"UPDATE NVTX_EVENTS SET [{column}] = {value} WHERE text = 'iters'")
    assert_refused(path, capsys, ["nvtx-kern-sum"], f"NVTX_EVENTS.{column}", "not integers")
    assert_rows(nsys.kern_sum(path), model_kern_sum(b))  # the kernel summary does not read NVTX


def test_event_type_enum_with_text_ids_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = basic_export().write(tmp_path / "enum.sqlite")
    set_schema_sql(path, "ENUM_NSYS_EVENT_TYPE",
                   "CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL, name TEXT, label TEXT)")
    run_sql(path, "INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES ('x59', 'NvtxPushPopRange', '')")
    assert_refused(path, capsys, ["nvtx-kern-sum"], "ENUM_NSYS_EVENT_TYPE.id", "not integers")


def runaway_export(path: Path, n: int) -> Path:
    """n nested ranges around n kernel launches on one thread: n * n (range, kernel) pairs."""
    b = ExportBuilder()
    for i in range(n):
        b.add_range(i, 10**9 - i, "iters", 1, 1)
    for j in range(n):
        b.launch(1, 1, 10_000 + j * 10, 10_000 + j * 10, 5, "k", call_dur=1)
    return b.write(path)


def test_a_read_past_its_time_limit_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """4 M (range, kernel) pairs take nvtx_kern_sum well over ten seconds (range_launches, which
    keeps only the innermost range per kernel, about four); under a time limit the read stops
    about then."""
    path = runaway_export(tmp_path / "slow.sqlite", 2000)
    big = 2**40
    assert_api_refused(lambda: nsys.nvtx_kern_sum(path, time_limit_s=1, temp_limit_bytes=big),
                       "took longer than 1 s to read, so it is refused")
    assert_api_refused(lambda: nsys.range_kernels(path, "iters", time_limit_s=1, temp_limit_bytes=big),
                       "took longer than 1 s to read")
    assert_api_refused(lambda: nsys.range_launches(path, "iters", time_limit_s=0.25), "took longer than 0.25 s")
    assert_api_refused(lambda: nsys.kern_sum(REAL, time_limit_s=0), "took longer than 0 s")
    monkeypatch.setattr(nsys, "TIME_LIMIT_S", 0.5)  # the module constant is the default
    monkeypatch.setattr(nsys, "TEMP_LIMIT_MIN_BYTES", big)
    t0 = time.monotonic()
    assert_one_sentence(*run_cli(capsys, "nvtx-kern-sum", path), "took longer than 0.5 s to read")
    assert time.monotonic() - t0 < QUICKLY_S


def test_a_read_past_its_temporary_storage_limit_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """1 M (range, kernel) pairs need more than 4 MiB of TEMP tables in nvtx_kern_sum."""
    path = runaway_export(tmp_path / "big.sqlite", 1000)
    four = 4 * 2**20
    assert_api_refused(lambda: nsys.nvtx_kern_sum(path, temp_limit_bytes=four),
                       "needs more than 4 MiB of temporary storage", "so it is refused")
    assert_api_refused(lambda: nsys.range_kernels(path, "iters", temp_limit_bytes=four),
                       "needs more than 4 MiB of temporary storage")
    monkeypatch.setattr(nsys, "TEMP_LIMIT_MIN_BYTES", 2**20)
    monkeypatch.setattr(nsys, "TEMP_LIMIT_PER_EXPORT_BYTE", 1)
    assert_one_sentence(*run_cli(capsys, "nvtx-kern-sum", path), "needs more than 1 MiB of temporary storage")
    # the kernel summary and the launch list store no (range, kernel) pairs
    assert nsys.kern_sum(path, temp_limit_bytes=four)[0]["Instances"] == 1000
    launches = nsys.range_launches(path, "iters", temp_limit_bytes=four)
    assert len(launches) == 1000 and {r["range"] for r in launches} == {"iters"}


def test_temporary_storage_limit_is_enforced_by_sqlite(tmp_path: Path) -> None:
    """The TEMP schema of an open export is capped (max_page_count) and kept in a file."""
    path = basic_export().write(tmp_path / "e.sqlite")
    db = nsys.open_export(path, temp_limit_bytes=2**20)
    try:
        assert db.execute("PRAGMA temp_store").fetchone()[0] == 1  # FILE
        pages = db.execute("PRAGMA temp.max_page_count").fetchone()[0]
        assert pages * db.execute("PRAGMA temp.page_size").fetchone()[0] == 2**20
        with pytest.raises(sqlite3.OperationalError, match="full"):
            db.execute("CREATE TEMP TABLE x AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
                       "SELECT i, zeroblob(1000) FROM n")
    finally:
        db.close()


def test_a_value_past_the_length_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = ExportBuilder()
    b.launch(1, 1, 0, 10, 100, "k" * 5000)
    path = b.write(tmp_path / "long.sqlite")
    assert nsys.kern_sum(path)[0]["Name"] == "k" * 5000
    monkeypatch.setattr(nsys, "VALUE_LIMIT_BYTES", 4096)
    with pytest.raises(nsys.NsysExportError, match="holds a string or blob longer than"):
        nsys.kern_sum(path)


def test_files_beside_the_export_are_ignored(tmp_path: Path) -> None:
    """The export is opened immutable: a -wal file next to it (changes the export never held) is
    not read, and no -shm or -journal file is created."""
    b = basic_export()
    path = b.write(tmp_path / "e.sqlite")
    expected = nsys.kern_sum(path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute(f"UPDATE {KERNELS} SET [end] = [end] + 1000000")
    conn.commit()
    shutil.copyfile(path, tmp_path / "copy.sqlite")
    shutil.copyfile(f"{path}-wal", tmp_path / "copy.sqlite-wal")
    conn.close()
    copy = tmp_path / "copy.sqlite"
    before = copy.read_bytes()
    plain = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)  # plain SQLite reads the -wal
    try:
        assert plain.execute(f"SELECT min([end] - start) FROM {KERNELS}").fetchone()[0] > 1000000
    finally:
        plain.close()
    assert copy.read_bytes() == before and (tmp_path / "copy.sqlite-wal").exists()
    (tmp_path / "copy.sqlite-shm").unlink(missing_ok=True)
    assert nsys.kern_sum(copy) == expected
    assert not (tmp_path / "copy.sqlite-shm").exists()
    assert copy.read_bytes() == before


# ----------------------------------------------------------------------------------------------
# Control characters in names


def test_control_characters_are_escaped_in_both_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = ExportBuilder()
    b.add_range(0, 10_000, "r\x1b]0;title\x07 \u202eevil", 1, 1)
    b.launch(1, 1, 1_000, 1_000, 10, "red\x1b[31m bell\x07 del\x7f c1\x9b tab\t nl\n caf\u00e9 \u2713")
    path = b.write(tmp_path / "e.sqlite")
    raw = nsys.kern_sum(path)[0]["Name"]
    assert "\x1b" in raw  # the API returns the name as stored
    for fmt in ("table", "csv"):
        for command in ("kern-sum", "nvtx-kern-sum"):
            rc, out, err = run_cli(capsys, command, path, "--format", fmt)
            assert (rc, err) == (0, "")
            assert not [c for c in out if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) <= 0x9f or c == "\u202e"], out
            assert "red\\x1b[31m bell\\x07 del\\x7f c1\\x9b tab\\x09 nl\\x0a caf\u00e9 \u2713" in out
            if command == "nvtx-kern-sum":
                assert ":r\\x1b]0;title\\x07 \\u202eevil" in out
            assert len(out.splitlines()) == (2 if fmt == "csv" else 3)  # the newline is escaped too


def test_escape_controls_keeps_printable_text() -> None:
    text = "void k<(int)4>(const float *, T3) caf\u00e9 \u03bb \u2713 \u4e2d\u6587 \\x"
    assert nsys.escape_controls(text) == text
    assert nsys.escape_controls("\x00\x1b[2J\x85\u2028") == "\\x00\\x1b[2J\\x85\\u2028"
    assert nsys.format_csv([{"a": "x\x1by"}], ["a"]) == "a\nx\\x1by\n"


def test_errors_on_stderr_are_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "evil\x1b[31m.sqlite"
    rc, _, err = run_cli(capsys, "kern-sum", path)
    assert rc == 2 and "\x1b" not in err and "evil\\x1b[31m.sqlite" in err


# ----------------------------------------------------------------------------------------------
# range_launches: launch by launch, the kernels of the prefix ranges

PIPELINE_CUDA = nsys_fixtures.export("h200-pipeline-layernorm-4096x768-cuda")
PIPELINE_CUDA_NVTX = nsys_fixtures.stats("h200-pipeline-layernorm-4096x768-cuda", "nvtx_kern_sum")


def capture_rounds_export(tmp_path: Path) -> Path:
    """The pipeline's cuda capture with its one `capture` range split into the layout of rounds:
    capture/cuda.block512/0 (first 50 launches) and /1 (last 50, with a non-matching range
    inside), capture/triton/0 around five launches before them, and a non-matching `session`
    range around everything."""
    path = tmp_path / "rounds.sqlite"
    shutil.copyfile(PIPELINE_CUDA, path)
    os.chmod(path, 0o644)
    conn = sqlite3.connect(path)
    rowid, start, end, gtid = conn.execute(
        "SELECT rowid, start, [end], globalTid FROM NVTX_EVENTS WHERE text = 'capture'").fetchone()
    calls = conn.execute(f"""
        SELECT r.start, r.[end] FROM {RUNTIME} r JOIN {KERNELS} k ON k.correlationId = r.correlationId
        WHERE r.globalTid = ? ORDER BY r.start""", [gtid]).fetchall()
    inside = [c for c in calls if start <= c[0] and c[1] <= end]
    before = [c for c in calls if c[1] < start]
    assert len(inside) == 100 and len(before) >= 5
    split = (inside[49][1] + inside[50][0]) // 2
    conn.execute("UPDATE NVTX_EVENTS SET text = 'capture/cuda.block512/0', [end] = ? WHERE rowid = ?", [split, rowid])

    def add(text: str, lo: int, hi: int) -> None:
        conn.execute("INSERT INTO NVTX_EVENTS (start, [end], eventType, text, globalTid, domainId) "
                     "VALUES (?, ?, 59, ?, ?, 0)", [lo, hi, text, gtid])

    add("capture/cuda.block512/1", split + 1, end)
    add("aten::layer_norm", inside[60][0] - 1, inside[65][1] + 1)
    add("capture/triton/0", before[-5][0] - 1, before[-1][1] + 1)
    add("session", calls[0][0] - 1, calls[-1][1] + 1)
    conn.commit()
    conn.close()
    return path


def test_range_launches_agree_with_nvtx_kern_sum_per_range(tmp_path: Path) -> None:
    path = capture_rounds_export(tmp_path)
    launches = nsys.range_launches(path, "capture/")
    assert all(list(row) == nsys.RANGE_LAUNCH_KEYS for row in launches)
    by_range: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in launches:
        by_range[row["range"]].append(row)
    assert sorted(by_range) == ["capture/cuda.block512/0", "capture/cuda.block512/1", "capture/triton/0"]
    assert [len(by_range[r]) for r in sorted(by_range)] == [50, 50, 5]
    nvtx = nsys.nvtx_kern_sum(path)
    for name, rows in by_range.items():
        mine = [r for r in nvtx if r["NVTX Range"] == f":{name}"]
        assert sum(r["duration_ns"] for r in rows) == sum(r["Total Time (ns)"] for r in mine)
        assert len(rows) == sum(r["Kern Inst"] for r in mine)
        for kernel in {r["kernel"] for r in rows}:
            (row,) = [r for r in mine if r["Kernel Name"] == kernel]
            durs = [r["duration_ns"] for r in rows if r["kernel"] == kernel]
            assert (row["Min (ns)"], row["Max (ns)"], row["Kern Inst"]) == (min(durs), max(durs), len(durs))
    # the round ranges' kernels are the ones of the original `capture` row of nsys stats
    with open(PIPELINE_CUDA_NVTX, newline="") as fh:
        (capture,) = [r for r in csv.DictReader(fh) if r["NVTX Range"] == ":capture"]
    cuda = by_range["capture/cuda.block512/0"] + by_range["capture/cuda.block512/1"]
    assert sum(r["duration_ns"] for r in cuda) == int(capture["Total Time (ns)"])
    assert {r["kernel"] for r in cuda} == {capture["Kernel Name"]}
    # launch order, and each row read straight from the kernel and runtime tables
    assert [r["launch_start_ns"] for r in launches] == sorted(r["launch_start_ns"] for r in launches)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for row in (launches[0], launches[-1]):
            want = conn.execute(f"""
                SELECT k.start, k.[end], k.gridX || 'x' || k.gridY || 'x' || k.gridZ,
                       k.blockX || 'x' || k.blockY || 'x' || k.blockZ, k.registersPerThread,
                       k.staticSharedMemory, k.dynamicSharedMemory, s.value, r.start
                FROM {KERNELS} k JOIN StringIds s ON s.id = k.shortName
                JOIN {RUNTIME} r ON r.correlationId = k.correlationId WHERE k.start = ?""", [row["start_ns"]]).fetchone()
            assert (row["start_ns"], row["end_ns"], row["grid"], row["block"], row["registers"], row["static_smem"],
                    row["dynamic_smem"], row["short_name"], row["launch_start_ns"]) == want
            assert row["duration_ns"] == row["end_ns"] - row["start_ns"]
    finally:
        conn.close()
    assert [r["range"] for r in nsys.range_launches(path, "capture/triton/")] == ["capture/triton/0"] * 5


def test_range_launches_follow_the_nvtx_kern_sum_rules(tmp_path: Path) -> None:
    b = ExportBuilder()
    pid, main, other = 10, 10, 11
    b.add_domain(3, "Torch", pid, main)
    b.add_range(1_000, 50_000, "capture/cuda/0", pid, main)
    b.add_range(20_000, 30_000, "capture/cuda/0/inner", pid, main)       # nested, also matching
    b.add_range(5_000, 8_000, "aten::add", pid, main)                    # nested, not matching
    b.add_range(60_000, 90_000, "capture/triton.v2/0", pid, main, kind="startend", domain=3)
    b.add_range(60_000, 90_000, "capture/other_thread/0", pid, other)
    b.add_range(60_000, 90_000, "capture/handoff/0", pid, main, kind="startend", end_tid=other)
    b.add_range(95_000, None, "capture/open/0", pid, main)               # never ended
    b.add_range(96_000, 99_000, "tail", pid, main)                        # the last range timestamp
    b.launch(pid, main, 2_000, 2_500, 100, "a", grid=(4, 2, 1), block=(128, 1, 1))
    b.launch(pid, main, 6_000, 6_500, 110, "a")                          # inside aten::add: still cuda/0
    b.launch(pid, main, 21_000, 21_500, 120, "b")                        # innermost: cuda/0/inner
    b.launch(pid, main, 49_500, 52_000, 130, "c", call_dur=1_000)        # call ends after the range
    b.graph_launch(pid, main, 61_000, [(62_000, 140, "g1"), (62_500, 150, "g2")])
    b.launch(pid, other, 70_000, 70_500, 160, "d")                       # other thread's range
    b.launch(pid, main, 97_000, 97_500, 170, "e")                        # open range, before the end
    b.launch(pid, main, 99_500, 99_600, 180, "f")                        # after the last timestamp
    b.kernels.append(Kernel(30_000, 30_100, "orphan", pid, corr=None))  # no launch call
    path = b.write(tmp_path / "e.sqlite")
    got = [(r["range"], r["kernel"], r["duration_ns"], r["launch_start_ns"]) for r in nsys.range_launches(path, "capture/")]
    assert got == [
        ("capture/cuda/0", "a", 100, 2_000), ("capture/cuda/0", "a", 110, 6_000),
        ("capture/cuda/0/inner", "b", 120, 21_000),
        ("capture/triton.v2/0", "g1", 140, 61_000), ("capture/triton.v2/0", "g2", 150, 61_000),
        ("capture/other_thread/0", "d", 160, 70_000),
        ("capture/open/0", "e", 170, 97_000),
    ]
    first = nsys.range_launches(path, "capture/cuda/0")[0]
    assert (first["grid"], first["block"], first["registers"], first["start_ns"], first["end_ns"]) == (
        "4x2x1", "128x1x1", 32, 2_500, 2_600)
    assert [r["kernel"] for r in nsys.range_launches(path, "capture/cuda/0/")] == ["b"]
    assert [r["kernel"] for r in nsys.range_launches(path, "")] == ["a", "a", "b", "g1", "g2", "d", "e"]
    with pytest.raises(nsys.NsysExportError, match="no NVTX push/pop or start/end range whose text starts with 'nope/'"):
        nsys.range_launches(path, "nope/")
    with pytest.raises(nsys.NsysExportError, match="end on another thread"):
        nsys.range_launches(path, "capture/handoff/")
    # every launch of a non-nested matching range is in nvtx_kern_sum's row for it
    nvtx = {(r["NVTX Range"], r["Kernel Name"]): r["Total Time (ns)"] for r in nsys.nvtx_kern_sum(path)}
    assert nvtx[("Torch:capture/triton.v2/0", "g1")] == 140 and nvtx[(":capture/open/0", "e")] == 170


def test_range_launches_without_nvtx_or_runtime(tmp_path: Path) -> None:
    path = basic_export(with_nvtx=False).write(tmp_path / "nonvtx.sqlite")
    with pytest.raises(nsys.NsysExportError, match="-t nvtx"):
        nsys.range_launches(path, "it")
    path = basic_export(with_runtime=False).write(tmp_path / "nort.sqlite")
    with pytest.raises(nsys.NsysExportError, match="no CUDA runtime launch records"):
        nsys.range_launches(path, "it")
    path = basic_export().write(tmp_path / "e.sqlite")
    assert {r["range"] for r in nsys.range_launches(path, "i")} == {"iters", "inner"}


def test_kernel_rows_without_a_duration_are_counted_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kernel rows with a NULL start or end were dropped from every summary without a word (issue
    31: a million of them): the export's info counts them and the summaries say so on stderr,
    stdout staying what nsys stats prints."""
    path = tmp_path / "nulls.sqlite"
    shutil.copyfile(REAL, path)
    before = run_cli(capsys, "kern-sum", path, "--format", "csv")
    run_sql(path, "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO k_old",  # the same table without NOT NULL
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM k_old", "DROP TABLE k_old",
            'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = NULL WHERE rowid IN '
            '(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid LIMIT 3)')
    assert nsys.export_info(path)["kernels_without_duration"] == 3
    assert nsys.export_info(REAL)["kernels_without_duration"] == 0
    rc, out, err = run_cli(capsys, "kern-sum", path, "--format", "csv")
    assert rc == 0 and out != before[1] and before[2] == ""
    assert err == (f"note: 3 kernel rows of {path} have no duration (a NULL start or end) and are not counted in any "
                   "summary, launch or kernel time.\n")
