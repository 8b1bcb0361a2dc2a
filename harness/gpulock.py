"""One measurement at a time on a GPU, across processes: a file lock keyed by the device's UUID.

Every GPU job (check, capture, span, ceilings) and every GPU test holds it while it uses the GPU,
so two snakemake invocations, or a run and a test, never measure at once on the same device.
Snakemake's `gpu` resource serialises the jobs of one invocation; this lock covers the rest. A
second holder waits up to its timeout, then fails with one sentence naming who holds the GPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import filelock

from harness.errors import EvidenceError

DEFAULT_TIMEOUT_S = 1800.0


def lock_dir() -> Path:
    """Where the locks live: $EVIDENCE_LOCK_DIR, else a folder in the system's temporary directory
    (shared by every process of the host)."""
    return Path(os.environ.get("EVIDENCE_LOCK_DIR") or Path(tempfile.gettempdir()) / "kernel-evidence-locks")


def device_uuid() -> str:
    """UUID of the GPU this process will use: the first entry of CUDA_VISIBLE_DEVICES (an index or
    a UUID), read through NVML; without NVML, a name derived from that entry."""
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    if first.startswith(("GPU-", "MIG-")):
        return first
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(int(first)))
        finally:
            pynvml.nvmlShutdown()
        return uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    except Exception:  # no NVML (no GPU, or no driver): still one lock per visible device index
        return f"device-{first}"


def _holder_text(info_path: Path) -> str:
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError):
        return "an unknown process"
    since = time.strftime("%H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid')} ({info.get('what')}) since {since}"


@contextlib.contextmanager
def gpu_lock(what: str, timeout_s: float = DEFAULT_TIMEOUT_S, uuid: str | None = None) -> Iterator[str]:
    """Hold the lock of the GPU (by UUID) for the duration; yields the UUID. Waits up to
    `timeout_s` for another holder, then raises EvidenceError naming it."""
    uuid = uuid or device_uuid()
    folder = lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", uuid)
    lock = filelock.FileLock(folder / f"{name}.lock")
    info = folder / f"{name}.holder.json"
    try:
        lock.acquire(timeout=timeout_s)
    except filelock.Timeout:
        raise EvidenceError(
            f"GPU {uuid} stayed busy for {timeout_s:.0f} s, held by {_holder_text(info)}; one measurement "
            f"at a time: wait for it to finish, or remove {folder} if no such process exists.") from None
    try:
        info.write_text(json.dumps({"pid": os.getpid(), "what": what, "since": time.time(), "uuid": uuid}))
        yield uuid
    finally:
        info.unlink(missing_ok=True)
        lock.release()
