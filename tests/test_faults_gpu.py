"""Fault injection on the GPU, with the planted kernels of tests/fixtures/faults/transpose_faults.cu
loaded as the external transpose, each in one real measurement group beside our CUDA kernel: a
wrong answer fails its check and is recorded; a crash and a hang are recorded as failed checks
(the group process ends, and the step measures the group again without them); our kernel is
measured every time."""

from __future__ import annotations

import time
from pathlib import Path

import gpu_group
import pandas as pd
import pytest

PTX = "tests/fixtures/faults/transpose_faults.ptx"
SHAPE = "1024x1024"
HANG_S = 4
"""The hang test's check deadline: a good check of this shape takes well under a second, so the
hung kernel is stopped a few seconds in, and the test costs that wait once."""

pytestmark = pytest.mark.gpu


def fault_cfg(entry: str) -> dict:
    cfg = gpu_group.cfg_with(capture={"warmup": 2, "rounds": 3, "round_us": 50, "max_calls": 5},
                             span={"samples": 6, "rounds": 3, "warmup": 1}, cross_check={"enabled": False})
    cfg["operations"]["transpose"]["external"].update(path=PTX, entry=entry)
    return cfg


def measured(folder: Path) -> set[str]:
    return set(pd.read_csv(folder / "launches.csv")["impl"])


def test_off_by_one_fails_its_check_and_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record, folder = gpu_group.measure(tmp_path, monkeypatch, fault_cfg("transpose_off_by_one"), "transpose", SHAPE,
                                       ["cuda", "external"])
    check = record["checks"]["external"]
    assert check["passed"] is False and check["max_abs_err"] > 0.1
    assert check["error"].startswith(f"check failed for transpose {SHAPE} external")
    assert record["passed"] == ["cuda"] and measured(folder) == {"cuda"}


def test_a_crash_is_recorded_and_the_group_measured_without_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record, folder = gpu_group.measure(tmp_path, monkeypatch, fault_cfg("transpose_crash"), "transpose", SHAPE,
                                       ["external", "cuda"])
    assert list(record["crashed"]) == ["external"]
    assert record["checks"]["external"]["error"].startswith(f"transpose {SHAPE} external crashed on the GPU (")
    assert record["passed"] == ["cuda"] and measured(folder) == {"cuda"}


def test_a_hang_is_stopped_by_the_check_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    start = time.monotonic()
    record, folder = gpu_group.measure(tmp_path, monkeypatch, fault_cfg("transpose_hang"), "transpose", SHAPE,
                                       ["external", "cuda"], check_s=HANG_S)
    assert time.monotonic() - start < 120
    assert f"did not finish its check within {HANG_S} s (a hung kernel?)" in record["checks"]["external"]["error"]
    assert record["passed"] == ["cuda"] and measured(folder) == {"cuda"}
