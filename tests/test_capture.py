"""The capture step's pieces that run without a GPU: finding nsys, the minimal environment of the
captured process, and scrubbing the recorded environment out of an export."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import fake_device
import nsys_fixtures
import pytest

from harness import tools
from harness.errors import EvidenceError, ToolMissing
from harness.measure import capture


def fake_tool(path: Path) -> Path:
    path.write_text("#!/bin/sh\necho 'NVIDIA Nsight Systems version 2099.1'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_nsys_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    configured = fake_tool(tmp_path / "configured-nsys")
    from_env = fake_tool(tmp_path / "env-nsys")
    monkeypatch.setenv("NSYS", str(from_env))
    assert tools.find_nsys(str(configured)) == str(configured.resolve())
    assert tools.find_nsys(None) == str(from_env.resolve())
    monkeypatch.delenv("NSYS")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    on_path = fake_tool(bindir / "nsys")
    monkeypatch.setenv("PATH", str(bindir))
    assert tools.find_nsys(None) == str(on_path)


def test_missing_nsys_names_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("NSYS", str(tmp_path / "nope"))
    with pytest.raises(ToolMissing) as info:
        tools.find_nsys("/opt/absent/nsys")
    msg = str(info.value)
    assert "/opt/absent/nsys" in msg and "$NSYS" in msg and "PATH" in msg


def test_captured_process_gets_no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret_value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret")
    env = capture.minimal_env()
    assert "GITHUB_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert set(env) <= set(capture.ENV_ALLOWLIST) | {"PYTHONUNBUFFERED"}
    assert str(capture.ROOT) in env["PYTHONPATH"].split(os.pathsep)


def test_scrub_removes_environment_rows_and_their_pages(tmp_path: Path) -> None:
    export = tmp_path / "cap.sqlite"
    shutil.copy(nsys_fixtures.export("h200-torch-layer-norm"), export)
    export.chmod(0o644)
    secret = "ghp_FAKE_TOKEN_0123456789"
    with sqlite3.connect(export) as conn:
        conn.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE_7', ?)", (f"GITHUB_TOKEN={secret}",))
        conn.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENV_COUNT', '8')")
        conn.execute("INSERT INTO StringIds (id, value) VALUES (999999, ?)", (f"OLDPWD=/x\0GITHUB_TOKEN={secret}2\0HOME=/root",))
        conn.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'DeviceEnvironment'",
                     (f"LANG=C.UTF-8;GITHUB_TOKEN={secret}3;HOME=/root",))
        kernel_names = conn.execute("SELECT count(DISTINCT value) FROM StringIds s JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.demangledName = s.id").fetchone()[0]
        rows_before = conn.execute("SELECT count(*) FROM META_DATA_CAPTURE").fetchone()[0]
    assert secret.encode() in export.read_bytes()
    removed = capture.scrub_export(export)
    assert removed >= 4
    data = export.read_bytes()
    assert secret.encode() not in data  # vacuumed: not even in free pages
    assert b"HOME=/root" not in data and b"PATH=/" not in data  # nor any real environment block
    with sqlite3.connect(export) as conn:
        assert conn.execute("SELECT count(*) FROM META_DATA_CAPTURE").fetchone()[0] == rows_before - 2
        assert conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] > 0
        kept = conn.execute("SELECT count(DISTINCT value) FROM StringIds s JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.demangledName = s.id").fetchone()[0]
        assert kept == kernel_names and kept > 0  # kernel names untouched


WALK_UP = """
import os, sys
token = open(sys.argv[1]).read().encode()
pid, seen, holding = os.getppid(), 0, []
while pid > 0:
    try:
        environ = open(f"/proc/{pid}/environ", "rb").read()
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        break
    seen += 1
    if token in environ:
        holding.append(pid)
    pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
print(seen, holding)
"""

STARTER = """
import json, subprocess, sys
from harness.tools import clean_parent
argv = json.loads(sys.argv[1])
print(subprocess.run(clean_parent(argv), env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                     start_new_session=True).stdout, end="")
"""


def _ancestors_holding(tmp_path: Path, **extra: str) -> tuple[int, str]:
    """Start, from a process whose own environment holds a random token, a walker through
    `clean_parent` (as the capture starts nsys); it reads the environment of every process above
    it, as nsys does, and says how many it read and which held the token."""
    import json
    import secrets
    import subprocess
    import sys

    token = "tok_" + secrets.token_hex(16)
    (tmp_path / "token").write_text(token)
    env = {**os.environ, "PLANTED_TOKEN": token, **extra}
    walker = [sys.executable, "-c", WALK_UP, str(tmp_path / "token")]
    out = subprocess.run([sys.executable, "-c", STARTER, json.dumps(walker)], env=env, capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1]).stdout.split(maxsplit=1)
    return int(out[0]), out[1].strip()


def test_a_profiler_finds_no_process_above_it_holding_the_invoking_environment(tmp_path: Path) -> None:
    """nsys writes into its report the environment of every process above it (found on the H200,
    scripts/probe_nsys_env.py); under `clean_parent` the only one is the namespace's first process,
    which runs with the clean environment. Without the namespace the token is found: the walker
    can tell."""
    if not tools.isolation():
        pytest.skip("this machine allows no process namespace (harness.tools.isolation)")
    seen, holding = _ancestors_holding(tmp_path)
    assert seen >= 1 and holding == "[]"
    seen, holding = _ancestors_holding(tmp_path, EVIDENCE_NO_ISOLATION="1")
    assert holding != "[]"  # the starter's own environment, and every process above it


def test_isolation_is_refused_cleanly_without_unshare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no unshare on it
    tools.isolation.cache_clear()
    try:
        assert tools.isolation() == ()
        assert tools.clean_parent(["x"])[:1] == ["/bin/sh"]
        assert tools.isolation_note().startswith("none:")
    finally:
        monkeypatch.undo()
        tools.isolation.cache_clear()


HOLDER = """
import fcntl, sys, time
from pathlib import Path
lock = open(sys.argv[1], "a")
fcntl.flock(lock, fcntl.LOCK_EX)
Path(sys.argv[2]).write_text("held")
time.sleep(120)
"""
"""A capture's stand-in for the tests of owned sessions: holds a lock until it is killed."""


def _start_holder(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """A holder in an owned session, under the process namespace where the machine allows one, as a
    capture runs; returns it with its lock once it holds it."""
    lock, ready = tmp_path / "held.lock", tmp_path / "ready"
    proc = tools.start_owned(tools.clean_parent([sys.executable, "-c", HOLDER, str(lock), str(ready)]), "the holder")
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), "the holder never started"
    return proc, lock


def test_a_wait_ended_by_ctrl_c_kills_the_session_it_waited_on(tmp_path: Path) -> None:
    """KeyboardInterrupt (or a SIGTERM handler's SystemExit) during `wait_owned` goes on, and the
    session, every process in it, is gone: a capture does not run on after its step stopped."""
    proc, lock = _start_holder(tmp_path)
    assert fake_device.held(lock, settle_s=0)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            tools.wait_owned(proc, 60, "the holder")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert proc.returncode is not None
    assert not fake_device.held(lock)


def test_a_wait_past_its_limit_kills_the_session_and_says_so(tmp_path: Path) -> None:
    proc, lock = _start_holder(tmp_path)
    with pytest.raises(EvidenceError, match=r"^the holder did not finish within 0.2 s and was stopped; see the log\.$"):
        tools.wait_owned(proc, 0.2, "the holder")
    assert not fake_device.held(lock)


OWNER = """
import sys, time
from pathlib import Path
from harness import tools
proc = tools.start_owned(tools.clean_parent([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]]), "the holder")
time.sleep(120)
"""


def test_a_session_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """SIGKILL to the step (no handler runs): the kernel's parent-death signal kills the session's
    leader, and with it the process namespace the capture runs in."""
    if not tools.pdeathsig_prefix():
        pytest.skip("this machine has no setpriv --pdeathsig (harness.tools.pdeathsig_prefix)")
    if not tools.isolation():
        pytest.skip("without a process namespace only the session's leader dies with its parent")
    lock, ready = tmp_path / "held.lock", tmp_path / "ready"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, HOLDER, str(lock), str(ready)],
                             cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the holder never started"
        assert fake_device.held(lock, settle_s=0)
    finally:
        owner.kill()
        owner.wait()
    assert not fake_device.held(lock)


def test_a_command_that_is_not_there_is_named(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match=r"^the tool could not start /opt/absent/ncu: No such file or directory\.$"):
        tools.start_owned(["/opt/absent/ncu"], "the tool")


NSYS_LIKE = """#!{python}
# Writes what Nsight Systems writes of the environment: the environment of every process above it
# (as /proc shows it) into the report and into the export's StringIds, then exits 0.
import os, sqlite3, sys
from pathlib import Path
argv = sys.argv[1:]
base = Path(argv[argv.index("--output") + 1])
blocks, pid = [], os.getppid()
while pid > 0:
    try:
        blocks.append(open(f"/proc/{{pid}}/environ", "rb").read().replace(b"\\0", b"\\n").decode(errors="replace"))
        status = open(f"/proc/{{pid}}/status").read()
    except OSError:
        break
    pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
base.with_name(base.name + ".nsys-rep").write_text("\\n".join(blocks))
conn = sqlite3.connect(base.with_name(base.name + ".sqlite"))
conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
conn.executemany("INSERT INTO StringIds (value) VALUES (?)", [(b,) for b in blocks])
conn.commit()
conn.close()
"""

PROFILE = """
import json, sys
from pathlib import Path
from harness.measure import capture
out = Path(sys.argv[2])
info = capture.profile_group(sys.argv[1], ["cuda"], [], out / "plan.json", out / "capture.nsys-rep",
                             out / "capture.sqlite", out / "log.txt", 60)
print(json.dumps({k: info[k] for k in ("isolation", "report_withheld")}))
"""


@pytest.mark.parametrize("isolated", [True, False])
def test_a_raw_report_is_kept_only_where_no_process_above_the_tool_holds_a_secret(tmp_path: Path,
                                                                                 isolated: bool) -> None:
    """A stand-in nsys that copies the environment of every process above it, as nsys does, under
    the measure step's own call (`capture.profile_group`), started by a process whose environment
    holds a secret: in a process namespace the raw report is kept and holds no secret; without one
    the fresh export holds it, so the raw report is deleted and the record says why."""
    import json
    import secrets
    import subprocess
    import sys

    if isolated and not tools.isolation():
        pytest.skip("this machine allows no process namespace (harness.tools.isolation)")
    nsys = tmp_path / "nsys"
    nsys.write_text(NSYS_LIKE.format(python=sys.executable))
    nsys.chmod(0o755)
    secret = "tok_" + secrets.token_hex(16)
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": secret}
    if not isolated:
        env["EVIDENCE_NO_ISOLATION"] = "1"
    proc = subprocess.run([sys.executable, "-c", PROFILE, str(nsys), str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    report, export = tmp_path / "capture.nsys-rep", tmp_path / "capture.sqlite"
    assert secret.encode() not in export.read_bytes()  # scrubbed either way
    if isolated:
        assert info["isolation"].startswith("process namespace") and info["report_withheld"] == []
        assert report.is_file() and secret.encode() not in report.read_bytes()
    else:
        assert info["isolation"].startswith("none:") and not report.exists()
        (withheld,) = info["report_withheld"]
        assert withheld.startswith("capture.nsys-rep: deleted, its export held the value of ") and \
            "AWS_SECRET_ACCESS_KEY" in withheld
