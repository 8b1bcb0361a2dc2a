"""The Nsight Compute counters reader on real exports from the H200 (tests/fixtures/ncu/, made by
ncu 2025.3.1, one process per implementation; scripts/make_ncu_fixture.sh now
takes them from the counters rule, one export per shape), the commands, and the unavailable path."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest

from harness import config
from harness.errors import EvidenceError, ToolMissing
from harness.measure import counters as ncu
from harness.tables import counters

FIX = Path(__file__).parent / "fixtures" / "ncu"
METRICS = config.load(config.ROOT / "config.yaml")["counters"]["metrics"]


def raw(name: str) -> Path:
    return FIX / f"{name}.raw.csv"


def column(path: Path, name: str) -> tuple[str, list[str]]:
    rows = list(csv.reader(io.StringIO(path.read_text())))
    i = rows[0].index(name)
    return rows[1][i], [r[i] for r in rows[2:]]


def test_reader_converts_to_base_units_from_the_export_itself() -> None:
    path = raw("layernorm-4096x768-triton")
    kernels = counters.read_raw_csv(path)
    unit, values = column(path, "gpu__time_duration.sum")
    assert unit == "us" and len(kernels) == len(values) == 2
    assert [k["gpu__time_duration.sum"] for k in kernels] == pytest.approx([float(v) * 1e3 for v in values])
    unit, values = column(path, "dram__bytes.sum")
    assert unit == "Mbyte"
    assert kernels[0]["dram__bytes.sum"] == pytest.approx(float(values[0]) * 1e6)
    unit, values = column(path, "dram__bytes.sum.per_second")
    assert unit == "Tbyte/s"
    assert kernels[0]["dram__bytes.sum.per_second"] == pytest.approx(float(values[0]) * 1e12)
    # thousands separators: launch__grid_size is printed '4,096'
    assert kernels[0]["launch__grid_size"] == 4096
    assert kernels[0]["Kernel Name"] == "layernorm_fwd"


def test_every_configured_metric_is_in_every_real_export() -> None:
    for path in sorted(FIX.glob("*.raw.csv")):
        header = next(csv.reader(io.StringIO(path.read_text())))
        missing = [m for m in ncu.metric_names(METRICS) if m not in header]
        assert not missing, (path.name, missing)


def test_only_hardware_metrics_go_to_the_command_line() -> None:
    req = ncu.requested_metrics(METRICS)
    assert "gpu__time_duration.sum" in req
    assert not [m for m in req if m.startswith("launch__") or m.startswith("sm__maximum_warps_")]
    argv = ncu.profile_command("/x/ncu", METRICS, "capture", "/tmp/r", ["python3", "-m", "harness", "target"])
    assert argv[:3] == ["/x/ncu", "--clock-control", "none"]
    assert argv[argv.index("--nvtx-include") + 1] == "capture/"
    assert argv[argv.index("--metrics") + 1] == ",".join(req)
    assert argv[-4:] == ["python3", "-m", "harness", "target"]
    assert ncu.export_command("/x/ncu", "/tmp/r.ncu-rep") == ["/x/ncu", "--import", "/tmp/r.ncu-rep", "--csv", "--page", "raw"]


def test_multi_kernel_call_is_summed_and_weighted() -> None:
    kernels = counters.read_raw_csv(raw("neighbor_aggregation-65536x1048576x64-torch"))
    rows = counters.counter_rows(kernels, METRICS, "ns", "neighbor_aggregation", "65536x1048576x64", "torch")
    assert len(rows) == len(kernels) == 8  # 2 calls of 4 kernels each (a fill and three cuSPARSE kernels)
    s = counters.summarise(rows, calls=2)
    assert s["kernels"] == 4
    assert s["duration_ns"] == pytest.approx(sum(r["duration_ns"] for r in rows) / 2)
    w = [r["duration_ns"] for r in rows]
    expect = sum(r["l2_hit_rate_pct"] * x for r, x in zip(rows, w)) / sum(w)
    assert s["l2_hit_rate_pct"] == pytest.approx(expect)
    assert s["dram_bytes_per_s"] == pytest.approx(s["dram_bytes"] / (s["duration_ns"] * 1e-9))


def test_limiter_names_the_smallest_block_limit() -> None:
    assert counters.limiter({"occupancy_limit_registers": 16, "occupancy_limit_shared_mem": 28,
                             "occupancy_limit_blocks": 32, "occupancy_limit_warps": 16}) == "registers = warps per SM"
    assert counters.limiter({"occupancy_limit_registers": 12, "occupancy_limit_warps": 16}) == "registers"
    assert counters.limiter({}) == ""


def test_compare_ours_with_the_control_on_real_exports() -> None:
    def summary(impl: str) -> dict:
        k = counters.read_raw_csv(raw(f"layernorm-4096x768-{impl}"))
        return counters.summarise(counters.counter_rows(k, METRICS, "ns", "layernorm", "4096x768", impl), calls=2)

    ours, control = summary("cuda"), summary("triton")
    by = {r["column"]: r for r in counters.compare(ours, control)}
    occ = by["achieved_occupancy_pct"]
    assert occ["delta"] == pytest.approx(ours["achieved_occupancy_pct"] - control["achieved_occupancy_pct"])
    assert occ["differs"] == (abs(occ["delta"]) > counters.DIFFER_POINTS)
    ins = by["instructions"]
    assert ins["delta"] == pytest.approx(ours["instructions"] / control["instructions"])
    assert ins["differs"] == (abs(ins["delta"] - 1) > counters.DIFFER_RATIO)
    assert by["registers_per_thread"]["ours"] != by["registers_per_thread"]["control"] or not by["registers_per_thread"]["differs"]


def test_not_an_export_is_one_sentence(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(EvidenceError, match="not an ncu raw CSV export"):
        counters.read_raw_csv(bad)
    lines = raw("layernorm-4096x768-cuda").read_text().splitlines()
    trunc = tmp_path / "t.csv"
    trunc.write_text("\n".join(lines[:3] + [lines[3][: len(lines[3]) // 2]]) + "\n")
    with pytest.raises(EvidenceError, match="truncated or corrupt"):
        counters.read_raw_csv(trunc)
    with pytest.raises(EvidenceError, match="cannot read"):
        counters.read_raw_csv(tmp_path / "absent.csv")


def test_unavailable_reason_and_rows() -> None:
    out = "==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters\n"
    reason = ncu.unavailable_reason(out)
    assert reason and reason.startswith("ERR_NVGPUCTRPERM")
    assert ncu.unavailable_reason("==PROF== Report: x.ncu-rep\n") is None
    rows = counters.unavailable_rows(reason, METRICS, "ns", "layernorm", "4096x768", "cuda")
    assert rows[0]["status"] == "unavailable" and rows[0]["reason"] == reason
    assert counters.summarise(rows)["status"] == "unavailable"


def test_find_ncu_names_where_it_looked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setattr("harness.tools.glob.glob", lambda pattern: [])
    with pytest.raises(ToolMissing, match=r"looked at config counters.ncu=/nope, PATH, /opt/nvidia"):
        ncu.find_ncu("/nope")
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert ncu.find_ncu(None) == shutil.which("ncu") == str(fake)
