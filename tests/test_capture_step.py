"""The capture step end to end without a GPU: a stand-in nsys writes a real H200 export, and the
step takes the GPU lock, watches the GPU (NVML absent here), scrubs the export, writes the
metadata, and the tables read it. A stand-in nsys that crashes leaves no capture behind."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from harness import ROOT, config
from harness.errors import EvidenceError
from harness.measure import step as measure_step
from harness.tables import derive as tables

EXPORT = ROOT / "tests" / "fixtures" / "nsys" / "h200-pipeline-layernorm-4096x768-cuda.sqlite"

FAKE_NSYS = """#!/usr/bin/env python3
import shutil, sys
args = sys.argv[1:]
if args and args[0] == "--version":
    print("NVIDIA Nsight Systems version 2099.1 (stand-in)"); sys.exit(0)
if "{mode}" == "crash":
    print("nsys: the target crashed", file=sys.stderr); sys.exit(3)
base = args[args.index("--output") + 1]
open(base + ".nsys-rep", "wb").write(b"stand-in report")
if "{mode}" == "no-report":
    import os; os.remove(base + ".nsys-rep"); open(base + ".qdstrm", "wb").write(b"x"); sys.exit(0)
shutil.copy("{export}", base + ".sqlite")
"""


def fake_nsys(tmp: Path, mode: str = "ok") -> Path:
    path = tmp / "nsys"
    path.write_text(FAKE_NSYS.format(mode=mode, export=EXPORT))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture()
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("EVIDENCE_LOCK_DIR", str(tmp_path / "locks"))
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    return config.validate(raw)


def paths(tmp: Path) -> dict[str, str]:
    base = tmp / "ns" / "capture" / "layernorm" / "4096x768"
    base.mkdir(parents=True)
    return {"rep": str(base / "cuda.nsys-rep"), "sqlite": str(base / "cuda.sqlite"),
            "meta": str(base / "cuda.json"), "log": str(tmp / "cuda.log")}


def test_capture_step_writes_export_meta_and_gpu_state(cfg: dict, tmp_path: Path) -> None:
    cfg["nsys"]["path"] = str(fake_nsys(tmp_path))
    p = paths(tmp_path)
    measure_step.capture(cfg, "layernorm", "4096x768", "cuda", p["meta"], p["log"])
    meta = json.loads(Path(p["meta"]).read_text())
    assert meta["nsys_version"] == "2025.3.2.0" and meta["gpu_uuid"]
    assert {"before", "waited_s", "during", "after"} <= set(meta["gpu"])
    assert not list(Path(p["rep"]).parent.glob("*.partial*"))
    row = tables.gpu_state_row(meta, "ns")
    assert row["op"] == "layernorm" and row["disturbed"] is False
    detail = tables.kernel_time_detail(p["sqlite"], "capture", 100, "layernorm", "4096x768", "cuda")
    assert len(detail) == 1 and detail[0]["instances"] == 100


@pytest.mark.parametrize(("mode", "says"), [("crash", "failed with exit status 3"), ("no-report", "wrote no report")])
def test_a_failing_nsys_leaves_no_capture(cfg: dict, tmp_path: Path, mode: str, says: str) -> None:
    cfg["nsys"]["path"] = str(fake_nsys(tmp_path, mode))
    p = paths(tmp_path)
    with pytest.raises(EvidenceError, match=says):
        measure_step.capture(cfg, "layernorm", "4096x768", "cuda", p["meta"], p["log"])
    for key in ("rep", "sqlite", "meta"):
        assert not Path(p[key]).exists()  # nothing a later run would trust
    assert "$ " in Path(p["log"]).read_text()  # the log names what ran
