"""GPU state around a capture, with NVML readings played back: a busy GPU is waited for and then
refused, a slowing throttle or another process during the capture marks it, and the gpu_state
table (one row per implementation a measurement group captured) and the report say so. The measure
step's own use of the watch: tests/test_capture_step.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from harness.errors import EvidenceError
from harness.gpu.watch import Sampler, busy_reason, lineage, others_only, slowing, wait_until_quiet
from harness.report import render as report
from harness.tables import derive as tables
from harness.gpu.watch import POWER_CAP_FLAG

POLICY = {"busy_utilization_pct": 5, "max_other_processes": 0, "busy_wait_s": 3.0, "sample_interval_s": 0.01}


def reading(util: int = 0, procs: int = 0, throttle: int = 0, power: float = 76.0) -> dict:
    return {"utilization_pct": util, "compute_processes": procs, "pids": list(range(100, 100 + procs)),
            "throttle_reasons": throttle, "power_w": power, "sm_clock_mhz": 345}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_quiet_gpu_is_not_waited_for() -> None:
    clock = Clock()
    state, waited = wait_until_quiet(lambda: reading(), POLICY, sleep=clock.sleep, clock=clock)
    assert waited == 0 and busy_reason(state, POLICY) is None


def test_busy_gpu_is_waited_for_until_it_is_quiet() -> None:
    clock = Clock()
    seq = iter([reading(util=90, procs=1), reading(util=40, procs=1), reading()])
    state, waited = wait_until_quiet(lambda: next(seq), POLICY, sleep=clock.sleep, clock=clock)
    assert waited == 2.0 and state["utilization_pct"] == 0


def test_gpu_busy_past_the_wait_fails_in_one_sentence() -> None:
    clock = Clock()
    with pytest.raises(EvidenceError) as info:
        wait_until_quiet(lambda: reading(util=97, procs=2), POLICY, sleep=clock.sleep, clock=clock)
    msg = str(info.value)
    assert "97% utilisation" in msg and "2 other compute process" in msg and "\n" not in msg


def test_without_nvml_nothing_is_judged() -> None:
    assert busy_reason({"nvml": "unavailable: NVMLError"}, POLICY) is None


def test_slowing_reasons_exclude_idle() -> None:
    assert slowing(0x1) == [] and slowing(0x1 | 0x40) == ["hardware thermal slowdown"]


def test_sampler_marks_a_throttled_or_shared_capture() -> None:
    quiet = Sampler(lambda: reading(procs=1), 0.01)
    with quiet:
        pass
    assert quiet.flags() == [] and quiet.samples >= 1
    noisy_seq = iter([reading(procs=1), reading(procs=2, throttle=0x20)] + [reading(procs=1)] * 1000)
    noisy = Sampler(lambda: next(noisy_seq), 0.001)
    with noisy:
        while noisy.samples < 3:
            pass
    flags = noisy.flags()
    assert any("software thermal slowdown" in f for f in flags)
    assert any("another compute process" in f for f in flags)


def test_a_slowing_reason_read_while_the_gpu_idles_disturbs_nothing() -> None:
    """NVML may report the software power cap beside 'idle' while nothing runs (seen on lent H100s:
    mask 5 over whole sessions): such a sample slows no kernel and flags nothing, while the same
    reason in a sample taken while the GPU works flags the capture; the summary keeps both masks."""
    idle_cap = iter([reading(procs=1, throttle=0x1 | 0x4)] * 1000)
    quiet = Sampler(lambda: next(idle_cap), 0.001)
    with quiet:
        while quiet.samples < 3:
            pass
    assert quiet.flags() == []
    assert quiet.summary()["throttle_reasons"] == 0x5 and quiet.summary()["busy_throttle_reasons"] == 0
    busy_cap = iter([reading(procs=1, throttle=0x1 | 0x4), reading(procs=1, util=90, throttle=0x4)]
                    + [reading(procs=1, throttle=0x1)] * 1000)
    noisy = Sampler(lambda: next(busy_cap), 0.001)
    with noisy:
        while noisy.samples < 3:
            pass
    assert noisy.flags() == ["the GPU throttled during the capture (software power cap)"]
    assert noisy.summary()["busy_throttle_reasons"] == 0x4


def test_the_clock_and_power_of_the_busy_samples_are_kept() -> None:
    """How far a cap held the clock while kernels ran: the SM clock's range and the most power of
    the samples without the idle reason, none of the idle ones (their clock drops between kernels)."""
    seq = iter([{**reading(procs=1, throttle=0x1 | 0x4, power=70.0), "sm_clock_mhz": 345},
                {**reading(procs=1, util=90, throttle=0x4, power=512.5), "sm_clock_mhz": 1755},
                {**reading(procs=1, util=90, throttle=0x0, power=430.0), "sm_clock_mhz": 1980}]
               + [{**reading(procs=1, throttle=0x1, power=80.0), "sm_clock_mhz": 465}] * 1000)
    sampler = Sampler(lambda: next(seq), 0.001)
    with sampler:
        while sampler.samples < 4:
            pass
    summary = sampler.summary()
    assert summary["busy_samples"] == 2 and summary["samples"] >= 4
    assert (summary["busy_sm_clock_min_mhz"], summary["busy_sm_clock_max_mhz"]) == (1755, 1980)
    assert summary["busy_power_max_w"] == 512.5
    idle = Sampler(lambda: reading(procs=1, throttle=0x1), 0.01)
    with idle:
        pass
    assert idle.summary()["busy_samples"] == 0 and idle.summary()["busy_sm_clock_min_mhz"] is None


def test_a_window_holds_the_readings_inside_it_or_the_two_around_it() -> None:
    """Sampler.within: the readings taken inside a group's windows; a window no reading fell inside
    (shorter than the interval) is told by the last reading before it and the first after it."""
    sampler = Sampler(lambda: reading(), 1.0)
    for t in range(10):  # the cap read at t = 3 and 4 only, while the GPU worked
        sampler.add({**reading(util=90, throttle=0x4 if t in (3, 4) else 0x0, power=600.0 + t), "t": float(t)})
    clean = sampler.within([(0.5, 2.5)])
    assert [s["t"] for s in clean.timeline] == [1.0, 2.0] and clean.flags() == []
    capped = sampler.within([(2.5, 3.5), (7.5, 8.5)])
    assert [s["t"] for s in capped.timeline] == [3.0, 8.0]
    assert capped.flags() == [POWER_CAP_FLAG]  # the sentence the trust rules read (harness.tables.retained)
    assert capped.summary()["busy_power_max_w"] == 608.0 and capped.summary()["samples"] == 2
    between = sampler.within([(4.2, 4.4)])  # no reading inside: the ones at 4 and 5 tell it
    assert [s["t"] for s in between.timeline] == [4.0, 5.0] and between.flags() != []
    assert [s["t"] for s in sampler.within([(5.2, 5.4)]).timeline] == [5.0, 6.0]
    assert sampler.within([(5.2, 5.4)]).flags() == []
    assert sampler.within([]).samples == 0 and sampler.samples == 10  # the session's own reading is left whole


def group(shape: str, gpu: dict, impls: list[str], failed: list[str]) -> tables.Group:
    """A measured group as read back (only its record matters to the gpu_state table)."""
    checks = {i: {"op": "layernorm", "shape": shape, "impl": i, "passed": i not in failed} for i in impls}
    record = {"op": "layernorm", "shape": shape, "impls": impls, "checks": checks,
              "passed": [i for i in impls if i not in failed], "gpu_uuid": "GPU-1", "gpu": gpu}
    return tables.Group(record=record, launches=pd.DataFrame(columns=tables.LAUNCH_COLUMNS))


def test_gpu_state_table_and_report_line() -> None:
    """One NVML watch covers a group's whole capture: every implementation captured there gets its
    row, an implementation whose check failed (never captured) gets none."""
    quiet = group("8x8", {"before": reading(power=76.0), "waited_s": 0.0,
                          "during": {"samples": 5, "throttle_reasons": 0, "max_compute_processes": 1, "flags": []},
                          "after": reading(power=90.0)}, ["cuda", "triton", "cuda.wrong"], failed=["cuda.wrong"])
    flag = "the GPU throttled during the capture (software thermal slowdown)"
    noisy = group("16x8", {"before": reading(power=81.5), "waited_s": 4.0,
                           "during": {"samples": 5, "throttle_reasons": 0x20, "max_compute_processes": 2, "flags": [flag]},
                           "after": reading()}, ["cuda", "triton"], failed=[])
    rows = tables.gpu_state_rows(quiet, "ns") + tables.gpu_state_rows(noisy, "ns")
    frame = pd.DataFrame(rows, columns=tables.GPU_STATE_COLUMNS)
    assert [(r["shape"], r["impl"]) for r in rows] == [("8x8", "cuda"), ("8x8", "triton"), ("16x8", "cuda"), ("16x8", "triton")]
    assert list(frame["disturbed"]) == [False, False, True, True]
    assert set(frame.loc[frame["disturbed"], "flags"]) == {flag}
    assert list(frame["waited_s"]) == [0.0, 0.0, 4.0, 4.0] and list(frame["after_power_w"]) == [90.0, 90.0, 76.0, 76.0]
    quiet_line = report.gpu_quiet(frame)
    assert quiet_line is not None and quiet_line["captures"] == 4
    assert quiet_line["power"] == "76-81.5" and quiet_line["utilization"] == "0" and quiet_line["waited_max_s"] == 4.0
    assert [(d["shape"], d["impl"]) for d in quiet_line["disturbed"]] == [("16x8", "cuda"), ("16x8", "triton")]
    assert "while busy" not in str(quiet_line["table"])  # a table without the busy samples' readings: no such column
    # where NVML gave them: the busy samples' clock against its maximum, their power against the limit
    capped = group("32x8", {"before": {**reading(power=140.9), "power_limit_w": 700.0, "max_sm_clock_mhz": 1980},
                            "waited_s": 0.0, "after": reading(),
                            "during": {"samples": 9, "throttle_reasons": 0x5, "busy_throttle_reasons": 0x4,
                                       "busy_samples": 6, "busy_sm_clock_min_mhz": 1755, "busy_sm_clock_max_mhz": 1980,
                                       "busy_power_max_w": 512.5, "max_compute_processes": 1,
                                       "flags": ["the GPU throttled during the capture (software power cap)"]}},
                   ["cuda"], failed=[])
    (row,) = tables.gpu_state_rows(capped, "ns")
    assert (row["before_power_limit_w"], row["before_max_sm_clock_mhz"], row["during_busy_samples"],
            row["during_busy_throttle_reasons"], row["during_busy_sm_clock_min_mhz"], row["during_busy_sm_clock_max_mhz"],
            row["during_busy_power_max_w"]) == (700.0, 1980, 6, 0x4, 1755, 1980, 512.5)
    line = report.gpu_quiet(pd.DataFrame(rows + [row], columns=tables.GPU_STATE_COLUMNS))
    assert line is not None
    text = str(line["table"])
    assert "SM clock while busy MHz (of max)" in text and "1755-1980 (1980)" in text and "512.5 (700)" in text
    assert line["attributed"] == ""  # records from before the groups' windows: the session's reading alone


def test_a_report_says_which_groups_the_sessions_flag_came_with() -> None:
    """Where each group's row is what NVML read in its own windows, the report says what the
    session's watch flagged as a whole and how many groups it was read in."""
    cap = "the GPU throttled during the capture (software power cap)"
    session = {"samples": 30, "throttle_reasons": 0x4, "busy_throttle_reasons": 0x4, "max_compute_processes": 1,
               "flags": [cap]}

    def watched(shape: str, flags: list[str]) -> tables.Group:
        own = {"samples": 10, "throttle_reasons": 0x4 if flags else 0, "max_compute_processes": 1, "flags": flags,
               "windows": [[0.0, 1.0]]}
        return group(shape, {"before": reading(), "waited_s": 0.0, "during": session, "group": own, "after": reading()},
                     ["cuda", "triton"], failed=[])

    rows = [r for shape, flags in (("8x8", []), ("16x8", [cap]), ("32x8", [])) for r in tables.gpu_state_rows(watched(shape, flags), "ns")]
    frame = pd.DataFrame(rows, columns=tables.GPU_STATE_COLUMNS)
    assert list(frame["disturbed"]) == [False, False, True, True, False, False]
    assert set(frame["during_extent"]) == {"group"} and set(frame["session_flags"]) == {cap}
    line = report.gpu_quiet(frame)
    assert line is not None and [d["shape"] for d in line["disturbed"]] == ["16x8", "16x8"]
    assert line["attributed"] == (f"NVML's watch over the whole measurement session flagged {cap}; read in each group's "
                                  "own windows (its checks, warm-up, spans and cross-checks, and its captured rounds), "
                                  "1 of 3 groups was flagged, and only those groups' captures are marked disturbed.")


# ----------------------------------------------------------------------------- own processes


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])


def test_the_lineage_holds_this_process_its_parent_and_its_children_but_not_a_sibling() -> None:
    a, b = _sleeper(), _sleeper()
    try:
        mine = lineage()
        assert {os.getpid(), os.getppid(), a.pid, b.pid} <= mine
        of_a = lineage(a.pid)  # from a child's side: its parent (this process) is its own, its sibling is not
        assert {a.pid, os.getpid()} <= of_a and b.pid not in of_a
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_the_measurements_own_processes_are_not_waited_for_but_another_one_is() -> None:
    """A test run (or Snakemake) holding a CUDA context of its own, and the group process it
    starts, are this measurement's; a process outside its lineage is another job's."""
    clock = Clock()
    own = {os.getpid(), 4242}

    def nvml(pids: list[int]) -> dict:
        return {**reading(procs=len(pids)), "pids": pids}

    state, waited = wait_until_quiet(others_only(lambda: nvml([os.getpid(), 4242]), lambda: own), POLICY,
                                     sleep=clock.sleep, clock=clock)
    assert waited == 0 and state["other_processes"] == 0 and state["compute_processes"] == 2
    with pytest.raises(EvidenceError, match=r"1 other compute process\(es\) \(pids \[777\]\)"):
        wait_until_quiet(others_only(lambda: nvml([os.getpid(), 777]), lambda: own), POLICY, sleep=clock.sleep,
                         clock=clock)


def test_the_sampler_flags_another_jobs_process_and_not_the_captured_one() -> None:
    own = {os.getpid(), 4242}
    quiet = Sampler(others_only(lambda: {**reading(procs=2), "pids": [os.getpid(), 4242]}, lambda: own), 0.01)
    with quiet:
        pass
    assert quiet.flags() == [] and quiet.summary()["max_other_processes"] == 0
    shared = Sampler(others_only(lambda: {**reading(procs=2), "pids": [4242, 31337]}, lambda: own), 0.01)
    with shared:
        pass
    (flag,) = shared.flags()
    assert flag.startswith("another compute process ran beside the captured one (1 at once; pids seen [31337])")


def test_a_process_once_the_measurements_own_stays_its_own_after_it_leaves_the_lineage() -> None:
    """NVML listed the group process for a moment after it exited (gone from /proc, so no longer
    a descendant): it was counted as another job's and the capture flagged as shared."""
    lineages = iter([{os.getpid(), 2969}, {os.getpid(), 2969}, {os.getpid()}, {os.getpid()}])
    read = others_only(lambda: {**reading(procs=1), "pids": [2969]}, lambda: next(lineages))
    assert read()["other_processes"] == 0 and read()["other_processes"] == 0
    assert read()["other_pids"] == []  # 2969 has left the lineage, and is still the measurement's
    stranger = others_only(lambda: {**reading(procs=1), "pids": [4242]}, lambda: {os.getpid()})
    assert stranger()["other_pids"] == [4242]  # one never in the lineage is another job's


def test_the_sampler_does_not_flag_the_group_process_as_it_exits() -> None:
    lineages = iter([{os.getpid(), 2969}] * 3 + [{os.getpid()}] * 1000)
    sampler = Sampler(others_only(lambda: {**reading(procs=1), "pids": [2969]}, lambda: next(lineages)), 0.001)
    for _ in range(6):
        sampler.take()
    assert sampler.max_others == 0 and sampler.flags() == []


# ----------------------------------------------------------------------------- the NVML reading


class FakeNVML:
    """pynvml as gpu_state reads it, on one GPU; `lacking` names the calls it refuses, as a driver
    or a GPU that does not support them does (NVMLError_NotSupported)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    class NVMLError(Exception):
        pass

    def __init__(self, lacking: frozenset[str] = frozenset()) -> None:
        self.lacking = lacking

    def __getattribute__(self, name: str) -> object:
        if name.startswith("nvmlDevice") and name in object.__getattribute__(self, "lacking"):
            def refuse(*args: object) -> object:
                raise FakeNVML.NVMLError(f"{name}: not supported")
            return refuse
        return object.__getattribute__(self, name)

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: return "580.159.04"
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int: return i
    def nvmlDeviceGetName(self, h: int) -> str: return "NVIDIA H200"
    def nvmlDeviceGetUUID(self, h: int) -> str: return "GPU-1"
    def nvmlDeviceGetUtilizationRates(self, h: int) -> object: return type("U", (), {"gpu": 0})()
    def nvmlDeviceGetMemoryInfo(self, h: int) -> object: return type("M", (), {"used": 2**30})()
    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list: return []
    def nvmlDeviceGetPowerUsage(self, h: int) -> int: return 140_900
    def nvmlDeviceGetClockInfo(self, h: int, which: int) -> int: return 1980 if which == 1 else 3201
    def nvmlDeviceGetTemperature(self, h: int, which: int) -> int: return 31
    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int: return 0x5
    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int: return 700_000
    def nvmlDeviceGetMaxClockInfo(self, h: int, which: int) -> int: return 1980


def test_the_reading_gives_the_power_limit_and_the_clocks_maximum_or_none_where_nvml_refuses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.gpu import device

    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML())
    state = device.gpu_state()
    assert (state["power_limit_w"], state["max_sm_clock_mhz"], state["power_w"], state["throttle_reasons"]) == (
        700.0, 1980, 140.9, 0x5)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML(frozenset({"nvmlDeviceGetEnforcedPowerLimit",
                                                                   "nvmlDeviceGetMaxClockInfo"})))
    lacking = device.gpu_state()  # the rest of the reading stands
    assert lacking["power_limit_w"] is None and lacking["max_sm_clock_mhz"] is None
    assert lacking["sm_clock_mhz"] == 1980 and lacking["utilization_pct"] == 0 and "nvml" not in lacking
