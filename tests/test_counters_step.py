"""The counters step end to end without a GPU, over the record of a measurement group the measure
step wrote (stand-in nsys, tests/standin_measure.py): one ncu process (the stand-in of
tests/standin_ncu.py, whose export is built from real H200 exports) profiles the group process
over the implementations that passed their check, and each kernel lands on the implementation whose
range was open over it; a permission error, and no ncu at all, give a table that says counters are
unavailable and why; a crashing ncu, or a kernel no round range holds, give a table that says
counters failed and why, and the job succeeds: counters never take the report down."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import pytest
import standin_measure as sm
import standin_ncu

from harness.errors import EvidenceError

WRONG: dict[str, dict[str, Any]] = {"wrong": {"base": "cuda", "defines": {}}}
IMPLS = ["cuda", "triton", "cuda.wrong"]  # the stand-in device fails cuda.wrong's check


@pytest.fixture()
def group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A measured group of layernorm 4096x768 in which cuda.wrong failed its check."""
    sm.use_standin_nsys(tmp_path, monkeypatch)
    record = sm.run_measure(tmp_path, IMPLS, plan=sm.variants_plan(WRONG))
    assert record["passed"] == ["cuda", "triton"]
    return tmp_path


def read(path: str) -> list[dict]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_counters_step_profiles_the_group_and_splits_it_by_implementation(group: Path) -> None:
    ncu = standin_ncu.install(group / "ncu-bin")
    raw, table, log = sm.run_counters(group, IMPLS, ncu=str(ncu))
    seen = json.loads((ncu.parent / "ncu-seen.json").read_text())
    # one ncu process over the group process, with the implementations that passed, unchecked, unspanned
    (plan,) = seen["plan"]["groups"]
    assert plan["impls"] == ["cuda", "triton"] and seen["plan"]["profile"] is False
    assert plan["check"] is False and plan["spans"] is False
    assert seen["argv"][-4:-1] == ["-m", "harness", "group"]
    rows = read(table)
    for impl in ("cuda", "triton"):
        got = [r for r in rows if r["impl"] == impl]
        header, _, fixture = standin_ncu.fixture_rows(impl)
        assert len(got) == len(fixture) and {r["status"] for r in got} == {"ok"}, impl
        name = header.index("Kernel Name")
        assert [r["kernel"] for r in got] == [f[name] for f in fixture]  # the kernels of its own range
        assert all(r["source"] == "ncu kernel replay" and float(r["duration_ns"]) > 1000 for r in got)
    (wrong,) = [r for r in rows if r["impl"] == "cuda.wrong"]
    assert wrong["status"] == "not measured" and wrong["duration_ns"] == ""
    assert Path(raw).read_text() == standin_ncu.group_export(["cuda", "triton"], group=("layernorm", "4096x768"))
    assert (Path(raw).parent / "4096x768.ncu-rep").is_file()
    assert not list(Path(raw).parent.glob("*.partial*")) and not list(Path(raw).parent.glob("*.plan.json"))
    logged = Path(log).read_text()
    assert "--clock-control none" in logged and "--nvtx-include capture/" in logged


def test_permission_error_records_unavailable(group: Path) -> None:
    _, table, _ = sm.run_counters(group, IMPLS, ncu=str(standin_ncu.install(group / "ncu-bin", "perm")))
    rows = {r["impl"]: r for r in read(table)}
    assert set(rows) == set(IMPLS) and len(read(table)) == len(IMPLS)  # one row each, saying why
    for impl in ("cuda", "triton"):
        assert rows[impl]["status"] == "unavailable" and rows[impl]["reason"].startswith("ERR_NVGPUCTRPERM")
    assert rows["cuda.wrong"]["status"] == "not measured"


def test_no_ncu_records_unavailable(group: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(group / "empty"))
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setattr("harness.tools.glob.glob", lambda pattern: [])
    _, table, _ = sm.run_counters(group, IMPLS, ncu=None)
    rows = {r["impl"]: r for r in read(table)}
    assert rows["cuda"]["status"] == rows["triton"]["status"] == "unavailable"
    assert "was not found" in rows["cuda"]["reason"]


def test_crashing_ncu_records_failed_and_leaves_no_report(group: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw, table, _ = sm.run_counters(group, IMPLS, ncu=str(standin_ncu.install(group / "ncu-bin", "crash")))
    rows = {r["impl"]: r for r in read(table)}
    for impl in ("cuda", "triton"):
        assert rows[impl]["status"] == "failed"
        assert rows[impl]["reason"] == "ncu profile of layernorm 4096x768 failed (exit status 11, report not written); see the log."
    assert rows["cuda.wrong"]["status"] == "not measured"
    assert Path(raw).read_text() == ""
    assert sorted(os.listdir(Path(raw).parent)) == sorted([Path(raw).name, Path(table).name])  # no report, plan or partial
    assert "counters failed: layernorm 4096x768: cuda, triton: ncu profile" in capsys.readouterr().out


def test_a_kernel_outside_every_round_range_records_failed_in_one_sentence(group: Path) -> None:
    _, table, _ = sm.run_counters(group, IMPLS, ncu=str(standin_ncu.install(group / "ncu-bin", "unattributed")))
    rows = [r for r in read(table) if r["impl"] in ("cuda", "triton")]
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert rows[0]["reason"].startswith("ncu's export names no range capture/<impl>/<round> for kernel")
    assert "\n" not in rows[0]["reason"]


def test_the_check_failed_line_appears_only_where_a_check_failed(group: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ncu = str(standin_ncu.install(group / "ncu-bin"))
    sm.run_counters(group, ["cuda", "triton"], ncu=ncu)
    assert "its check failed" not in capsys.readouterr().out
    sm.run_counters(group, IMPLS, ncu=ncu)
    assert "counters not measured: layernorm 4096x768: cuda.wrong: its check failed" in capsys.readouterr().out


def test_failed_counters_are_a_flag_of_the_report(group: Path) -> None:
    from harness.tables import trust

    _, table, _ = sm.run_counters(group, IMPLS, ncu=str(standin_ncu.install(group / "ncu-bin", "crash")))
    said = [line for line in trust.flags(counters=table) if line.startswith("Counters failed")]
    assert len(said) == 1 and "layernorm 4096x768 cuda and triton" in said[0] and "exit status 11" in said[0]


def test_a_session_is_profiled_by_one_ncu_and_split_by_group(group: Path) -> None:
    """Two groups' counters in one ncu process (the counters rule's session): each group's raw
    export holds its own kernels only, and its table its own implementations."""
    from harness import config
    from harness.measure import step as measure_step

    sm.run_measure(group, ["cuda", "torch"], shape="8192x768")
    ncu = standin_ncu.install(group / "ncu-bin")
    c = sm.cfg()
    shapes = {"4096x768": IMPLS, "8192x768": ["cuda", "torch"]}
    groups: list[dict[str, Any]] = [{"op": sm.OP, "shape": shape, "impls": impls, "plan": config.counters_plan(c, sm.OP),
               "record": str(sm.group_dir(group, sm.OP, shape) / "record.json"),
               "raw": str(group / "artifacts" / sm.NS / "counters" / sm.OP / f"{shape}.raw.csv"),
               "table": str(group / "artifacts" / sm.NS / "counters" / sm.OP / f"{shape}.csv")} for shape, impls in shapes.items()]
    report = group / "artifacts" / sm.NS / "counters" / "session.ncu-rep"
    measure_step.counters_session(groups=groups, metrics=c["counters"]["metrics"], namespace=sm.NS, report=str(report),
                                  log=str(group / "counters.log"), settings=sm.settings(ncu_path=str(ncu)))
    seen = json.loads((ncu.parent / "ncu-seen.json").read_text())
    assert [(p["shape"], p["impls"]) for p in seen["plan"]["groups"]] == [("4096x768", ["cuda", "triton"]),
                                                                        ("8192x768", ["cuda", "torch"])]
    assert report.is_file()
    for g in groups:
        rows = read(g["table"])
        assert {r["shape"] for r in rows} == {g["shape"]}
        ok = {r["impl"] for r in rows if r["status"] == "ok"}
        assert ok == ({"cuda", "triton"} if g["shape"] == "4096x768" else {"cuda", "torch"})
        raw = Path(g["raw"]).read_text()
        assert f"capture/{sm.OP}/{g['shape']}/" in raw
        other = "8192x768" if g["shape"] == "4096x768" else "4096x768"
        assert f"capture/{sm.OP}/{other}/" not in raw
