"""The GPU's state around a capture: quiet before it, undisturbed during it.

Before a capture the GPU must be quiet (utilisation and other compute processes under the
configured thresholds); a busy GPU is waited for, then the capture fails with one sentence.
During the capture a sampler thread reads NVML; a clock-throttle reason that slows the GPU, or
another compute process beside the captured one, marks the capture as disturbed. Reads only:
nothing here changes a setting of the GPU.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.errors import EvidenceError

State = dict[str, Any]
Reader = Callable[[], State]

# NVML clocks-event (throttle) reasons that slow the GPU down. Idle (0x1), application clocks
# (0x2) and display/sync boosts are not disturbances.
SLOWING_REASONS = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "power brake",
}


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
    if state.get("compute_processes", 0) > policy["max_other_processes"]:
        reasons.append(f"{state['compute_processes']} other compute process(es) (pids {state.get('pids', [])})")
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
    """Reads the GPU's state every `interval_s` on a thread while the capture runs."""

    read: Reader
    interval_s: float = 0.1
    throttle_bits: int = 0
    max_processes: int = 0
    pids: set[int] = field(default_factory=set)
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
        self.samples += 1
        self.throttle_bits |= int(state.get("throttle_reasons", 0))
        self.max_processes = max(self.max_processes, int(state.get("compute_processes", 0)))
        self.pids.update(state.get("pids", []))

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.take()

    def flags(self) -> list[str]:
        """Sentences naming what disturbed the capture (empty for an undisturbed one). The captured
        process itself is one compute process; more than one at a time is another job."""
        out = [f"the GPU throttled during the capture ({name})" for name in slowing(self.throttle_bits)]
        if self.max_processes > 1:
            out.append(f"another compute process ran beside the captured one ({self.max_processes} at once; "
                       f"pids seen {sorted(self.pids)})")
        return out

    def summary(self) -> dict[str, Any]:
        return {"samples": self.samples, "throttle_reasons": self.throttle_bits,
                "max_compute_processes": self.max_processes, "pids": sorted(self.pids), "flags": self.flags()}
