"""Idle-start timing: each call timed by CUDA events on an idle GPU, with no launch path between
its events, as an independent measure of a planted slowdown's size.

The capture launches its calls one by one from Python, and at kernels of a few microseconds the
launch takes longer than the kernel: every call starts on an idle GPU. A graph replay runs the
same calls back to back, and there a short kernel runs another way: on the H200 our 5.4 µs layer
norm ran 2% faster back to back, and a plant's extra time shrank by half (scripts/probe_replay.py,
docs/method.md#calibrated-plants). So the replay cannot size a plant the capture measures.

Here each call is enqueued behind a wait of the stream on a word of pinned host memory
(cuStreamWaitValue32, a stream memory operation: the GPU idles while its front end waits) and
between two CUDA events; the host raises the word for the next call only once the previous
call's end event has completed. The GPU is idle before every call, as in the capture, and the
events hold the call's kernels and the GPU's own start of them, no Python and no launch path.
Nsight Systems is not involved. Per call the event time is the kernel time plus a fixed part
(the events and the kernel's start, about 2.6 µs under nsys on the H200), so a ratio of two
such times is diluted; the difference of two is not: a variant's extra time per call over its
base is the difference of their idle-start medians, in the capture's regime, and its size that
difference over the base's time by graph replay (harness.report.resolution).

The calls run in rounds in the group's Williams orders and placements (harness.measure.order),
`calls` per slot, the slot's value the mean of its calls; an implementation's value is the
median over its slots. Where the driver refuses the wait (stream memory operations unsupported),
every row says so and nothing is timed.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.measure.order import balanced, place

WAIT_VALUE_GEQ = 0x0
"""CU_STREAM_WAIT_VALUE_GEQ: the wait ends once the word is at least the value."""


class Waiter:
    """The stream waits on a word of pinned host memory that the host raises (module docstring)."""

    def __init__(self, torch: Any) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        wait = getattr(lib, "cuStreamWaitValue32_v2", None) or lib.cuStreamWaitValue32
        wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        wait.restype = ctypes.c_int
        self._wait, self.torch = wait, torch
        # pinned host memory is mapped into the device's address space at the same address (UVA)
        self.word = torch.zeros(1, dtype=torch.int32).pin_memory()
        self._value = ctypes.c_int32.from_address(self.word.data_ptr())
        self.count = 0
        self._events: list[tuple[Any, Any]] = []
        """(start, end) CUDA event pairs, made once and recorded again by every `times`: no event is
        created or destroyed between the calls (each pair's time is read before it is recorded
        again)."""

    def events(self, n: int) -> list[tuple[Any, Any]]:
        """`n` pairs of timing events, from the ones this waiter made before where it has them."""
        while len(self._events) < n:
            self._events.append((self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)))
        return self._events[:n]

    def enqueue_wait(self) -> int:
        """Make the current stream wait until the word reaches the next count; returns that count."""
        self.count += 1
        rc = self._wait(self.torch.cuda.current_stream().cuda_stream, self.word.data_ptr(), self.count, WAIT_VALUE_GEQ)
        if rc != 0:
            raise RuntimeError(f"cuStreamWaitValue32 returned CUDA error {rc}")
        return self.count

    def release(self, count: int) -> None:
        self._value.value = count

    def times(self, call: Callable[[], Any], calls: int) -> list[float]:
        """Event time (µs) of each of `calls` calls, each started on an idle GPU."""
        pending = []
        try:
            for start, end in self.events(calls):
                count = self.enqueue_wait()
                start.record()
                call()
                end.record()
                pending.append((count, start, end))
            for count, _, end in pending:
                self.release(count)
                while not end.query():  # the next call is released only once this one has finished
                    pass
        finally:
            self.release(self.count)  # whatever raised, no wait of the stream is left standing
        return [start.elapsed_time(end) * 1000.0 for _, start, end in pending]


def unavailable(torch: Any) -> str | None:
    """Why idle-start timing cannot run here (one sentence), or None."""
    try:
        waiter = Waiter(torch)
        torch.cuda.synchronize()
        waiter.enqueue_wait()
        waiter.release(waiter.count)
        torch.cuda.synchronize()
    except (OSError, AttributeError, RuntimeError) as exc:
        return f"the stream cannot wait on host memory here ({type(exc).__name__}: {str(exc)[:160]})"
    return None


NOT_SIZED = "not timed: no variant's size uses it"
"""The idle_status of an implementation `sized` leaves out."""


def sized(impls: Sequence[str]) -> list[str]:
    """The implementations whose idle starts a size uses (harness.report.resolution.sizes: a
    variant's extra time per call over its base's): every variant ('<base>.<name>') and its base,
    in the order given; none where no variant is measured. The control and the library call are
    not timed: no table reads their idle starts."""
    variants = [i for i in impls if "." in i]
    bases = {i.partition(".")[0] for i in variants}
    return [i for i in impls if i in variants or i in bases]


def _untimed(why: str) -> dict[str, Any]:
    """The row of an implementation whose calls were not timed, and why."""
    return {"idle_status": why, "idle_median_us": None, "idle_slots": 0}


def measure_group(calls: Mapping[str, Callable[[], Any]], calls_per_slot: int, rounds: int,
                  max_seconds: float = float("inf"), sequence: Sequence[int] | None = None) -> dict[str, dict[str, Any]]:
    """impl -> {idle_status, idle_median_us, idle_slots} (the graph table's IDLE_COLUMNS) for every
    implementation of `calls`; those `sized` leaves out are not timed (NOT_SIZED). The others run
    `rounds` rounds (fewer where they would take over `max_seconds` per implementation at the first
    round's pace, at least 3), in round r every one's `calls_per_slot` calls on placement
    `sequence[r]`, in order r of the Williams design; each slot after one untimed call, as in the
    capture."""
    import torch

    impls = sized(list(calls))
    out = {impl: _untimed(NOT_SIZED) for impl in calls if impl not in impls}
    if not impls:
        return out
    reason = unavailable(torch)
    if reason is not None:
        return {**out, **{impl: _untimed(reason) for impl in impls}}
    calls = {impl: calls[impl] for impl in impls}
    waiter = Waiter(torch)
    seq = list(sequence) if sequence else [0]
    slots: dict[str, list[float]] = {impl: [] for impl in impls}
    started = time.perf_counter()
    limit = rounds
    r = 0
    while r < limit:
        place(calls, seq[r % len(seq)])
        for impl in balanced(impls, r):
            calls[impl]()  # untimed: what the previous slot left stays out of the timing
            torch.cuda.synchronize()
            slots[impl].append(statistics.fmean(waiter.times(calls[impl], calls_per_slot)))
        if r == 0 and max_seconds != float("inf"):
            per_round = time.perf_counter() - started
            limit = max(min(rounds, 3), min(rounds, int(max_seconds * len(impls) / max(per_round, 1e-9))))
        r += 1
    return {**out, **{impl: {"idle_status": "ok", "idle_median_us": statistics.median(values), "idle_slots": len(values)}
                      for impl, values in slots.items()}}
