"""Fault injection on the CPU (issue #7): a kernel with the wrong answer stops that implementation
alone and leaves no timing of it anywhere; a crash fails its own job in one sentence; a hang is
stopped by the deadline. The GPU side is faked only where this machine has no GPU: run_check is
replaced by what it returns (or raises) on the GPU for such a kernel. tests/test_faults_gpu.py runs
the same faults on a real GPU with planted kernels."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness import ROOT, config
from harness.errors import EvidenceError, GPUFault
from harness.gpu import deadline as watchdog
from harness.io import write_csv
from harness.measure import step as measure_step
from harness.report import render as report
from harness.tables import derive as tables
from harness.tables import step as tables_step

OP, SHAPE = "layernorm", "4096x768"


@pytest.fixture()
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("EVIDENCE_LOCK_DIR", str(tmp_path / "locks"))
    return config.validate(yaml.safe_load((ROOT / "config.yaml").read_text()))


def record(impl: str, passed: bool) -> dict:
    return {"op": OP, "shape": SHAPE, "impl": impl, "passed": passed, "max_abs_err": 0.0 if passed else 0.37,
            "max_rel_err": 1e-7 if passed else 0.5, "rel_l2_err": 1e-8 if passed else 0.2, "atol": 1e-4, "rtol": 1e-4,
            "nonfinite_outputs": 0, "unwritten_outputs": 0 if passed else 4096, "elements": 3145728}


def ns_path(tmp: Path, *parts: str) -> str:
    path = tmp / "artifacts" / "ns" / Path(*parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path)


def test_wrong_answer_is_recorded_not_raised(cfg: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("harness.measure.step.run_check", lambda *a: record("cuda", False))
    out = ns_path(tmp_path, "check", OP, SHAPE, "cuda.json")
    measure_step.check(cfg, OP, SHAPE, "cuda", out)
    rec = json.loads(Path(out).read_text())
    assert rec["passed"] is False
    assert rec["error"].startswith(f"check failed for {OP} {SHAPE} cuda: max abs error 0.37")
    assert "4096 unwritten outputs; nothing of it is captured or timed." in rec["error"]


@pytest.mark.parametrize("message", ["CUDA error: an illegal memory access was encountered",
                                     "cudaErrorIllegalAddress: an illegal memory access was encountered"])
def test_a_crash_fails_its_own_job_in_one_sentence(cfg: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   message: str) -> None:
    def crash(*a: object) -> dict:
        raise RuntimeError(message + "\nCompile with TORCH_USE_CUDA_DSA to enable device-side assertions.")

    monkeypatch.setattr("harness.measure.step.run_check", crash)
    out = ns_path(tmp_path, "check", OP, SHAPE, "cuda.json")
    with pytest.raises(GPUFault) as err:
        measure_step.check(cfg, OP, SHAPE, "cuda", out)
    text = str(err.value)
    assert text.startswith(f"{OP} {SHAPE} cuda crashed on the GPU (RuntimeError: ") and "\n" not in text
    assert not Path(out).exists()


def test_a_crash_ends_the_process_after_its_sentence_without_teardown(tmp_path: Path) -> None:
    """After a GPU fault the CUDA context is dead; the interpreter's teardown would make the
    libraries unload modules from it and print their own tracebacks after our sentence (seen on
    the H200 with CuPy). The job ends at once: its sentence is the last line, no exit hook runs."""
    import subprocess
    import sys

    code = ("import atexit; from harness.jobs import run_step; from harness.errors import GPUFault\n"
            "atexit.register(lambda: print('teardown ran', flush=True))\n"
            "def step():\n    raise GPUFault('transpose 1024x1024 external crashed on the GPU (planted).')\n"
            f"run_step({str(tmp_path / 'job.log')!r}, step)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "transpose 1024x1024 external crashed on the GPU (planted)."
    assert "teardown ran" not in proc.stdout + proc.stderr
    assert (tmp_path / "job.log").read_text().strip() == "transpose 1024x1024 external crashed on the GPU (planted)."


def test_an_ordinary_bug_is_not_disguised_as_a_crash(cfg: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def bug(*a: object) -> dict:
        raise KeyError("eps")

    monkeypatch.setattr("harness.measure.step.run_check", bug)
    with pytest.raises(KeyError):
        measure_step.check(cfg, OP, SHAPE, "cuda", ns_path(tmp_path, "check", OP, SHAPE, "cuda.json"))


def test_the_deadline_stops_a_hang_with_status_124() -> None:
    import threading

    stopped: list[int] = []
    done = threading.Event()

    def stop(status: int) -> None:
        stopped.append(status)
        done.set()

    with watchdog.deadline(0.05, "the check of layernorm 4096x768 cuda", stop=stop):
        assert done.wait(5), "the deadline never fired"
    assert stopped == [124]
    stopped.clear()
    with watchdog.deadline(5, "quick", stop=stop):
        pass
    assert not stopped  # a block that ends in time is never stopped


def failed_namespace(cfg: dict, tmp: Path) -> dict[str, str]:
    """The pipeline's steps after a check failed for cuda and passed for triton and torch: capture
    records, kernel times, counters and tables, with real H200 exports standing for the captures."""
    fix = ROOT / "tests" / "fixtures" / "nsys"
    details, checks, metas = [], [], []
    for impl in ("cuda", "triton", "torch"):
        check = ns_path(tmp, "check", OP, SHAPE, f"{impl}.json")
        Path(check).write_text(json.dumps({**record(impl, impl != "cuda"), "error": "" if impl != "cuda" else "check failed for layernorm 4096x768 cuda: planted"}))
        checks.append(check)
        meta = ns_path(tmp, "capture", OP, SHAPE, f"{impl}.json")
        if impl == "cuda":
            Path(meta).with_suffix(".sqlite").write_bytes(b"stale export of an earlier run")
            measure_step.capture(cfg, OP, SHAPE, impl, meta, str(tmp / "log.txt"), check)
        else:  # what a capture leaves: the export, then the record
            Path(meta).with_suffix(".sqlite").write_bytes((fix / f"h200-pipeline-layernorm-{SHAPE}-{impl}.sqlite").read_bytes())
            Path(meta).write_text(json.dumps({"op": OP, "shape": SHAPE, "impl": impl, "measured": True}))
        metas.append(meta)
        detail = ns_path(tmp, "kernel_time", OP, SHAPE, f"{impl}.csv")
        tables_step.kernel_time(meta, "capture", 100, OP, SHAPE, impl, detail)
        details.append(detail)
    span = ns_path(tmp, "span", OP, f"{SHAPE}.csv")
    write_csv([{"namespace": "ns", "op": OP, "shape": SHAPE, "impl": i, "cache_mode": "hot", "samples": 300,
                       "rounds": 3, "span_mean_us": 20.0, "span_median_us": 19.5, "span_std_us": 0.4,
                       "span_min_us": 18.0, "span_max_us": 25.0} for i in ("triton", "torch")], tables.SPAN_COLUMNS, span)
    ceilings = ns_path(tmp, "tables", "ceilings.csv")
    write_csv([], tables.CEILING_COLUMNS, ceilings)
    outputs = {k: ns_path(tmp, "tables", f"{k}.csv") for k in ("kernel_time", "kernel_time_detail", "span", "check",
                                                                 "sweep", "gpu_state", "cross_check", "variants")}
    tables_step.all_tables(cfg, details, [span], checks, ceilings, outputs, metas, [])
    return {**outputs, "ceilings": ceilings, "cuda_meta": metas[0], "cuda_detail": details[0]}


def test_a_failed_implementation_has_no_timing_anywhere(cfg: dict, tmp_path: Path) -> None:
    cfg["operations"] = {OP: {**cfg["operations"][OP], "sweep": [SHAPE]}}
    cfg["variants"] = []
    out = failed_namespace(cfg, tmp_path)
    meta = json.loads(Path(out["cuda_meta"]).read_text())
    assert meta["measured"] is False and meta["reason"].endswith("planted")
    assert not Path(out["cuda_meta"]).with_suffix(".sqlite").exists()  # the stale export is gone
    assert pd.read_csv(out["cuda_detail"]).empty
    for name in ("kernel_time", "kernel_time_detail", "span", "cross_check", "gpu_state"):
        frame = pd.read_csv(out[name])
        assert "cuda" not in set(frame.get("impl", [])), name
    assert set(pd.read_csv(out["kernel_time"])["impl"]) == {"triton", "torch"}
    check = pd.read_csv(out["check"]).set_index("impl")
    assert not check.loc["cuda", "passed"] and check.loc["cuda", "error"].endswith("planted")
    sweep = pd.read_csv(out["sweep"]).iloc[0]
    assert pd.isna(sweep["cuda_us"]) and pd.isna(sweep["cuda_over_triton"])


def test_the_report_lists_the_failure_with_its_error(cfg: dict, tmp_path: Path) -> None:
    cfg["operations"] = {OP: {**cfg["operations"][OP], "sweep": [SHAPE]}}
    cfg["variants"] = []
    cfg["counters"]["enabled"] = False
    out = failed_namespace(cfg, tmp_path)
    census = ns_path(tmp_path, "tables", "census.csv")
    write_csv([], ["namespace", "op", "impl", "kernel", "shapes"], census)
    prov = ns_path(tmp_path, "provenance.json")
    Path(prov).write_text(json.dumps({"git": {"commit": "abc", "dirty": False}, "date_utc": "2026-11-29", "gpus": [],
                                      "config": cfg, "commands": [], "gpu_state_before_captures": [],
                                      "versions": {"nsys": "2025.3.1", "torch": "2.11", "triton": "3.6",
                                                   "cupy-cuda13x": "14", "python": "3.12"}}))
    inputs = {k: v for k, v in out.items() if k in report.TABLES}
    inputs.update(census=census, provenance=prov)
    report.render_reports(cfg, inputs, tmp_path / "fn.md", tmp_path / "ic.md", [str(tmp_path / "f" / f"{OP}_sweep.svg")])
    note = (tmp_path / "fn.md").read_text()
    assert "**Not every implementation passed its check; see the check table.**" in note
    assert "- cuda at 4096x768: check failed for layernorm 4096x768 cuda: planted" in note
    assert "| 4096x768 | cuda | **no** |" in note
    kt = pd.read_csv(out["kernel_time"]).set_index("impl")
    assert f"**{report.num(kt.loc['triton', 'kernel_time_us'])} µs** for our Triton kernel" not in note  # no claim without cuda
    assert "No claim: the comparison lacks a cuda or triton measurement at the default shape." in note


def test_counters_of_a_failed_implementation_say_not_measured(cfg: dict, tmp_path: Path) -> None:
    check = ns_path(tmp_path, "check", OP, SHAPE, "cuda.json")
    Path(check).write_text(json.dumps({**record("cuda", False), "error": "check failed: planted"}))
    raw, table = ns_path(tmp_path, "counters", OP, SHAPE, "cuda.raw.csv"), ns_path(tmp_path, "counters", OP, SHAPE, "cuda.csv")
    measure_step.counters(cfg, OP, SHAPE, "cuda", raw, table, str(tmp_path / "log"), check)
    rows = list(csv.DictReader(open(table)))
    assert rows[0]["status"] == "not measured" and rows[0]["duration_ns"] == ""


def test_a_capture_record_without_its_export_is_one_sentence(tmp_path: Path) -> None:
    meta = ns_path(tmp_path, "capture", OP, SHAPE, "cuda.json")
    Path(meta).write_text(json.dumps({"op": OP, "measured": True}))
    with pytest.raises(EvidenceError, match="has no export cuda.sqlite beside it"):
        tables_step.kernel_time(meta, "capture", 100, OP, SHAPE, "cuda", ns_path(tmp_path, "kt.csv"))
