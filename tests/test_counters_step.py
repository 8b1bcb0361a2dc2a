"""The counters step end to end without a GPU: a stand-in ncu writes a report and prints a real
H200 raw export; one that reports the permission error, and no ncu at all, give a table that says
counters are unavailable and why; a crashing one fails the job and leaves no table."""

from __future__ import annotations

import csv
import stat
from pathlib import Path

import pytest
import yaml

from harness import ROOT, config
from harness.errors import EvidenceError
from harness.measure import step as measure_step

RAW = ROOT / "tests" / "fixtures" / "ncu" / "layernorm-4096x768-cuda.raw.csv"

FAKE_NCU = """#!/usr/bin/env python3
import sys
args = sys.argv[1:]
mode = "{mode}"
if "--import" in args:
    sys.stdout.write(open("{raw}").read()); sys.exit(0)
if mode == "perm":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0."); sys.exit(1)
if mode == "crash":
    print("==ERROR== The application returned an error code (11)."); sys.exit(11)
open(args[args.index("--export") + 1] + ".ncu-rep", "wb").write(b"stand-in report")
print("==PROF== Report written")
"""


def fake_ncu(tmp: Path, mode: str) -> str:
    path = tmp / "ncu"
    path.write_text(FAKE_NCU.format(mode=mode, raw=RAW))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture()
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("EVIDENCE_LOCK_DIR", str(tmp_path / "locks"))
    return config.validate(yaml.safe_load((ROOT / "config.yaml").read_text()))


def outs(tmp: Path) -> tuple[str, str, str]:
    base = tmp / "ns" / "counters" / "layernorm" / "4096x768"
    return str(base / "cuda.raw.csv"), str(base / "cuda.csv"), str(tmp / "cuda.log")


def read(path: str) -> list[dict]:
    return list(csv.DictReader(open(path)))


def test_counters_step_parses_the_export(cfg: dict, tmp_path: Path) -> None:
    cfg["counters"]["ncu"] = fake_ncu(tmp_path, "ok")
    raw, table, log = outs(tmp_path)
    measure_step.counters(cfg, "layernorm", "4096x768", "cuda", raw, table, log)
    rows = read(table)
    assert len(rows) == 2 and {r["status"] for r in rows} == {"ok"}
    assert rows[0]["source"] == "ncu kernel replay" and "layernorm_fwd_vec4" in rows[0]["kernel"]
    assert float(rows[0]["duration_ns"]) > 1000
    assert Path(raw).read_text() == RAW.read_text()
    assert (Path(raw).parent / "cuda.ncu-rep").is_file()
    assert not list(Path(raw).parent.glob("*.partial*"))
    logged = Path(log).read_text()
    assert "--clock-control none" in logged and "--nvtx-include capture/" in logged


def test_permission_error_records_unavailable(cfg: dict, tmp_path: Path) -> None:
    cfg["counters"]["ncu"] = fake_ncu(tmp_path, "perm")
    raw, table, log = outs(tmp_path)
    measure_step.counters(cfg, "layernorm", "4096x768", "cuda", raw, table, log)
    rows = read(table)
    assert len(rows) == 1 and rows[0]["status"] == "unavailable"
    assert rows[0]["reason"].startswith("ERR_NVGPUCTRPERM")


def test_no_ncu_records_unavailable(cfg: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setattr("harness.tools.glob.glob", lambda pattern: [])
    raw, table, log = outs(tmp_path)
    measure_step.counters(cfg, "layernorm", "4096x768", "cuda", raw, table, log)
    rows = read(table)
    assert rows[0]["status"] == "unavailable" and "was not found" in rows[0]["reason"]


def test_crashing_ncu_fails_and_leaves_no_table(cfg: dict, tmp_path: Path) -> None:
    cfg["counters"]["ncu"] = fake_ncu(tmp_path, "crash")
    raw, table, log = outs(tmp_path)
    with pytest.raises(EvidenceError, match="ncu profile of layernorm 4096x768 cuda failed"):
        measure_step.counters(cfg, "layernorm", "4096x768", "cuda", raw, table, log)
    assert not Path(table).exists() and not Path(raw).exists()
