"""The GPU's state around a capture: quiet before it, undisturbed during it.

Before a capture the GPU must be quiet (utilisation and other compute processes under the
configured thresholds); a busy GPU is waited for, then the capture fails with one sentence.
During the capture a sampler thread reads NVML; a clock-throttle reason that slows the GPU, or
another compute process beside the captured one, marks the capture as disturbed. Reads only:
nothing here changes a setting of the GPU.

"Another" process is one outside the measurement's own lineage (`lineage`: the measuring process,
its ancestors and its descendants): a test run or a Snakemake that holds a CUDA context of its own
and starts the measurement, or the group process the measurement starts under nsys, is not
another job; `others_only` turns a reading into one that counts the other processes alone.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import EvidenceError

State = dict[str, Any]
Reader = Callable[[], State]

# NVML clocks-event (throttle) reasons that slow the GPU down. Idle (0x1), application clocks
# (0x2) and display/sync boosts are not disturbances.
IDLE_REASON = 0x1
SLOWING_REASONS = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "power brake",
}


def throttle_flag(name: str) -> str:
    """The sentence a capture's flags hold for the slowing throttle reason `name`."""
    return f"the GPU throttled during the capture ({name})"


POWER_CAP_FLAG = throttle_flag(SLOWING_REASONS[0x4])
"""The flag for the software power cap (reason 0x4), the one the trust rules may rank under
(harness.tables.retained)."""


def _parent(pid: int) -> int | None:
    """The parent of `pid` from /proc (None where it cannot be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the name in parentheses may hold spaces
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def ancestors(pid: int | None = None) -> set[int]:
    """The ancestors of `pid` (this process by default), from /proc; empty where it cannot be read."""
    me = os.getpid() if pid is None else pid
    found: set[int] = set()
    up = _parent(me)
    while up and up != me and up not in found:
        found.add(up)
        up = _parent(up)
    return found


def descendants(pid: int | None = None) -> set[int]:
    """The processes `pid` (this process by default) started, and theirs, from /proc; empty where
    it cannot be read."""
    me = os.getpid() if pid is None else pid
    try:
        parents = {int(d): _parent(int(d)) for d in os.listdir("/proc") if d.isdigit()}
    except OSError:
        return set()
    found: set[int] = set()
    frontier = {me}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier and child not in found}
        found |= frontier
    found.discard(me)
    return found


def lineage(pid: int | None = None) -> set[int]:
    """`pid` (this process by default) with its ancestors and its descendants: the processes of one
    measurement, none of which is another job."""
    me = os.getpid() if pid is None else pid
    return {me} | ancestors(me) | descendants(me)


def others_only(read: Reader, own: Callable[[], set[int]] = lineage) -> Reader:
    """`read` with `other_processes` and `other_pids` added: the compute processes outside the
    measurement's own. `own()` is read at each call, as the measurement starts its children, and
    a process once found among them stays the measurement's for the life of this reader: NVML may
    still list the group process for a moment after it exited and left /proc (no longer anyone's
    descendant), which flagged a capture as shared with "another" process that was the group's
    own (one pid over the whole capture). A process never in the lineage,
    one of another job or of another container, is still another. `compute_processes` and `pids`
    stay as NVML gave them."""
    seen: set[int] = set()

    def read_others() -> State:
        state = read()
        if "pids" not in state:
            return state
        seen.update(own())
        others = [pid for pid in state["pids"] if pid not in seen]
        return {**state, "other_processes": len(others), "other_pids": others}
    return read_others


def _others(state: State) -> tuple[int, list[int]]:
    """(count, pids) of the compute processes in a reading that are another job's: the ones
    `others_only` found, else all NVML saw."""
    if "other_processes" in state:
        return int(state["other_processes"]), list(state.get("other_pids", []))
    return int(state.get("compute_processes", 0)), list(state.get("pids", []))


def slowing(reasons: int) -> list[str]:
    """Names of the slowing throttle reasons set in an NVML reasons bitmask."""
    return [name for bit, name in SLOWING_REASONS.items() if reasons & bit]


def busy_reason(state: State, policy: Mapping[str, Any]) -> str | None:
    """Why the GPU is not quiet enough to capture on, or None when it is (or NVML is absent)."""
    if "utilization_pct" not in state:
        return None
    reasons = []
    if state["utilization_pct"] > policy["busy_utilization_pct"]:
        reasons.append(f"{state['utilization_pct']}% utilisation")
    count, pids = _others(state)
    if count > policy["max_other_processes"]:
        reasons.append(f"{count} other compute process(es) (pids {pids})")
    return " and ".join(reasons) or None


def wait_until_quiet(read: Reader, policy: Mapping[str, Any], *, sleep: Callable[[float], None] = time.sleep,
                     clock: Callable[[], float] = time.monotonic) -> tuple[State, float]:
    """Poll until the GPU is quiet; return (that reading, seconds waited). EvidenceError once
    `busy_wait_s` has passed with the GPU still busy."""
    start = clock()
    while True:
        state = read()
        reason = busy_reason(state, policy)
        waited = clock() - start
        if reason is None:
            return state, waited
        if waited >= policy["busy_wait_s"]:
            raise EvidenceError(
                f"the GPU stayed busy for {waited:.0f} s before the capture ({reason}); another job is using "
                "it, and a capture now would measure that load, so nothing was captured.")
        sleep(min(1.0, max(0.0, policy["busy_wait_s"] - waited)))


@dataclass
class Sampler:
    """Reads the GPU's state every `interval_s` on a thread while the capture runs, and keeps every
    reading with the wall-clock time it was taken (`timeline`), so that a measurement session of
    several groups can say what NVML saw while each group ran (`within`)."""

    read: Reader
    interval_s: float = 0.1
    clock: Callable[[], float] = time.time
    """The time of each reading: wall-clock seconds, as the group process notes its windows."""
    timeline: list[State] = field(default_factory=list)
    """Every reading NVML answered, in order, each with its time under `t`."""
    throttle_bits: int = 0
    """Every reason any sample reported (the table's `during_throttle_reasons`)."""
    busy_throttle_bits: int = 0
    """The reasons of the samples taken while the GPU was not idle (NVML's idle reason unset): the
    ones that can slow a kernel. A slowing reason read together with idle was read while nothing
    ran (the clocks dropping between kernels), and slows nothing that is measured."""
    busy_samples: int = 0
    """How many samples were taken while the GPU was not idle."""
    busy_sm_clock: tuple[int, int] | None = None
    """The least and the most SM clock (MHz) of those samples (None without one that read it): how
    far a slowing reason held the clock down while kernels ran."""
    busy_power_w: float | None = None
    """The most power (W) of those samples, to set beside the enforced power limit."""
    max_processes: int = 0
    pids: set[int] = field(default_factory=set)
    max_others: int | None = None
    """The most compute processes outside the measurement's lineage at once, where the reader
    tells them apart (`others_only`); None where it does not."""
    other_pids: set[int] = field(default_factory=set)
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.take()
            self._stop.wait(self.interval_s)

    def take(self) -> None:
        state = self.read()
        if "utilization_pct" not in state:
            return
        self.add({**state, "t": self.clock()})

    def add(self, state: State) -> None:
        """Count one reading (with its time `t`) in every figure of the summary and the flags."""
        self.timeline.append(state)
        self.samples += 1
        reasons = int(state.get("throttle_reasons", 0))
        self.throttle_bits |= reasons
        if not reasons & IDLE_REASON:
            self.busy_throttle_bits |= reasons
            self.busy_samples += 1
            clock, power = state.get("sm_clock_mhz"), state.get("power_w")
            if clock is not None:
                lo, hi = self.busy_sm_clock or (int(clock), int(clock))
                self.busy_sm_clock = (min(lo, int(clock)), max(hi, int(clock)))
            if power is not None:
                self.busy_power_w = max(self.busy_power_w or 0.0, float(power))
        self.max_processes = max(self.max_processes, int(state.get("compute_processes", 0)))
        self.pids.update(state.get("pids", []))
        if "other_processes" in state:
            self.max_others = max(self.max_others or 0, int(state["other_processes"]))
            self.other_pids.update(state.get("other_pids", []))

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.take()

    def within(self, windows: Sequence[tuple[float, float]]) -> Sampler:
        """A sampler holding only the readings that tell what NVML saw in `windows` (wall-clock
        (start, end) pairs, a group's phases): those taken inside each window, and for a window
        no reading fell inside (one shorter than the interval between readings), the last taken
        before it and the first taken after it, which bound what NVML could have seen in between
        (a reason NVML reports is the state at the reading's instant)."""
        taken: set[int] = set()
        times = [float(s["t"]) for s in self.timeline]
        for start, end in windows:
            inside = [i for i, t in enumerate(times) if start <= t <= end]
            before = [i for i, t in enumerate(times) if t < start][-1:]
            after = [i for i, t in enumerate(times) if t > end][:1]
            taken.update(inside or before + after)
        part = Sampler(self.read, self.interval_s, clock=self.clock)
        for i in sorted(taken):
            part.add(self.timeline[i])
        return part

    def flags(self) -> list[str]:
        """Sentences naming what disturbed the capture (empty for an undisturbed one): a slowing
        throttle in a sample taken while the GPU was not idle, or a compute process of another job. Where the reader tells the measurement's
        own processes apart, any other one is another job; where it does not, the captured process
        itself is one compute process, and more than one at a time is another job."""
        out = [throttle_flag(name) for name in slowing(self.busy_throttle_bits)]
        if self.max_others is not None:
            count, pids, limit = self.max_others, self.other_pids, 0
        else:
            count, pids, limit = self.max_processes, self.pids, 1
        if count > limit:
            out.append(f"another compute process ran beside the captured one ({count} at once; pids seen {sorted(pids)})")
        return out

    def summary(self) -> dict[str, Any]:
        clock = self.busy_sm_clock or (None, None)
        return {"samples": self.samples, "throttle_reasons": self.throttle_bits, "busy_throttle_reasons": self.busy_throttle_bits,
                "busy_samples": self.busy_samples, "busy_sm_clock_min_mhz": clock[0], "busy_sm_clock_max_mhz": clock[1],
                "busy_power_max_w": self.busy_power_w,
                "max_compute_processes": self.max_processes, "pids": sorted(self.pids),
                "max_other_processes": self.max_others, "other_pids": sorted(self.other_pids), "flags": self.flags()}
