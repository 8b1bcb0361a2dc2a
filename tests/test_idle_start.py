"""Idle-start timing (harness.measure.idle_start.Waiter) with a recording torch and a stand-in
driver, no GPU: every call is enqueued behind its own wait and between its own pair of events,
the host releases the waits in order, and the event pairs are made once and recorded again by
later timings (no event is created between the calls of a slot)."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

from harness.measure import idle_start


def test_each_call_waits_for_its_release_and_the_events_are_made_once(monkeypatch: Any) -> None:
    log: list[tuple[str, int]] = []
    word = ctypes.c_int32(0)
    clock = [0]
    made: list[Any] = []

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing
            self.at: int | None = None
            made.append(self)

        def record(self) -> None:
            clock[0] += 1000
            self.at = clock[0]

        def query(self) -> bool:
            log.append(("query", word.value))
            return True

        def elapsed_time(self, other: "Event") -> float:
            assert self.at is not None and other.at is not None
            return (other.at - self.at) / 1e6  # ms

    class Wait:
        argtypes: list[Any] = []
        restype: Any = None

        def __call__(self, stream: int, address: int, value: int, flags: int) -> int:
            assert address == ctypes.addressof(word) and flags == idle_start.WAIT_VALUE_GEQ
            log.append(("wait", value))
            return 0

    monkeypatch.setattr(idle_start.ctypes, "CDLL", lambda name: SimpleNamespace(cuStreamWaitValue32_v2=Wait()))
    pinned = SimpleNamespace(data_ptr=lambda: ctypes.addressof(word))
    torch = SimpleNamespace(
        int32="int32",
        zeros=lambda n, dtype: SimpleNamespace(pin_memory=lambda: pinned),
        cuda=SimpleNamespace(Event=Event, current_stream=lambda: SimpleNamespace(cuda_stream=0)))

    def call() -> None:
        clock[0] += 5000  # 5 µs between a call's events
        log.append(("call", word.value))

    waiter = idle_start.Waiter(torch)
    assert waiter.times(call, 3) == [6.0, 6.0, 6.0]  # µs: the call and its end event's record
    # each call enqueued behind its own wait before any is released; then released one at a time
    assert log[:6] == [("wait", 1), ("call", 0), ("wait", 2), ("call", 0), ("wait", 3), ("call", 0)]
    assert [e for e in log[6:] if e[0] == "query"] == [("query", 1), ("query", 2), ("query", 3)]
    assert len(made) == 6
    assert len(waiter.times(call, 5)) == 5 and len(made) == 10  # the three pairs made before, and two more
    assert word.value == waiter.count == 8  # no wait is left standing


def test_idle_starts_time_each_variant_and_its_base_and_nothing_else() -> None:
    """What harness.report.resolution sizes a variant by: its idle starts and its base's. The
    control and the library call are not timed, nor is anything where no variant is measured."""
    assert idle_start.sized(["cuda", "triton", "cuda.twin", "cuda.planted"]) == ["cuda", "cuda.twin", "cuda.planted"]
    assert idle_start.sized(["cuda", "triton", "torch", "triton.wide"]) == ["triton", "triton.wide"]
    assert idle_start.sized(["cuda", "triton", "torch"]) == []
    # a group without variants times nothing (and asks nothing of the GPU), each row saying why
    untimed = {"idle_status": idle_start.NOT_SIZED, "idle_median_us": None, "idle_slots": 0}
    assert idle_start.measure_group({"cuda": print, "torch": print}, 50, 120) == {"cuda": untimed, "torch": untimed}
