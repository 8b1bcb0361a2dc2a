"""The measure stage on the CPU: the group's statistics, the tables derived from a group, the
measure step driving a stand-in nsys (tests/fake_device.py), a crash retried without the crashed
implementation, and the environment kept out of what the step writes."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

import fake_device
import nsys_fixtures
import standin_measure
from harness import ROOT, config
from harness.errors import ToolMissing
from harness.measure import capture, group, order
from harness.measure import step as measure_step
from harness.tables import derive, stats

SHAPE = "4096x768"


# ----------------------------------------------------------------------------------------- stats


def test_the_four_verdicts() -> None:
    assert stats.verdict(0.995, 1.004) == stats.SAME
    assert stats.verdict(0.97, 0.98) == stats.FASTER
    assert stats.verdict(1.02, 1.03) == stats.SLOWER
    assert stats.verdict(0.98, 1.02) == stats.CANT_TELL
    assert stats.verdict(1.002, 1.006) == stats.SAME  # inside the margin beats "above 1"
    assert stats.verdict(1.005, 1.015) == stats.SLOWER  # outside the margin and above 1


def test_paired_rounds_cancel_a_drift_that_hits_both() -> None:
    """A clock drift across the rounds moves ours and the control alike: paired, the interval of
    their ratio stays narrow; unpaired it would be as wide as the drift."""
    rng = random.Random(3)
    drift = [1.0 + 0.05 * r / 30 for r in range(30)]
    ours = [5.0 * d * (1 + rng.gauss(0, 0.002)) for d in drift]
    control = [5.1 * d * (1 + rng.gauss(0, 0.002)) for d in drift]
    r, lo, hi = stats.ratio_interval(ours, control, paired=True, seed=1)
    assert abs(r - 5.0 / 5.1) < 0.002 and hi - lo < 0.004
    _, ulo, uhi = stats.ratio_interval(ours, control, paired=False, seed=1)
    assert uhi - ulo > 2 * (hi - lo)


def test_the_interval_is_reproducible_and_narrows_with_more_rounds() -> None:
    rng = random.Random(5)
    a = [10 + rng.gauss(0, 0.3) for _ in range(200)]
    b = [10 + rng.gauss(0, 0.3) for _ in range(200)]
    first = stats.ratio_interval(a[:20], b[:20], paired=True, seed=9)
    assert first == stats.ratio_interval(a[:20], b[:20], paired=True, seed=9)
    wide = first[2] - first[1]
    narrow = stats.ratio_interval(a, b, paired=True, seed=9)
    assert narrow[2] - narrow[1] < wide / 2


def test_calls_per_round_and_range_names() -> None:
    assert group.calls_per_round(5.0, 300.0, 100) == 60
    assert group.calls_per_round(2700.0, 300.0, 100) == 1
    assert group.calls_per_round(0.5, 300.0, 100) == 100
    assert group.calls_per_round(float("nan"), 300.0, 100) == 100
    assert group.parse_range(group.round_range("cuda.block512", 7)) == ("cuda.block512", 7)
    assert group.parse_range("capture") is None and group.parse_range("capture/x/y") is None
    assert [order.rotation(["a", "b", "c"], r)[0] for r in range(3)] == ["a", "b", "c"]
    assert derive.parse_range("capture/triton/12") == ("triton", 12)


# ----------------------------------------------------------------------------------------- derive


def make_group(tmp: Path, impls: list[str], per_call_ns: dict[str, int], rounds: int = 30, noise: float = 0.01,
               seed: int = 0) -> derive.Group:
    plan = {"op": "layernorm", "shape": SHAPE, "capture": {"rounds": rounds, "round_us": 300, "max_calls": 100}, "seed": seed}
    out = fake_device.results(plan, impls, set())
    export = fake_device.synthetic_export(tmp / "capture.sqlite", impls, rounds, out["calls_per_round"], seed=seed,
                                          overrides=per_call_ns, noise=noise)
    record = {"op": "layernorm", "shape": SHAPE, "impls": impls, "checks": out["checks"], "passed": impls,
              "rounds": rounds, "calls_per_round": out["calls_per_round"], "launch_paths": out["launch_paths"],
              "gpu_uuid": "GPU-1", "gpu": {"before": {}, "during": {"flags": []}, "after": {}},
              "span": {"exclusive": True, "threads": 16}}
    launches = pd.DataFrame(derive.launch_rows(export, "layernorm", SHAPE), columns=derive.LAUNCH_COLUMNS)
    spans = pd.DataFrame(out["spans"])
    return derive.Group(record=record, launches=launches, spans=spans, graph=pd.DataFrame(out["graphs"]))


def test_tables_of_one_group(tmp_path: Path) -> None:
    g = make_group(tmp_path, ["cuda", "triton", "torch", "cuda.twin"],
                   {"cuda": 5000, "triton": 5200, "torch": 9000, "cuda.twin": 5000})
    t = derive.namespace_tables([g], namespace="ns", cache_mode="hot", descriptions={"layernorm": {"twin": "A/A"}})
    kt = {r["impl"]: r for r in t["kernel_time"]}
    assert math.isclose(kt["cuda"]["kernel_time_us"], 5.0, rel_tol=0.01)
    assert kt["cuda"]["kernel_time_lo_us"] < kt["cuda"]["kernel_time_us"] < kt["cuda"]["kernel_time_hi_us"]
    assert kt["triton"]["launch_path"] == "prepared" and kt["cuda"]["rounds"] == 30
    (sweep,) = t["sweep"]
    assert sweep["cuda_vs_triton"] == "faster" and sweep["cuda_over_triton_hi"] < 1.0
    assert sweep["half_width"] < 0.01 and sweep["placements"] == 1  # a record without placements
    g.record.update(placements=6, round_placements=order.round_placements(30, 6, seed=3))
    (placed,) = derive.namespace_tables([g], namespace="ns", cache_mode="hot", descriptions={})["sweep"]
    assert placed["placements"] == 6 and placed["cuda_over_triton"] == sweep["cuda_over_triton"]
    assert placed["cuda_over_triton_lo"] != sweep["cuda_over_triton_lo"]  # the interval is over the placements
    (twin,) = t["variants"]
    assert twin["variant"] == "cuda.twin" and twin["verdict"] == "same" and twin["description"] == "A/A"
    assert len(t["rounds"]) == 4 * 30 and {r["impl"] for r in t["rounds"]} == {"cuda", "triton", "torch", "cuda.twin"}
    detail = [r for r in t["kernel_time_detail"] if r["impl"] == "cuda"]
    assert detail[0]["per_iteration"] == 1.0 and detail[0]["grid"] == "64x1x1"
    assert {r["impl"] for r in t["span"]} == {"cuda", "triton", "torch", "cuda.twin"}
    assert all(r["exclusive"] is True for r in t["span"])
    assert all(r["agree"] for r in t["cross_check"])


def test_a_planted_two_and_a_half_percent_is_slower(tmp_path: Path) -> None:
    g = make_group(tmp_path, ["cuda", "cuda.planted"], {"cuda": 5000}, noise=0.01)
    t = derive.namespace_tables([g], namespace="ns", cache_mode="hot", descriptions={})
    (planted,) = t["variants"]
    assert planted["verdict"] == "slower" and 1.015 < planted["ratio"] < 1.035


def test_wide_noise_cannot_tell(tmp_path: Path) -> None:
    g = make_group(tmp_path, ["cuda", "triton"], {"cuda": 5000, "triton": 5000}, rounds=4, noise=0.2)
    (sweep,) = derive.namespace_tables([g], namespace="ns", cache_mode="hot", descriptions={})["sweep"]
    assert sweep["cuda_vs_triton"] == "can't tell"


# ----------------------------------------------------------------------------------------- the step


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return standin_measure.use_standin_nsys(tmp_path, monkeypatch)


def run_step(tmp: Path, impls: list[str], extra_variants: dict | None = None) -> dict:
    cfg = config.load(ROOT / "config.yaml")
    plan = config.measure_plan(cfg, "layernorm")
    plan["params"]["variants"].update(extra_variants or {})
    folder = tmp / "artifacts" / "ns" / "measure" / "layernorm" / SHAPE
    settings = {**config.operational(cfg), "nsys_path": None}
    settings["gpu_state"] = {**settings["gpu_state"], "busy_wait_s": 0.1}
    return measure_step.measure(op="layernorm", shape=SHAPE, impls=impls, plan=plan, group_dir=folder,
                                log=str(tmp / "measure.log"), settings=settings, exclusive=True, threads=4)


def test_the_step_writes_a_group(standin: Path) -> None:
    record = run_step(standin, ["cuda", "triton", "torch"])
    folder = standin / "artifacts" / "ns" / "measure" / "layernorm" / SHAPE
    rounds = config.validate(config.load(config.ROOT / "config.yaml"))["capture"]["rounds"]
    assert record["passed"] == ["cuda", "triton", "torch"] and record["rounds"] == rounds
    assert (folder / "capture.sqlite").is_file() and (folder.parents[1] / capture.SESSION_REPORT).is_file()
    assert json.loads((folder / "record.json").read_text())["span"]["exclusive"] is True
    launches = pd.read_csv(folder / "launches.csv")
    assert set(launches["impl"]) == {"cuda", "triton", "torch"}
    assert not list(folder.glob("*.partial*")) and not list(folder.parents[1].glob("session.*.json"))
    tables = derive.namespace_tables([derive.read_group(folder)], namespace="ns", cache_mode="hot", descriptions={})
    assert tables["sweep"][0]["cuda_vs_triton"] in stats.VERDICTS


def test_a_crash_is_recorded_and_the_rest_measured(standin: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = run_step(standin, ["cuda", "triton", "cuda.crash"], {"crash": {"base": "cuda", "defines": {}}})
    assert record["crashed"] == {"cuda.crash": record["checks"]["cuda.crash"]["error"]}
    assert record["checks"]["cuda.crash"]["passed"] is False and "crashed on the GPU" in record["checks"]["cuda.crash"]["error"]
    assert record["passed"] == ["cuda", "triton"]
    assert "measure: layernorm 4096x768 cuda.crash crashed" in capsys.readouterr().out


def test_a_failed_check_is_not_timed(standin: Path) -> None:
    record = run_step(standin, ["cuda", "triton", "cuda.wrong"], {"wrong": {"base": "cuda", "defines": {}}})
    assert record["checks"]["cuda.wrong"]["passed"] is False and "cuda.wrong" not in record["passed"]
    folder = standin / "artifacts" / "ns" / "measure" / "layernorm" / SHAPE
    assert "cuda.wrong" not in set(pd.read_csv(folder / "launches.csv")["impl"])


# ----------------------------------------------------------------------------------------- secrets


def test_outside_values_leave_out_the_allowlist_and_short_values() -> None:
    env = {"PATH": "/usr/bin:/bin", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG", "X": "1", "COPY_OF_PATH": "/usr/bin:/bin",
           "SOME_HOME": "/usr/share"}
    assert capture.outside_values(env) == {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG"}


def test_the_commit_a_copy_without_git_is_given_is_not_a_credential() -> None:
    """The provenance writes EVIDENCE_GIT_COMMIT into the reports on purpose: neither the capture's
    scrub nor the bundle's searches for it, while a credential beside it still is."""
    env = {"EVIDENCE_GIT_COMMIT": "0123456789abcdef" * 2 + "01234567", "EVIDENCE_GIT_DIRTY": "uncommitted",
           "GITHUB_TOKEN": "ghp_" + "x" * 30}
    assert capture.outside_values(env) == {"GITHUB_TOKEN": "ghp_" + "x" * 30}


def test_a_leaked_value_is_blanked_from_an_export_and_a_raw_file_is_deleted(tmp_path: Path) -> None:
    secret = "tok_" + "9" * 20
    export = fake_device.synthetic_export(tmp_path / "c.sqlite", ["cuda"], 2, {"cuda": 2})
    import sqlite3

    conn = sqlite3.connect(export)
    conn.execute("CREATE TABLE IF NOT EXISTS META_DATA_CAPTURE (name TEXT, value TEXT)")
    conn.execute("INSERT INTO META_DATA_CAPTURE VALUES ('OddName', ?)", (f"SOMETHING={secret}",))
    conn.execute("INSERT INTO StringIds (id, value) VALUES (99999, ?)", (f"x;{secret};y",))
    conn.commit()
    conn.close()
    raw = tmp_path / "c.nsys-rep"
    raw.write_bytes(b"\x00binary" + secret.encode("utf-16-le") + b"\x00")
    clean = tmp_path / "c.log"
    clean.write_text("nothing here\n")
    log = tmp_path / "d.log"
    log.write_text(f"$ tool --token={secret}\n")
    notes = capture.keep_clean([export, raw, clean, log], {"TOKEN": secret})
    assert secret.encode() not in export.read_bytes()
    assert not raw.exists() and clean.exists()
    assert log.read_text() == "$ tool --token=[TOKEN withheld]\n"
    assert notes == ["c.sqlite: the value of TOKEN blanked",
                     "c.nsys-rep: deleted, it held the value of TOKEN from the invoking environment",
                     "d.log: the value of TOKEN withheld"]


def test_the_nsys_command_runs_under_a_private_minimal_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s" * 24)
    env = capture.private_env(tmp_path / "p")
    assert "AWS_SECRET_ACCESS_KEY" not in env and env["TMPDIR"] == str(tmp_path / "p")
    argv = capture.group_command("/x/nsys", ["cuda", "nvtx"], ["--sample=none"], tmp_path / "base", tmp_path / "plan.json")
    assert argv[:2] == ["/x/nsys", "profile"] and "--capture-range-end" in argv and argv[-2:] == ["group", str(tmp_path / "plan.json")]


def test_the_profiled_process_sees_no_value_of_the_invoking_environment_and_the_raw_report_is_kept(
        standin: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 31: on the H200 every raw report held values of the invoking shell although nsys ran
    under the minimal environment; its HOME was still the shell's (`setdefault` over an allowlisted
    HOME), so a daemon, socket or configuration an nsys started from the shell had left there was
    found. The stand-in nsys notes everything it (and so the profiled process, which inherits it)
    was given, and its parent's environment as /proc shows it: no planted value anywhere, a home of
    its own, and the raw report kept beside the export."""
    secret = "AKIA" + "7" * 16 + "planted/secret"
    shell_home = tmp_path / "shell-home"
    shell_home.mkdir()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("SOME_TOKEN", "tok-" + secret[::-1])
    monkeypatch.setenv("HOME", str(shell_home))
    run_step(standin, ["cuda", "triton"])
    seen = json.loads((standin / "bin" / "seen-environ.json").read_text())
    values = "\0".join(f"{k}={v}" for k, v in seen.items())
    assert secret not in values and secret[::-1] not in values
    assert "AWS_SECRET_ACCESS_KEY" not in seen and "SOME_TOKEN" not in seen
    assert seen["HOME"] != str(shell_home) and Path(seen["HOME"]).is_relative_to(seen["TMPDIR"])
    assert seen["TRITON_CACHE_DIR"] == str(shell_home / ".triton" / "cache")  # the kernel caches stay the shell's
    parent = standin / "bin" / "seen-parent-environ"
    if parent.is_file():  # Linux: the clean shell nsys runs under
        assert secret.encode() not in parent.read_bytes() and f"HOME={shell_home}\0".encode() not in parent.read_bytes()
    folder = standin / "artifacts" / "ns" / "measure" / "layernorm" / SHAPE
    assert (folder.parents[1] / capture.SESSION_REPORT).is_file()  # nothing in it to withhold, so it is kept
    assert json.loads((folder / "record.json").read_text())["environment_removed"] == []


def test_measure_plan_leaves_out_what_does_not_change_a_measurement() -> None:
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    base = config.measure_plan(config.validate(raw), "layernorm")
    for key, value in (("gpu_lock_timeout_s", 5), ("trust", {"margin": 0.2})):
        changed = dict(raw)
        changed[key] = value
        assert config.measure_plan(config.validate(changed), "layernorm") == base, key
    changed = yaml.safe_load((ROOT / "config.yaml").read_text())
    changed["operations"]["layernorm"]["sweep"] = ["4096x768"]
    assert config.measure_plan(config.validate(changed), "layernorm") == base  # shapes are the group's own
    changed["capture"]["rounds"] = 12
    assert config.measure_plan(config.validate(changed), "layernorm") != base


@pytest.mark.skipif(__import__("harness.gpu.device", fromlist=["has_gpu"]).has_gpu(), reason="checks the no-GPU path")
def test_without_a_gpu_the_step_stops_before_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a node without a GPU (a cluster job sent to the wrong partition) the sentence says so,
    not that nsys is missing."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ToolMissing, match="no CUDA GPU is visible here"):
        run_step(tmp_path, ["cuda"])
    assert not (tmp_path / "artifacts").exists()


def test_triton_hooks_that_are_an_empty_chain_are_no_hooks() -> None:
    """Newer Triton sets its launch hooks to an empty HookChain by default: that is no hook, and the
    prepared launch is kept; a chain with a call in it, or any other object, is a hook."""
    from harness.launch import triton as triton_launch

    class Chain:
        def __init__(self, calls: list) -> None:
            self.calls = calls

    assert not triton_launch._hooked(None) and not triton_launch._hooked(Chain([]))
    assert triton_launch._hooked(Chain([print])) and triton_launch._hooked(print)


def test_the_tables_step_says_how_many_kernel_rows_had_no_duration(standin: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The group's record carries the export's count of kernel rows without a duration, and the
    tables job says it in its log instead of dropping them without a word."""
    from harness.tables import step as tables_step

    run_step(standin, ["cuda", "triton"])
    folder = standin / "artifacts" / "ns" / "measure" / "layernorm" / SHAPE
    record = json.loads((folder / "record.json").read_text())
    assert record["export"]["kernels_without_duration"] == 0
    record["export"]["kernels_without_duration"] = 1000000
    (folder / "record.json").write_text(json.dumps(record))
    capsys.readouterr()
    tables_step._groups([str(folder / "record.json")])
    assert capsys.readouterr().out == (f"export: 1000000 kernel rows of layernorm {SHAPE}'s capture have no duration "
                                       "(a NULL start or end) and are not counted in any summary, launch or kernel time.\n")


# ----------------------------------------------------------------------------------------- a session


def session_settings() -> dict:
    """The operational settings of config.yaml, nsys found on PATH, a short wait for a quiet GPU."""
    settings = {**config.operational(config.load(ROOT / "config.yaml")), "nsys_path": None}
    settings["gpu_state"] = {**settings["gpu_state"], "busy_wait_s": 0.1}
    return settings


def test_a_session_measures_its_groups_in_one_process_and_splits_the_export(standin: Path) -> None:
    """Two groups of two operations in one session: one nsys run, one raw report for the session,
    and each group's folder with its own part of the export (its rounds only, read by the same
    launch_rows as a group measured alone), its launches and record; job-times then holds one row
    per group and one for the session, adding up to the measure job."""
    from harness.tables import job_times

    cfg, settings = config.load(ROOT / "config.yaml"), session_settings()
    measure = standin / "artifacts" / "ns" / "measure"
    asked = (("layernorm", SHAPE, ["cuda", "triton"]), ("softmax", "4096x1024", ["cuda", "torch"]))
    groups: list[dict[str, Any]] = [{"op": op, "shape": shape, "impls": impls, "plan": config.measure_plan(cfg, op),
                                     "group_dir": measure / op / shape} for op, shape, impls in asked]
    records = measure_step.measure_session(groups=groups, session_dir=measure, log=str(standin / "session.log"),
                                           settings=settings, exclusive=True, threads=4)
    assert [(r["op"], r["passed"]) for r in records] == [("layernorm", ["cuda", "triton"]), ("softmax", ["cuda", "torch"])]
    assert (measure / capture.SESSION_REPORT).is_file() and not (measure / "session.sqlite").exists()
    assert len(json.loads((standin / "bin" / "seen-env.json").read_text())) > 0  # nsys ran
    for g, record in zip(groups, records):
        folder = Path(g["group_dir"])
        launches = pd.read_csv(folder / "launches.csv")
        assert set(launches["impl"]) == set(g["impls"]) and set(launches["op"]) == {g["op"]}
        assert len(launches) == sum(record["calls_per_round"][i] for i in g["impls"]) * record["rounds"]
        again = derive.launch_rows(folder / "capture.sqlite", g["op"], g["shape"])
        assert len(again) == len(launches)  # the part holds this group's rounds and no other's
        other = groups[1 - groups.index(g)]
        assert derive.launch_rows(folder / "capture.sqlite", other["op"], other["shape"]) == []
        assert record["session"]["groups"] == ["layernorm/4096x768", "softmax/4096x1024"]
        assert json.loads((folder / "record.json").read_text())["session"] == record["session"]
    rows = job_times.group_rows(measure)
    assert [r["op"] for r in rows] == ["layernorm", "softmax", job_times.SESSION]
    assert math.isclose(math.fsum(r["job"] for r in rows), records[0]["session"]["seconds"]["job"], rel_tol=1e-9)


def test_nvml_flags_only_the_group_it_saw_the_cap_with(standin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One NVML watch covers a session of several groups; each group's rows say what NVML saw in
    that group's own windows (the group process notes them): the software power cap read while the
    second group ran flags its captures and not the first's or the third's, and every row names
    what the session's watch saw as a whole."""
    bin_dir = standin / "bin"
    (bin_dir / "group-s").write_text("0.5")
    (bin_dir / "cap-shapes").write_text("8192x768")

    def reader_of(uuid: str):  # type: ignore[no-untyped-def]
        def reading() -> dict:
            capping = (bin_dir / "capping").exists()
            return {"utilization_pct": 90, "compute_processes": 0, "pids": [], "power_w": 690.0 if capping else 400.0,
                    "throttle_reasons": 0x4 if capping else 0x0, "sm_clock_mhz": 1875 if capping else 1980}
        return reading

    monkeypatch.setattr(measure_step, "_gpu_reader", reader_of)
    cfg, settings = config.load(ROOT / "config.yaml"), session_settings()
    settings["gpu_state"] = {**settings["gpu_state"], "sample_interval_s": 0.05, "busy_utilization_pct": 100}
    measure = standin / "artifacts" / "ns" / "measure"
    groups: list[dict[str, Any]] = [{"op": "layernorm", "shape": shape, "impls": ["cuda", "triton"],
                                     "plan": config.measure_plan(cfg, "layernorm"), "group_dir": measure / "layernorm" / shape}
                                    for shape in (SHAPE, "8192x768", "1024x2048")]
    records = measure_step.measure_session(groups=groups, session_dir=measure, log=str(standin / "s.log"),
                                           settings=settings, exclusive=True, threads=4)
    cap = "the GPU throttled during the capture (software power cap)"
    assert all(r["gpu"]["during"]["flags"] == [cap] for r in records)  # the session's watch saw it
    rows = [row for g in groups for row in derive.gpu_state_rows(derive.read_group(Path(g["group_dir"])), "ns")]
    assert [(r["shape"], r["disturbed"]) for r in rows] == [(SHAPE, False), (SHAPE, False), ("8192x768", True),
                                                            ("8192x768", True), ("1024x2048", False), ("1024x2048", False)]
    assert {r["flags"] for r in rows if r["disturbed"]} == {cap} and {r["flags"] for r in rows if not r["disturbed"]} == {""}
    assert {r["during_extent"] for r in rows} == {"group"} and {r["session_flags"] for r in rows} == {cap}
    capped = next(r for r in rows if r["disturbed"])
    assert capped["during_busy_sm_clock_min_mhz"] == 1875 and capped["during_busy_power_max_w"] == 690.0
    clean = rows[0]
    assert (clean["during_busy_sm_clock_min_mhz"], clean["during_busy_power_max_w"]) == (1980, 400.0)
    assert all(r["during_samples"] >= 5 for r in rows)  # half a second of readings every 0.05 s, each group
    # a record from before the windows were noted keeps the session's reading, and says so
    old = derive.read_group(Path(groups[0]["group_dir"]))
    old.record["gpu"].pop("group")
    (row, _) = derive.gpu_state_rows(old, "ns")
    assert (row["during_extent"], row["disturbed"], row["flags"]) == ("session", True, cap)


def test_a_crash_in_a_session_measures_every_group_again_without_it(standin: Path) -> None:
    cfg, settings = config.load(ROOT / "config.yaml"), session_settings()
    measure = standin / "artifacts" / "ns" / "measure"
    plan = config.measure_plan(cfg, "layernorm")
    plan["params"]["variants"]["crash"] = {"base": "cuda", "defines": {}}
    groups = [{"op": "layernorm", "shape": shape, "impls": ["cuda", "cuda.crash"] if shape == "8192x768" else ["cuda"],
               "plan": plan, "group_dir": measure / "layernorm" / shape} for shape in (SHAPE, "8192x768")]
    first, second = measure_step.measure_session(groups=groups, session_dir=measure, log=str(standin / "s.log"),
                                                 settings=settings, exclusive=True, threads=4)
    assert first["passed"] == ["cuda"] and first["crashed"] == {}
    assert second["passed"] == ["cuda"] and list(second["crashed"]) == ["cuda.crash"]
    assert second["checks"]["cuda.crash"]["passed"] is False


def test_a_group_whose_every_check_failed_has_no_part_of_the_export(standin: Path) -> None:
    """Beside a group that was captured, one whose every implementation failed its check has no
    window in the session's export: it gets its record and empty tables, and no export of its own."""
    cfg, settings = config.load(ROOT / "config.yaml"), session_settings()
    measure = standin / "artifacts" / "ns" / "measure"
    plan = config.measure_plan(cfg, "layernorm")
    plan["params"]["variants"]["wrong"] = {"base": "cuda", "defines": {}}
    groups = [{"op": "layernorm", "shape": shape, "impls": impls, "plan": plan, "group_dir": measure / "layernorm" / shape}
              for shape, impls in ((SHAPE, ["cuda"]), ("8192x768", ["cuda.wrong"]))]
    good, bad = measure_step.measure_session(groups=groups, session_dir=measure, log=str(standin / "s.log"),
                                             settings=settings, exclusive=True, threads=4)
    assert good["passed"] == ["cuda"] and (measure / "layernorm" / SHAPE / "capture.sqlite").is_file()
    assert bad["passed"] == [] and bad["checks"]["cuda.wrong"]["passed"] is False
    assert not (measure / "layernorm" / "8192x768" / "capture.sqlite").exists()
    assert pd.read_csv(measure / "layernorm" / "8192x768" / "launches.csv").empty


@pytest.mark.parametrize("name", ["h200-pipeline-layernorm-4096x768-cuda", "h200-pipeline-layernorm-4096x768-torch"])
def test_a_real_export_split_by_a_window_over_all_of_it_reads_as_the_export_does(tmp_path: Path, name: str) -> None:
    """split_export on a real H200 export (nsys's own schema: 42 tables, its column types): given a
    window over the whole capture, the part holds every table and row with a time in it, and the
    reader prints for the part what it prints for the export; a window over half its kernels keeps
    only those."""
    import shutil
    import sqlite3

    from harness.tables import nsys

    session = tmp_path / "session.sqlite"
    shutil.copy(nsys_fixtures.export(name), session)
    conn = sqlite3.connect(session)
    first, last = conn.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    earliest = min(r[0] for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL")
                   for r in conn.execute(f"SELECT min(start) FROM {t}"))
    tid = conn.execute("SELECT globalTid FROM NVTX_EVENTS LIMIT 1").fetchone()[0]
    conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, 59, ?, ?)",
                 (earliest, last + 1, "group/all/1x1", tid))
    kernels = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    middle = conn.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1 OFFSET ?",
                          (kernels // 2,)).fetchone()[0]
    conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, 59, ?, ?)",
                 (middle, last + 1, "group/half/1x1", tid))
    conn.commit()
    conn.close()
    whole, half = tmp_path / "whole.sqlite", tmp_path / "half.sqlite"
    capture.split_export(session, whole, "group/all/1x1")
    capture.split_export(session, half, "group/half/1x1")
    tables = "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name"
    with sqlite3.connect(session) as a, sqlite3.connect(whole) as b:
        assert a.execute(tables).fetchall() == b.execute(tables).fetchall()
    assert nsys.kern_sum(whole) == nsys.kern_sum(nsys_fixtures.export(name))
    with sqlite3.connect(half) as c:
        assert c.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] == kernels - kernels // 2
    assert sum(r["Instances"] for r in nsys.kern_sum(half)) == kernels - kernels // 2
