"""Interruption and concurrency with real Snakemake runs on the CPU (issue #7): the census target
(an offline build of every kernel, no GPU) is interrupted with Ctrl-C (SIGINT) mid-run and leaves no
census a later run would trust, and the same command then completes; a second invocation in the
same folder while one runs is refused and writes nothing."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness import ROOT
from harness.build.compile import load_nvrtc

pytestmark = pytest.mark.skipif(load_nvrtc() is None, reason="the census builds CUDA kernels with NVRTC")

SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]


def workdir(tmp: Path) -> Path:
    """A working folder with the shipped config (the Snakefile's `configfile: config.yaml` and
    every output path are relative to it)."""
    shutil.copy(ROOT / "config.yaml", tmp / "config.yaml")
    return tmp


LAYERNORM_VARIANTS = [f"layernorm.{name}" for name in
                      yaml.safe_load((ROOT / "config.yaml").read_text())["operations"]["layernorm"]["variants"]]


def census(tmp: Path, *extra: str, namespace: str = "interrupted") -> list[str]:
    """The census of the layer-norm kernels (every defined variant too, so the run lasts long enough
    for a second invocation to meet its lock) and the transpose kernels, in `namespace`."""
    return [*SNAKEMAKE, "--directory", str(tmp), "--cores", "1", "census", "--config", f"namespace={namespace}",
            "run_operations=[layernorm,transpose]", f"variants=[{','.join(LAYERNORM_VARIANTS)}]", *extra]


def builds(tmp: Path) -> list[Path]:
    return sorted((tmp / "artifacts" / "interrupted" / "build").glob("*/*/census.json"))


def wait_for(predicate, timeout: float = 120.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_ctrl_c_leaves_nothing_to_trust_and_the_same_command_completes(tmp_path: Path) -> None:
    tmp = workdir(tmp_path)
    proc = subprocess.Popen(census(tmp), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert wait_for(lambda: len(builds(tmp)) >= 1), "no build finished"
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out[-2000:]
    finished = builds(tmp)
    for path in finished:  # every census that exists is complete
        assert json.loads(path.read_text()), path
    assert not list((tmp / "artifacts").rglob("*.partial*"))
    assert not (tmp / "artifacts" / "interrupted" / "tables" / "census.csv").exists()
    again = subprocess.run([*census(tmp), "--rerun-incomplete"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (tmp / "artifacts" / "interrupted" / "tables" / "census.csv").is_file()
    assert len(builds(tmp)) > len(finished)


def test_a_second_run_of_the_same_namespace_is_refused(tmp_path: Path) -> None:
    """Snakemake locks the outputs of a running invocation: a second one that would write the same
    namespace stops in one sentence and touches nothing. (Runs of two namespaces may proceed side by
    side; their GPU jobs then wait for each other on the GPU lock, tests/test_gpulock.py.)"""
    tmp = workdir(tmp_path)
    first = subprocess.Popen(census(tmp), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for(lambda: any((tmp / ".snakemake" / "locks").glob("*"))), "the first run took no lock"
        before = {p: p.stat().st_mtime_ns for p in builds(tmp)}
        second = subprocess.run(census(tmp), capture_output=True, text=True, timeout=300)
        assert second.returncode != 0
        assert "cannot be locked" in (second.stdout + second.stderr)
        assert all(p.stat().st_mtime_ns == t for p, t in before.items())  # nothing of the first run rewritten
    finally:
        out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-2000:]
