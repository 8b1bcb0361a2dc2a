"""Interruption and concurrency with real Snakemake runs on the CPU (issue #7), in a copy of the
repository with the stand-in device (tests/repo_copy.py, tests/fake_device.py: layernorm at two
shapes, measured by one session job): SIGINT to Snakemake alone while the session is measured stops
the run, leaves nothing a later run trusts (the session's files are marked incomplete), and the
same command then measures the session again and completes; a second invocation in the same
folder while one runs is refused and writes nothing.

Ctrl-C at a terminal (SIGINT to the whole process group):
tests/test_pipeline_cpu.py::test_ctrl_c_to_the_process_group_then_the_same_command_finishes.

The session is slowed down by a file `sleep-s` beside the stand-in nsys (tests/fake_device.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import fake_device
import pytest
import repo_copy

from harness.build.toolchain import load_nvrtc

pytestmark = pytest.mark.skipif(load_nvrtc() is None, reason="the runs build the CUDA kernels with NVRTC")

@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """(the repository copy, its environment, the folder of the stand-in nsys)."""
    work = tmp_path_factory.mktemp("interrupt")
    repo = repo_copy.copy_repo(work / "repo")
    (repo / "config.yaml").write_text(repo_copy.pipeline_config())
    env = repo_copy.standin_env(repo, work)
    return repo, env, work / "bin"


@pytest.fixture()
def slow_groups(copy):  # type: ignore[no-untyped-def]
    """Every group takes a few seconds (4, or what the test writes there), for the length of the test."""
    sleep = copy[2] / "sleep-s"
    sleep.write_text("4")
    yield sleep
    sleep.unlink(missing_ok=True)


def report(ns: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--cores", "1", "report", "--config", f"namespace={ns}", *extra]


def wait_for(predicate, timeout: float = 300.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def measuring(art: Path) -> bool:
    """The session is being measured: its plan is written, the stand-in nsys runs it."""
    return (art / "measure" / "session.plan.json").is_file()


def test_sigint_leaves_nothing_to_trust_and_the_same_command_completes(copy, slow_groups) -> None:  # type: ignore[no-untyped-def]
    repo, env, _ = copy
    ns = "cpu-sigint"
    art = repo / "artifacts" / ns
    proc = subprocess.Popen(report(ns), cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for(lambda: measuring(art)), "the session never started"
        proc.send_signal(signal.SIGINT)  # to Snakemake alone
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-2000:]
    assert not fake_device.measuring(copy[2]), "the interrupted run left its capture running"
    assert not list(art.rglob("*.partial*")) and not (art / "tables" / "kernel_time.csv").exists()
    # the same command measures the interrupted session again (its files are not trusted); the GPU
    # lock went with the job (a held lock would stop it in 5 s, in a sentence)
    again = subprocess.run(report(ns, "gpu_lock_timeout_s=5"), check=False, cwd=repo, env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    counts = repo_copy.job_counts(again.stdout + again.stderr)
    assert counts["measure"] == 1, counts
    assert (repo / "report" / ns / "field_note.md").is_file()


def test_a_second_run_of_the_same_namespace_is_refused(copy, slow_groups) -> None:  # type: ignore[no-untyped-def]
    """Snakemake locks the outputs of a running invocation: a second one that would write the same
    namespace stops in one sentence and touches nothing. (Runs of two namespaces may proceed side by
    side; their GPU jobs then wait for each other on the GPU lock, tests/test_gpulock.py.)"""
    repo, env, _ = copy
    slow_groups.write_text("8")  # the first run outlasts the second one's start-up
    ns = "cpu-locked"
    art = repo / "artifacts" / ns
    first = subprocess.Popen(report(ns), cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for(lambda: any((repo / ".snakemake" / "locks").glob("*")) and measuring(art)
                        and any(art.glob("build/*/census.json"))), "the first run took no lock"
        finished = list(art.glob("build/*/census.json"))  # outputs of the jobs done so far
        assert finished
        before = {p: p.stat().st_mtime_ns for p in finished}
        second = subprocess.run(report(ns), check=False, cwd=repo, env=env, capture_output=True, text=True,
                                timeout=300)
        assert second.returncode != 0
        assert "cannot be locked" in (second.stdout + second.stderr)
        assert {p: p.stat().st_mtime_ns for p in finished} == before  # nothing rewritten by it
    finally:
        out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-2000:]
    assert len(list(art.glob("measure/*/*/record.json"))) == 2
