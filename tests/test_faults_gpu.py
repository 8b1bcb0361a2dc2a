"""Fault injection on the GPU (issue #7), with the planted kernels of
tests/fixtures/faults/transpose_faults.cu loaded as the external transpose: a wrong answer fails
its check and is recorded; a crash fails its own job in one sentence; a hang is stopped by the
deadline; after each, a fresh process measures on the same GPU. Crash and hang run in child
processes, as the workflow's jobs do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness import ROOT, config
from harness.measure import step as measure_step

PTX = "tests/fixtures/faults/transpose_faults.ptx"
SHAPE = "1024x1024"


def fault_cfg(entry: str, check_s: float = 300) -> dict:
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw["operations"]["transpose"]["external"].update(path=PTX, entry=entry)
    raw["timeouts"] = {"check_s": check_s}
    return config.validate(raw)


def run_check_process(cfg: dict, impl: str, out: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cfg_path = out.with_suffix(".config.json")
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(json.dumps(cfg))
    code = ("import json, sys; from harness.measure import step as measure_step; from harness.jobs import run_step; "
            f"cfg = json.load(open({str(cfg_path)!r})); "
            f"run_step(None, lambda: measure_step.check(cfg, 'transpose', {SHAPE!r}, {impl!r}, {str(out)!r}))")
    # the test already holds the GPU's lock (conftest), so the child takes a lock of its own folder
    # (a lock in the real folder would wait for the test until the timeout)
    env = {**os.environ, "EVIDENCE_LOCK_DIR": str(out.parents[5] / "child-locks")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env)


def ns(tmp: Path, impl: str) -> Path:
    return tmp / "artifacts" / "ns" / "check" / "transpose" / SHAPE / f"{impl}.json"


@pytest.mark.gpu
def test_off_by_one_fails_its_check_and_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVIDENCE_LOCK_DIR", str(tmp_path / "locks"))
    out = ns(tmp_path, "external")
    out.parent.mkdir(parents=True)
    measure_step.check(fault_cfg("transpose_off_by_one"), "transpose", SHAPE, "external", str(out))
    record = json.loads(out.read_text())
    assert record["passed"] is False and record["max_abs_err"] > 0.1
    assert record["error"].startswith(f"check failed for transpose {SHAPE} external")


@pytest.mark.gpu
def test_a_crash_fails_its_job_and_the_next_job_measures(tmp_path: Path) -> None:
    proc = run_check_process(fault_cfg("transpose_crash"), "external", ns(tmp_path, "external"))
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"transpose {SHAPE} external crashed on the GPU ("), proc.stderr[-2000:]
    assert not ns(tmp_path, "external").exists()
    after = run_check_process(fault_cfg("transpose_crash"), "cuda", ns(tmp_path, "cuda"))
    assert after.returncode == 0, after.stderr[-2000:]
    assert json.loads(ns(tmp_path, "cuda").read_text())["passed"] is True


@pytest.mark.gpu
def test_a_hang_is_stopped_by_the_deadline_and_the_next_job_measures(tmp_path: Path) -> None:
    start = time.monotonic()
    proc = run_check_process(fault_cfg("transpose_hang", check_s=8), "external", ns(tmp_path, "external"), timeout=120)
    took = time.monotonic() - start
    assert proc.returncode == 124, proc.stderr[-2000:]
    assert "did not finish within 8 s (a hung kernel?)" in proc.stderr
    assert took < 60
    after = run_check_process(fault_cfg("transpose_hang"), "cuda", ns(tmp_path, "cuda"))
    assert after.returncode == 0, after.stderr[-2000:]
