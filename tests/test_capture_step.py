"""The capture of a measurement group end to end without a GPU: the measure step runs the group
process under a stand-in nsys (tests/fake_device.py's, which here also leaves the captured
process's environment in the export, as nsys does), and takes the group's GPU lock and releases
it, watches the GPU (NVML readings played back: before, during and after), scrubs the export, and
records the facts of the run, which the gpu_state table reads; another process on the GPU during
the capture marks every implementation of the group disturbed. A stand-in nsys that fails, or that writes no
report, leaves nothing a later run would trust. (The files of a group and the tables derived from
them: tests/test_measure_step.py::test_the_step_writes_a_group.)"""

from __future__ import annotations

import json
import sqlite3
import stat
import sys
from pathlib import Path

import nsys_exports
import pytest
import standin_measure as sm

from harness.errors import EvidenceError
from harness.gpu.lock import gpu_lock
from harness.measure import step as measure_step
from harness.tables import derive

STANDIN = """#!{python}
import json, sqlite3, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
import fake_device
argv = sys.argv[1:]
base = Path(argv[argv.index("--output") + 1])
plan = json.loads(Path(argv[-1]).read_text())
if {mode!r} == "crash":  # the group process dies in its capture
    Path(plan["progress"]).write_text(json.dumps({{"step": "capture"}}))
    print("stand-in nsys: the target crashed", file=sys.stderr)
    sys.exit(3)
if {mode!r} == "no-report":  # nsys's importer failed: a .qdstrm alone
    base.with_name(base.name + ".qdstrm").write_bytes(b"qdstrm")
    sys.exit(0)
rc = fake_device.standin_nsys(argv)
conn = sqlite3.connect(base.with_name(base.name + ".sqlite"))  # the environment, where nsys puts it
conn.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT)")
conn.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENV_0', 'LANG=C.UTF-8')")
conn.execute("CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT NOT NULL, name TEXT NOT NULL, "
             "nameEnum INTEGER NOT NULL, value TEXT NOT NULL)")
conn.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (1, 'Local (CLI)', 'DeviceEnvironment', 610, 'LANG=C.UTF-8;X=1')")
conn.execute("INSERT INTO StringIds (id, value) VALUES (987654, 'LANG=C.UTF-8')")
conn.commit()
conn.close()
sys.exit(rc)
"""


def standin_nsys(tmp: Path, mode: str = "ok") -> str:
    path = tmp / "nsys-bin" / "nsys"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STANDIN.format(python=sys.executable, tests=str(Path(__file__).parent), mode=mode))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture()
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return sm.use_standin_nsys(tmp_path, monkeypatch)


def play_nvml(monkeypatch: pytest.MonkeyPatch, processes: int) -> list[str]:
    """NVML readings of the group's GPU, played back: a quiet GPU at the first reading, then
    `processes` compute processes (the captured one among them). Returns the UUIDs the step asked
    to read."""
    asked: list[str] = []

    def reader_of(uuid: str):  # type: ignore[no-untyped-def]
        asked.append(uuid)
        read = iter(range(10**9))

        def reading() -> dict:
            n = processes if next(read) else 0
            return {"utilization_pct": 0, "compute_processes": n, "pids": list(range(100, 100 + n)),
                    "throttle_reasons": 0, "power_w": 76.0, "sm_clock_mhz": 1980}
        return reading

    monkeypatch.setattr(measure_step, "_gpu_reader", reader_of)
    return asked


def environment_left(export: Path) -> list[str]:
    conn = sqlite3.connect(export)
    try:
        return [r[0] for r in conn.execute("SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%ENV%' UNION ALL "
                                           "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE value != '' UNION ALL "
                                           "SELECT value FROM StringIds WHERE value LIKE 'LANG=%'")]
    finally:
        conn.close()


def test_the_measure_step_captures_under_the_lock_watches_the_gpu_and_scrubs_the_export(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = play_nvml(monkeypatch, processes=1)
    nsys = standin_nsys(tmp)
    record = sm.run_measure(tmp, ["cuda", "triton"], nsys_path=nsys)
    folder = sm.group_dir(tmp)
    saved = json.loads((folder / "record.json").read_text())
    assert saved["passed"] == ["cuda", "triton"] and saved["nsys"] == str(Path(nsys).resolve())
    assert saved["nsys_version"] == nsys_exports.ExportBuilder.version  # read from the export
    assert saved["gpu_uuid"] and {"before", "waited_s", "during", "after"} <= set(saved["gpu"])
    assert asked == [record["gpu_uuid"]]  # NVML reads the GPU the lock gave the group
    assert saved["gpu"]["before"]["power_w"] == 76.0 and saved["gpu"]["during"]["samples"] >= 2
    assert saved["gpu"]["during"]["flags"] == []  # the captured process alone
    assert saved["env_rows_removed"] == 3 and environment_left(folder / "capture.sqlite") == []
    assert not list(folder.glob("*.partial*")) and list(folder.glob("*.json")) == [folder / "record.json"]
    # the lock was held on the session's GPU, noted in the namespace, and released
    note = json.loads((tmp / "artifacts" / sm.NS / "logs" / "gpu" / "session.json").read_text())
    assert note["group"] == "gpu-session" and note["gpu_uuid"] == record["gpu_uuid"]
    assert list(note["jobs"]) == ["measure session"]
    assert not list((tmp / "locks").glob("*.holder.json"))
    with gpu_lock("next job", timeout_s=0.2, uuid=record["gpu_uuid"]):
        pass
    # one gpu_state row per implementation captured, from the one watch over the group
    rows = derive.gpu_state_rows(derive.read_group(folder), "ns")
    assert [r["impl"] for r in rows] == ["cuda", "triton"]
    assert all(r["op"] == sm.OP and r["gpu_uuid"] == record["gpu_uuid"] and r["disturbed"] is False for r in rows)
    assert all(r["before_power_w"] == 76.0 and r["during_samples"] == saved["gpu"]["group"]["samples"] for r in rows)
    # what NVML read in the group's own window (the stand-in's is an instant: the readings either side of it)
    assert saved["gpu"]["group"]["windows"] and 1 <= saved["gpu"]["group"]["samples"] <= 2
    assert {r["during_extent"] for r in rows} == {"group"} and {r["session_flags"] for r in rows} == {""}


def test_another_process_during_the_capture_marks_the_group_disturbed(tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    play_nvml(monkeypatch, processes=2)
    sm.run_measure(tmp, ["cuda", "triton"], nsys_path=standin_nsys(tmp))
    assert "capture disturbed: another compute process ran beside the captured one" in capsys.readouterr().out
    rows = derive.gpu_state_rows(derive.read_group(sm.group_dir(tmp)), "ns")
    assert [r["impl"] for r in rows] == ["cuda", "triton"]
    assert all(r["disturbed"] is True and "another compute process" in r["flags"] for r in rows)


@pytest.mark.parametrize(("mode", "says"), [("crash", "stopped during capture with exit status 3; see the log."),
                                            ("no-report", "nsys profile wrote no report")])
def test_a_failing_nsys_leaves_no_capture(tmp: Path, mode: str, says: str) -> None:
    folder = sm.group_dir(tmp)
    folder.mkdir(parents=True)
    (folder / "record.json").write_text('{"stale": "a record of an earlier run"}')
    with pytest.raises(EvidenceError, match=says) as err:
        sm.run_measure(tmp, ["cuda", "triton"], nsys_path=standin_nsys(tmp, mode))
    assert "\n" not in str(err.value)
    for name, path in derive.group_files(folder).items():
        assert not path.exists(), name  # nothing a later run would trust, the stale record included
    assert sorted(p.name for p in folder.iterdir()) == []  # nor the group process's plan and progress
    assert "$ " in Path(tmp / f"measure-{sm.OP}-{sm.SHAPE}.log").read_text()  # the log names what ran
    assert not list((tmp / "locks").glob("*.holder.json"))  # the GPU is released
