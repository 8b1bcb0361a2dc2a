"""One measurement at a time on a GPU, across processes: a file lock keyed by the device's UUID.

Every GPU job (check, capture, span, ceilings) and every GPU test holds it while it uses the GPU,
so two snakemake invocations, or a run and a test, never measure at once on the same device.
Snakemake's `gpu` resource serialises the jobs of one invocation; this lock covers the rest. A
second holder waits up to its timeout, then fails with one sentence naming who holds the GPU.

Several GPUs on one host (`snakemake --resources gpu=K`): the jobs whose numbers are compared with
each other (the checks, captures and span of one operation and shape: one measurement group) must
measure on one GPU. `group_gpu_lock` pins a group to a device: the group's first job picks a free
one (the device with the fewest groups of the namespace first) and notes it in the group's record
(`<namespace>/logs/gpu/<op>/<shape>.json`); every later job of the group goes back to that device,
waiting for it if another group holds it, and the job's GPU work sees only that device
(CUDA_VISIBLE_DEVICES is set to its UUID while the lock is held). With one device visible (one
GPU, or a cluster allocation of one) it is `gpu_lock` exactly, plus the note in the record.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import filelock

from harness.errors import EvidenceError
from harness.gpu.device import nvml

DEFAULT_TIMEOUT_S = 1800.0


def lock_dir() -> Path:
    """Where the locks live: $EVIDENCE_LOCK_DIR, else a folder in the system's temporary directory
    (shared by every process of the host)."""
    return Path(os.environ.get("EVIDENCE_LOCK_DIR") or Path(tempfile.gettempdir()) / "kernel-evidence-locks")


def _text(uuid: Any) -> str:
    """A UUID as NVML returns it (bytes in older pynvml), as text."""
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def device_uuid() -> str:
    """UUID of the GPU this process will use: the first entry of CUDA_VISIBLE_DEVICES (an index or
    a UUID), read through NVML; without NVML, a name derived from that entry."""
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    if first.startswith(("GPU-", "MIG-")):
        return first
    try:
        return _text(nvml(lambda n: n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(int(first)))))
    except Exception:  # no NVML (no GPU, or no driver): still one lock per visible device index
        return f"device-{first}"


def _holder_text(info_path: Path) -> str:
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError):
        return "an unknown process"
    since = time.strftime("%H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid')} ({info.get('what')}) since {since}"


def _device_lock(uuid: str) -> tuple[filelock.FileLock, Path, Path]:
    """The lock of one device (by UUID), its holder note, and the folder they live in."""
    folder = lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", uuid)
    return filelock.FileLock(folder / f"{name}.lock"), folder / f"{name}.holder.json", folder


def _note_holder(info: Path, what: str, uuid: str) -> None:
    info.write_text(json.dumps({"pid": os.getpid(), "what": what, "since": time.time(), "uuid": uuid}))


@contextlib.contextmanager
def _holding(lock: filelock.FileLock, info: Path) -> Iterator[None]:
    try:
        yield
    finally:
        info.unlink(missing_ok=True)
        lock.release()


@contextlib.contextmanager
def gpu_lock(what: str, timeout_s: float = DEFAULT_TIMEOUT_S, uuid: str | None = None) -> Iterator[str]:
    """Hold the lock of the GPU (by UUID) for the duration; yields the UUID. Waits up to
    `timeout_s` for another holder, then raises EvidenceError naming it."""
    uuid = uuid or device_uuid()
    lock, info, folder = _device_lock(uuid)
    try:
        lock.acquire(timeout=timeout_s)
    except filelock.Timeout:
        raise EvidenceError(
            f"GPU {uuid} stayed busy for {timeout_s:.0f} s, held by {_holder_text(info)}; one measurement "
            f"at a time: wait for it to finish, or remove {folder} if no such process exists.") from None
    with _holding(lock, info):
        _note_holder(info, what, uuid)
        yield uuid


# ---------------------------------------------------------------------------------------------
# Several GPUs on one host


def visible_devices() -> list[str]:
    """UUIDs of the GPUs this process may measure on, in CUDA's order: the entries of
    CUDA_VISIBLE_DEVICES (indices or UUIDs) when it is set, else every device NVML lists. One
    entry (or none, or no NVML) gives `[device_uuid()]`, the single-GPU case."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in env.split(",") if e.strip()] if env is not None else None
    if entries is not None and len(entries) <= 1:
        return [device_uuid()]
    try:
        listed = nvml(lambda n: [_text(n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(i)))
                                 for i in range(n.nvmlDeviceGetCount())])
    except Exception:  # no NVML: one device per listed entry, named as device_uuid() names them
        if not entries:
            return [device_uuid()]
        return [e if e.startswith(("GPU-", "MIG-")) else f"device-{e}" for e in entries]
    if entries is None:
        return listed or [device_uuid()]
    out = []
    for e in entries:
        if e.startswith(("GPU-", "MIG-")):
            out.append(e)
        elif e.isdigit() and int(e) < len(listed):
            out.append(listed[int(e)])
        else:
            break  # CUDA too stops at the first entry it cannot use
    return out or [device_uuid()]


def nvml_index(uuid: str) -> int | None:
    """NVML's index of the device with this UUID (NVML ignores CUDA_VISIBLE_DEVICES, so a
    reading of a pinned GPU must name it by this index); None without NVML or for no such device."""
    try:
        return nvml(lambda n: int(n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(uuid))))
    except Exception:
        return None


def group_record(ns_dir: str | Path, op: str | None = None, shape: str | None = None) -> Path:
    """Where a namespace notes which GPU measured a group: `logs/gpu/<op>/<shape>.json`, or
    `logs/gpu/ceilings.json` for the ceilings (no op or shape)."""
    root = Path(ns_dir) / "logs" / "gpu"
    return root / op / f"{shape}.json" if op and shape else root / "ceilings.json"


def read_record(record: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(record).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _record_device(data: dict[str, Any]) -> str | None:
    """The device a record pins its group to: the one every job of it ran on, else its latest job's."""
    if data.get("gpu_uuid"):
        return str(data["gpu_uuid"])
    jobs = sorted((data.get("jobs") or {}).values(), key=lambda j: str(j.get("at", "")))
    return str(jobs[-1]["gpu_uuid"]) if jobs and jobs[-1].get("gpu_uuid") else None


def _write_record(record: Path, group: str, what: str, uuid: str) -> dict[str, Any]:
    """Note that `what` of `group` measured on `uuid` (called while the device's lock is held, so
    the jobs of one group never write the record at once)."""
    data = read_record(record)
    jobs = dict(data.get("jobs") or {})
    jobs[what] = {"gpu_uuid": uuid, "host": socket.gethostname(), "pid": os.getpid(),
                  "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    uuids = sorted({str(j.get("gpu_uuid")) for j in jobs.values()})
    data = {"group": group, "gpu_uuid": uuids[0] if len(uuids) == 1 else None, "gpu_uuids": uuids, "jobs": jobs}
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_name(f"{record.name}.{os.getpid()}.{threading.get_ident()}.partial")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, record)
    return data


def _group_loads(root: Path) -> dict[str, int]:
    """How many groups of the namespace each device already measures (its records under `root`)."""
    loads: dict[str, int] = {}
    for path in root.rglob("*.json") if root.is_dir() else []:
        uuid = _record_device(read_record(path))
        if uuid:
            loads[uuid] = loads.get(uuid, 0) + 1
    return loads


def acquire_any(uuids: list[str], what: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                poll_s: float = 0.2) -> tuple[str, filelock.FileLock, Path]:
    """Take the lock of the first free device of `uuids` (tried in that order), waiting up to
    `timeout_s` for one; returns (its UUID, its held lock, its holder note). EvidenceError naming
    every holder when none came free."""
    deadline = time.monotonic() + timeout_s
    while True:
        for uuid in uuids:
            lock, info, _ = _device_lock(uuid)
            try:
                lock.acquire(blocking=False)
            except filelock.Timeout:
                continue
            _note_holder(info, what, uuid)
            return uuid, lock, info
        if time.monotonic() >= deadline:
            holders = "; ".join(f"{u} held by {_holder_text(_device_lock(u)[1])}" for u in uuids)
            raise EvidenceError(
                f"every GPU stayed busy for {timeout_s:.0f} s ({holders}); one measurement at a time per "
                f"GPU: wait for them to finish, or remove {lock_dir()} if no such process exists.")
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def _cuda_started() -> bool:
    """Whether this process already made a CUDA context (then CUDA_VISIBLE_DEVICES no longer
    moves it, and its work stays on the device it started on)."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:
        return False


@contextlib.contextmanager
def _pinned(uuid: str) -> Iterator[None]:
    """CUDA_VISIBLE_DEVICES names only `uuid` for the duration (the capture's child inherits it)."""
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = uuid
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


@contextlib.contextmanager
def group_gpu_lock(what: str, record: str | Path | None = None, group: str | None = None,
                   timeout_s: float = DEFAULT_TIMEOUT_S, uuids: list[str] | None = None,
                   root: str | Path | None = None, poll_s: float = 0.2) -> Iterator[str]:
    """Hold the GPU of a measurement group for the duration; yields its UUID.

    `record` is the group's note (`group_record`), `group` its name; `uuids` the devices to choose
    from (default `visible_devices()`); `root` the folder whose records count each device's groups
    (default: the record's folder). One device (or a process whose CUDA context already exists):
    `gpu_lock` on it. Several: the device the record names, when visible, else a free one chosen
    under the group's own lock so that two jobs of one group never choose apart; CUDA_VISIBLE_DEVICES
    names only that device while held."""
    devices = list(uuids) if uuids is not None else visible_devices()
    record = Path(record) if record is not None else None
    group = group or (record.stem if record is not None else what)
    if len(devices) <= 1 or _cuda_started():
        with gpu_lock(what, timeout_s=timeout_s, uuid=devices[0] if uuids is not None and devices else None) as uuid:
            if record is not None:
                before = read_record(record)
                others = {j: v.get("gpu_uuid") for j, v in (before.get("jobs") or {}).items() if j != what}
                elsewhere = sorted(j for j, u in others.items() if u != uuid)
                if elsewhere:
                    print(f"note: {', '.join(elsewhere)} of group {group} measured on another GPU "
                          f"({sorted({others[j] for j in elsewhere})}); {what} measures on {uuid}, the only one "
                          f"visible here: rerun the whole group before comparing its figures.")
                _write_record(record, group, what, uuid)
            yield uuid
        return
    deadline = time.monotonic() + timeout_s
    remaining = lambda: max(0.0, deadline - time.monotonic())  # noqa: E731
    key = hashlib.sha256(str(record.resolve() if record is not None else what).encode()).hexdigest()[:16]
    lock_dir().mkdir(parents=True, exist_ok=True)
    choice = filelock.FileLock(lock_dir() / f"group-{key}.lock")
    with contextlib.ExitStack() as held:
        try:
            choice.acquire(timeout=timeout_s)
        except filelock.Timeout:
            raise EvidenceError(f"{what}: another job of group {group} kept choosing its GPU for {timeout_s:.0f} s; "
                                f"remove {lock_dir()} if no such process exists.") from None
        try:
            pinned = _record_device(read_record(record)) if record is not None else None
            if pinned is not None and pinned not in devices:
                print(f"note: group {group} was measured on GPU {pinned}, not visible here; it moves to another "
                      f"GPU, so rerun the whole group before comparing its figures.")
                pinned = None
            if pinned is None:
                loads = _group_loads(Path(root) if root is not None else record.parent) if record is not None else {}
                order = sorted(devices, key=lambda u: (loads.get(u, 0), devices.index(u)))
                uuid, lock, info = acquire_any(order, what, remaining(), poll_s)
                held.enter_context(_holding(lock, info))
                if record is not None:
                    _write_record(record, group, what, uuid)
        finally:
            choice.release()
        if pinned is not None:
            uuid = pinned
            lock, info, folder = _device_lock(uuid)
            try:
                lock.acquire(timeout=remaining())
            except filelock.Timeout:
                raise EvidenceError(
                    f"GPU {uuid}, the GPU of group {group}, stayed busy for {timeout_s:.0f} s, held by "
                    f"{_holder_text(info)}; the jobs of a group measure on one GPU: wait for it to finish, or "
                    f"remove {folder} if no such process exists.") from None
            held.enter_context(_holding(lock, info))
            _note_holder(info, what, uuid)
            if record is not None:
                _write_record(record, group, what, uuid)
        held.enter_context(_pinned(uuid))
        yield uuid
