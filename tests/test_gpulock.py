"""The GPU lock: one holder per device UUID across processes; a second waits, then fails naming
the holder; different devices do not block each other. With several GPUs, the jobs of one
measurement group (its measure and counters jobs, and any rerun of them) all land on the group's
GPU, and no two groups hold one GPU at once; the measure step's nsys child sees only that GPU.

test_preloading_creates_no_cuda_context is gone with harness.measure.step._preload: a GPU job's own
process no longer imports the implementations' libraries before its lock; the group process it
starts under nsys, inside the lock, does."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import EvidenceError
from harness.gpu.lock import device_uuid, gpu_lock, group_gpu_lock, visible_devices

HOLD = """
import sys, time
from harness.gpu.lock import gpu_lock
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
        with pytest.raises(EvidenceError) as info, gpu_lock("measure layernorm", timeout_s=0.5, uuid="GPU-test-1"):
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
        with gpu_lock("measure", timeout_s=30, uuid="GPU-test-2") as uuid:
            assert uuid == "GPU-test-2"
            assert time.monotonic() - t0 > 0.5  # we only got in once the holder let go
    finally:
        proc.wait()


def test_other_devices_do_not_block() -> None:
    proc = hold_elsewhere("GPU-test-3", 5)
    try:
        with gpu_lock("measure", timeout_s=0.2, uuid="GPU-test-4"):
            pass
    finally:
        proc.kill()
        proc.wait()


def test_lock_is_released_after_an_error(private_lock_dir: Path) -> None:
    with pytest.raises(RuntimeError), gpu_lock("failing job", uuid="GPU-test-5"):
        raise RuntimeError("kernel crashed")
    with gpu_lock("next job", timeout_s=0.2, uuid="GPU-test-5"):
        pass
    assert not list(private_lock_dir.glob("*.holder.json"))


def test_device_uuid_from_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0e6d6c59-7f0a,GPU-other")
    assert device_uuid() == "GPU-0e6d6c59-7f0a"


# --- Several GPUs on one host: a measurement group stays on one GPU, groups spread over the GPUs ---

FAKE = ["GPU-fake-0", "GPU-fake-1", "GPU-fake-2"]

JOB = """
import json, os, sys, time
from harness.gpu.lock import group_gpu_lock
record, group, what, start, hold, out, root = sys.argv[1:8]
uuids = json.loads(sys.argv[8])
while time.time() < float(start):  # every job asks at once
    time.sleep(0.005)
with group_gpu_lock(what, record, group=group, timeout_s=60, uuids=uuids, root=root) as uuid:
    t0 = time.time()
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    time.sleep(float(hold))
    t1 = time.time()
with open(out, "w") as fh:
    json.dump({"group": group, "what": what, "uuid": uuid, "seen": seen, "t0": t0, "t1": t1}, fh)
"""


def run_groups(tmp_path: Path, groups: dict[str, list[str]], uuids: list[str], hold: float = 0.3) -> list[dict]:
    """Run every job of every group as its own process (as Snakemake runs them), all at once."""
    root = tmp_path / "ns" / "logs" / "gpu"
    start = time.time() + 3.0
    procs, outs = [], []
    for group, jobs in groups.items():
        for what in jobs:
            out = tmp_path / "out" / f"{group}-{what}.json".replace(" ", "_")
            out.parent.mkdir(parents=True, exist_ok=True)
            outs.append(out)
            record = root / "op" / f"{group}.json"
            procs.append(subprocess.Popen([sys.executable, "-c", JOB, str(record), group, what, str(start), str(hold),
                                           str(out), str(root), json.dumps(uuids)]))
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    return [json.loads(o.read_text()) for o in outs]


def test_groups_on_several_gpus_never_share_one_and_stay_on_theirs(tmp_path: Path) -> None:
    groups = {f"gpu-layernorm-{i}x768": [f"{job} layernorm {i}x768{again}" for job in ("measure", "counters")
                                         for again in ("", " (rerun)")] for i in range(6)}
    runs = run_groups(tmp_path, groups, FAKE)
    assert len(runs) == sum(len(jobs) for jobs in groups.values())
    # every job of a group measured on its group's GPU, and saw only that GPU
    by_group: dict[str, set[str]] = {}
    for r in runs:
        by_group.setdefault(r["group"], set()).add(r["uuid"])
        assert r["seen"] == r["uuid"]
    assert all(len(u) == 1 for u in by_group.values()), by_group
    # the groups spread over all three GPUs (a GPU no group has chosen yet is tried first)
    assert set().union(*by_group.values()) == set(FAKE)
    # no two jobs (so no two groups) ever held one GPU at once ...
    for gpu in FAKE:
        spans = sorted((r["t0"], r["t1"]) for r in runs if r["uuid"] == gpu)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), f"overlap on {gpu}"
    # ... while different GPUs did measure at the same time
    assert any(a["uuid"] != b["uuid"] and a["t0"] < b["t1"] and b["t0"] < a["t1"] for a in runs for b in runs)
    # the namespace notes which GPU measured which group, job by job
    for group, uuids in by_group.items():
        rec = json.loads((tmp_path / "ns" / "logs" / "gpu" / "op" / f"{group}.json").read_text())
        assert rec["group"] == group and rec["gpu_uuid"] == next(iter(uuids))
        assert set(rec["jobs"]) == set(groups[group]) and {j["gpu_uuid"] for j in rec["jobs"].values()} == uuids


def test_a_group_goes_back_to_its_gpu_and_waits_for_it(tmp_path: Path) -> None:
    record = tmp_path / "ns" / "logs" / "gpu" / "layernorm" / "4096x768.json"
    with group_gpu_lock("measure layernorm 4096x768", record, group="g", uuids=FAKE) as first:
        assert first == FAKE[0]
    proc = hold_elsewhere(FAKE[0], 1.0)  # another group measures on that GPU now
    try:
        t0 = time.monotonic()
        with group_gpu_lock("counters layernorm 4096x768", record, group="g", timeout_s=30, uuids=FAKE) as uuid:
            assert uuid == FAKE[0]  # not the free GPU-fake-1: the group's comparisons stay on one GPU
            assert time.monotonic() - t0 > 0.5
    finally:
        proc.wait()
    rec = json.loads(record.read_text())
    assert rec["gpu_uuid"] == FAKE[0] and len(rec["jobs"]) == 2


def test_every_gpu_busy_fails_naming_the_holders(tmp_path: Path) -> None:
    procs = [hold_elsewhere(u, 5) for u in FAKE[:2]]
    try:
        with (pytest.raises(EvidenceError, match="every GPU stayed busy") as info,
              group_gpu_lock("measure", tmp_path / "g.json", uuids=FAKE[:2], timeout_s=0.5)):
            pass
        assert all(f"pid {p.pid}" in str(info.value) for p in procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_group_whose_gpu_is_gone_moves_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "g.json"
    with group_gpu_lock("measure a", record, group="g", uuids=["GPU-elsewhere", "GPU-x"]):
        pass
    with group_gpu_lock("measure b", record, group="g", uuids=FAKE) as uuid:
        assert uuid in FAKE
    assert "not visible here" in capsys.readouterr().out
    assert json.loads(record.read_text())["gpu_uuid"] is None  # the record shows the group is split


def test_one_visible_gpu_is_the_plain_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           private_lock_dir: Path) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-only-one")
    record = tmp_path / "g.json"
    with group_gpu_lock("measure x", record, group="g") as uuid:
        assert uuid == "GPU-only-one"
        assert (private_lock_dir / "GPU-only-one.holder.json").exists()  # the same lock file as gpu_lock
        assert not list(private_lock_dir.glob("group-*.lock"))  # no choosing with one GPU
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-only-one"
    proc = hold_elsewhere("GPU-only-one", 5)
    try:
        with (pytest.raises(EvidenceError, match="GPU GPU-only-one stayed busy"),  # gpu_lock's own sentence
              group_gpu_lock("measure y", record, group="g", timeout_s=0.3)):
            pass
    finally:
        proc.kill()
        proc.wait()
    assert json.loads(record.read_text())["jobs"]["measure x"]["gpu_uuid"] == "GPU-only-one"


def test_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b")
    assert visible_devices() == ["GPU-a", "GPU-b"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a")
    assert visible_devices() == ["GPU-a"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert len(visible_devices()) == 1


PINNED_NSYS = """#!{python}
import os, sys
sys.path.insert(0, {tests!r})
open({seen!r}, "w").write(os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)"))
import fake_device
sys.exit(fake_device.standin_nsys(sys.argv[1:]))
"""


def test_the_measure_step_pins_its_child_to_the_groups_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The measure step with three GPUs visible: nsys (tests/fake_device.py's stand-in, which notes
    what it saw) and the group process it starts see only the group's GPU, the group's record names
    it, and the group's counters job follows it there."""
    import standin_measure as sm
    import standin_ncu

    from harness.gpu import lock as gpulock

    sm.use_standin_nsys(tmp_path, monkeypatch)
    monkeypatch.setattr(gpulock, "visible_devices", lambda: list(FAKE))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    seen = tmp_path / "nsys-saw"
    nsys = tmp_path / "pinned" / "nsys"
    nsys.parent.mkdir()
    nsys.write_text(PINNED_NSYS.format(python=sys.executable, tests=str(Path(__file__).parent), seen=str(seen)))
    nsys.chmod(0o755)
    gpu_logs = tmp_path / "artifacts" / sm.NS / "logs" / "gpu"
    # another group already measures on GPU-fake-0, so this group chooses another GPU
    (gpu_logs / "softmax").mkdir(parents=True)
    (gpu_logs / "softmax" / "4096x1024.json").write_text(json.dumps({"gpu_uuid": FAKE[0]}))
    record = sm.run_measure(tmp_path, ["cuda", "triton"], nsys_path=str(nsys))
    assert seen.read_text() == record["gpu_uuid"] == FAKE[1]
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # put back after the step
    ncu = standin_ncu.install(tmp_path / "ncu-bin")
    sm.run_counters(tmp_path, ["cuda", "triton"], ncu=str(ncu))
    assert json.loads((ncu.parent / "ncu-seen.json").read_text())["CUDA_VISIBLE_DEVICES"] == FAKE[1]
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    rec = json.loads((gpu_logs / "session.json").read_text())
    assert rec["group"] == "gpu-session" and rec["gpu_uuid"] == FAKE[1]
    assert {job: j["gpu_uuid"] for job, j in rec["jobs"].items()} == {"measure session": FAKE[1],
                                                                     "counters session": FAKE[1]}
