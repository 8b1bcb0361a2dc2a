"""Fault injection on the CPU (issue #7). In the group process (harness.measure.group), a kernel
with the wrong answer fails its own check alone; a crash, or a check that hangs past its deadline,
ends the process at once in one sentence with the culprit named in its progress file (the measure
step then measures the group again without it: tests/test_measure_step.py::
test_a_crash_is_recorded_and_the_rest_measured); an ordinary bug is not disguised as a crash. The
GPU side is faked only where this machine has no GPU: run_check is replaced by what it returns (or
raises, or how it hangs) on the GPU for such a kernel. Through the measure step (stand-in device,
tests/standin_measure.py), an implementation whose check failed has no timing in any table, and no
counters. tests/test_faults_gpu.py runs the same faults on a real GPU with planted kernels.

Gone with the per-job steps: the report's list of failed checks is tested from a namespace's tables
by tests/test_report.py (test_flags_lead_the_issue_comment: "Not every implementation passed its
check", no ratio where cuda failed; test_the_first_screen_holds_the_claims_counts_flags_and_contents:
the "Check failed: ..." flag) and end to end by tests/test_pipeline_cpu.py
(test_the_main_command_leaves_the_reports_tables_and_summary, whose cuda.wrong fails its check). A
capture record without its export is no longer a state the tables step reads: it derives the tables
from launches.csv, which the measure step writes with the export, after removing both."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import standin_measure as sm
import standin_ncu

from harness import ROOT, config
from harness.gpu import deadline as watchdog
from harness.measure import group
from harness.tables import derive
from harness.tables import step as tables_step

OP, SHAPE = sm.OP, sm.SHAPE
WRONG: dict[str, dict[str, Any]] = {"wrong": {"base": "cuda", "defines": {}}}  # the stand-in device fails cuda.wrong's check


def record(impl: str, passed: bool) -> dict:
    """What run_check returns on the GPU for an implementation that passes, or that leaves 4096
    outputs unwritten."""
    return {"op": OP, "shape": SHAPE, "impl": impl, "passed": passed, "max_abs_err": 0.0 if passed else 0.37,
            "max_rel_err": 1e-7 if passed else 0.5, "rel_l2_err": 1e-8 if passed else 0.2, "atol": 1e-4, "rtol": 1e-4,
            "nonfinite_outputs": 0, "unwritten_outputs": 0 if passed else 4096, "elements": 3145728}


def plan(impls: list[str], **extra: object) -> dict:
    return {"op": OP, "shape": SHAPE, "impls": impls, "params": {}, "seed": 1, **extra}


# ----------------------------------------------------------------------------------------- the group process


def test_wrong_answer_is_recorded_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group, "run_check", lambda op, shape, impl, *a: record(impl, impl != "cuda"))
    out = group.checks(plan(["cuda", "triton"]), group.Progress(tmp_path / "progress.json"))
    assert out["cuda"]["passed"] is False and out["triton"]["passed"] is True  # the next one is still checked
    assert out["cuda"]["error"].startswith(f"check failed for {OP} {SHAPE} cuda: max abs error 0.37")
    assert "4096 unwritten outputs; nothing of it is captured or timed." in out["cuda"]["error"]
    assert out["triton"]["error"] == ""


GROUP_PROCESS = """
import atexit, json, sys, time
from harness.measure import group
atexit.register(lambda: print("teardown ran", flush=True))
def fault(op, shape, impl, *a):
    if impl != "cuda":
        return {{"op": op, "shape": shape, "impl": impl, "passed": True}}
    {fault}
group.run_check = fault
group.checks(json.loads(sys.argv[1]), group.Progress(sys.argv[2]))
print("the checks returned", flush=True)
"""


def group_process(tmp: Path, fault: str, **extra: object) -> tuple[subprocess.CompletedProcess[str], dict]:
    """The group's checks in a process of their own, cuda's check doing `fault`: (the process, its
    progress file)."""
    progress = tmp / "progress.json"
    proc = subprocess.run([sys.executable, "-c", GROUP_PROCESS.format(fault=fault),
                           json.dumps(plan(["cuda", "triton"], **extra)), str(progress)],
                          check=False, capture_output=True, text=True, timeout=120, cwd=ROOT)
    return proc, json.loads(progress.read_text())


@pytest.mark.parametrize("message", ["CUDA error: an illegal memory access was encountered",
                                     "cudaErrorIllegalAddress: an illegal memory access was encountered"])
def test_a_crash_ends_the_group_process_in_one_sentence(tmp_path: Path, message: str) -> None:
    """After a GPU fault the CUDA context is dead: the process names the culprit in its progress file
    (which the measure step reads), prints its sentence last, and exits without teardown."""
    proc, progress = group_process(tmp_path, f"raise RuntimeError({message!r} + '\\nCompile with TORCH_USE_CUDA_DSA "
                                             "to enable device-side assertions.')")
    assert proc.returncode == 3
    sentence = proc.stderr.strip().splitlines()[-1]
    assert sentence.startswith(f"{OP} {SHAPE} cuda crashed on the GPU (RuntimeError: ") and sentence.endswith(".")
    assert progress == {"step": "crashed", "op": OP, "shape": SHAPE, "impl": "cuda", "message": sentence}
    assert "teardown ran" not in proc.stdout + proc.stderr and "the checks returned" not in proc.stdout


def test_a_hung_check_is_stopped_by_its_deadline(tmp_path: Path) -> None:
    """A check still running past the plan's check_s (a hung kernel) ends the process with status
    124, recorded like a crash, so the GPU and its lock are released and the group is measured again
    without it."""
    proc, progress = group_process(tmp_path, "time.sleep(60)", check_s=0.5)
    assert proc.returncode == 124
    sentence = proc.stderr.strip().splitlines()[-1]
    assert sentence.startswith(f"{OP} {SHAPE} cuda ") and "0.5 s" in sentence
    assert progress == {"step": "crashed", "op": OP, "shape": SHAPE, "impl": "cuda", "message": sentence}
    assert "the checks returned" not in proc.stdout


def test_an_ordinary_bug_is_not_disguised_as_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def bug(*a: object) -> dict:
        raise KeyError("eps")

    monkeypatch.setattr(group, "run_check", bug)
    with pytest.raises(KeyError):
        group.checks(plan(["cuda"]), group.Progress(tmp_path / "progress.json"))
    assert json.loads((tmp_path / "progress.json").read_text()) == {"step": "check", "op": OP, "shape": SHAPE,
                                                                    "impl": "cuda"}  # not "crashed"


def test_a_crash_ends_the_process_after_its_sentence_without_teardown(tmp_path: Path) -> None:
    """After a GPU fault the CUDA context is dead; the interpreter's teardown would make the
    libraries unload modules from it and print their own tracebacks after our sentence (seen on
    the H200 with CuPy). The job ends at once: its sentence is the last line, no exit hook runs."""
    code = ("import atexit; from harness.jobs import run_step; from harness.errors import GPUFault\n"
            "atexit.register(lambda: print('teardown ran', flush=True))\n"
            "def step():\n    raise GPUFault('transpose 1024x1024 external crashed on the GPU (planted).')\n"
            f"run_step({str(tmp_path / 'job.log')!r}, step)\n")
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "transpose 1024x1024 external crashed on the GPU (planted)."
    assert "teardown ran" not in proc.stdout + proc.stderr
    assert (tmp_path / "job.log").read_text().strip() == "transpose 1024x1024 external crashed on the GPU (planted)."


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


# ----------------------------------------------------------------------------------------- through the steps


@pytest.fixture()
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return sm.use_standin_nsys(tmp_path, monkeypatch)


def test_a_failed_implementation_has_no_timing_anywhere(tmp: Path) -> None:
    folder = sm.group_dir(tmp)
    folder.mkdir(parents=True)  # an earlier run of the group, in which cuda.wrong was timed
    (folder / "launches.csv").write_text("op,shape,impl,round,kernel,short_name,duration_ns,grid,block,registers,"
                                         f"static_smem,dynamic_smem\n{OP},{SHAPE},cuda.wrong,0,k,k,5000,1x1x1,1x1x1,32,0,0\n")
    impls = ["cuda", "triton", "torch", "cuda.wrong"]
    measured = sm.run_measure(tmp, impls, plan=sm.variants_plan(WRONG))
    assert measured["passed"] == ["cuda", "triton", "torch"]
    for name in ("launches", "spans", "graph"):
        assert "cuda.wrong" not in set(pd.read_csv(derive.group_files(folder)[name])["impl"]), name
    cfg = sm.cfg()
    outputs = {name: str(tmp / "tables" / f"{name}.csv") for name in derive.TABLES}
    tables_step.namespace_tables([str(p) for p in derive.group_files(folder).values()], None, outputs,
                                 namespace=sm.NS, cache_mode=cfg["cache_mode"],
                                 descriptions=config.variant_descriptions(cfg),
                                 cross_check={k: cfg["cross_check"][k] for k in ("rtol", "atol_us_per_kernel")},
                                 margin=cfg["verdict"]["margin"])
    frames = {name: pd.read_csv(path) for name, path in outputs.items()}
    for name in ("kernel_time", "kernel_time_detail", "rounds", "span", "cross_check", "gpu_state"):
        assert set(frames[name]["impl"]) == {"cuda", "triton", "torch"}, name
    assert "cuda.wrong" not in set(frames["variants"]["variant"])
    check = frames["check"].set_index("impl")
    assert not check.loc["cuda.wrong", "passed"] and check.loc["cuda", "passed"]
    assert check.loc["cuda.wrong", "error"].startswith(f"check failed for {OP} {SHAPE} cuda.wrong: ")


def test_counters_of_a_group_where_every_check_failed_say_not_measured_without_ncu(tmp: Path) -> None:
    sm.run_measure(tmp, ["cuda.wrong"], plan=sm.variants_plan(WRONG))
    ncu = standin_ncu.install(tmp / "ncu-bin", "crash")  # would fail the job, were it started
    raw, table, _ = sm.run_counters(tmp, ["cuda.wrong"], ncu=str(ncu))
    with open(table) as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["impl"] == "cuda.wrong" and row["status"] == "not measured" and row["duration_ns"] == ""
    assert Path(raw).read_text() == "" and not (ncu.parent / "ncu-seen.json").exists()
