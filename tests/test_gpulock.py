"""The GPU lock: one holder per device UUID across processes; a second waits, then fails naming
the holder; different devices do not block each other."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import EvidenceError
from harness.gpulock import device_uuid, gpu_lock

HOLD = """
import sys, time
from harness.gpulock import gpu_lock
with gpu_lock("holder in another process", uuid=sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture(autouse=True)
def private_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EVIDENCE_LOCK_DIR", str(tmp_path / "locks"))
    return tmp_path / "locks"


def hold_elsewhere(uuid: str, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, uuid, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_second_holder_fails_naming_the_first() -> None:
    proc = hold_elsewhere("GPU-test-1", 5)
    try:
        t0 = time.monotonic()
        with pytest.raises(EvidenceError) as info:
            with gpu_lock("capture layernorm", timeout_s=0.5, uuid="GPU-test-1"):
                pass
        assert time.monotonic() - t0 >= 0.5
        msg = str(info.value)
        assert "GPU-test-1" in msg and f"pid {proc.pid}" in msg and "holder in another process" in msg
    finally:
        proc.kill()
        proc.wait()


def test_waiting_holder_gets_the_lock_when_released() -> None:
    proc = hold_elsewhere("GPU-test-2", 1.0)
    try:
        t0 = time.monotonic()
        with gpu_lock("check", timeout_s=30, uuid="GPU-test-2") as uuid:
            assert uuid == "GPU-test-2"
            assert time.monotonic() - t0 > 0.5  # we only got in once the holder let go
    finally:
        proc.wait()


def test_other_devices_do_not_block() -> None:
    proc = hold_elsewhere("GPU-test-3", 5)
    try:
        with gpu_lock("span", timeout_s=0.2, uuid="GPU-test-4"):
            pass
    finally:
        proc.kill()
        proc.wait()


def test_lock_is_released_after_an_error(private_lock_dir: Path) -> None:
    with pytest.raises(RuntimeError):
        with gpu_lock("failing job", uuid="GPU-test-5"):
            raise RuntimeError("kernel crashed")
    with gpu_lock("next job", timeout_s=0.2, uuid="GPU-test-5"):
        pass
    assert not list(private_lock_dir.glob("*.holder.json"))


def test_device_uuid_from_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0e6d6c59-7f0a,GPU-other")
    assert device_uuid() == "GPU-0e6d6c59-7f0a"
