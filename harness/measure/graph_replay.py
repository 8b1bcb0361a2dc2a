"""Cross-check of the nsys kernel time: an independent timing of the same kernels by CUDA graph
replay.

The `capture.iterations` calls of one implementation are recorded into one CUDA graph; the graph
is replayed `cross_check.replays` times between two CUDA events each, and the time per call is
the replay's event time divided by the calls in it. Replay has no Python or launch path in it,
only the kernels and the gaps between them, so it should agree with the sum of kernel durations
that nsys recorded, within a tolerance for those gaps (harness.tables.cross_check compares them).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

MIN_REPLAYS = 3


def replays_within(replays: int, first_replay_s: float, max_seconds: float) -> int:
    """How many timed replays to make: the configured number, fewer when they would take longer
    than `max_seconds` at the first (untimed) replay's duration, but never fewer than MIN_REPLAYS."""
    if first_replay_s <= 0 or max_seconds == float("inf"):
        return replays
    return max(min(replays, MIN_REPLAYS), min(replays, int(max_seconds / first_replay_s)))


def replay_times(call: Callable[[], Any], calls_per_replay: int, replays: int,
                 max_seconds: float = float("inf")) -> list[float]:
    """Per-call time (µs) of each timed replay of a graph of `calls_per_replay` calls: `replays`
    of them, or fewer where they would take over `max_seconds` (replays_within). Raises whatever
    CUDA graph capture raises when the call cannot be captured."""

    import torch

    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # one eager call on the capture stream first: lazy initialisation stays out of the graph
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for _ in range(calls_per_replay):
            call()
    graph.replay()  # warm: the first replay uploads the graph
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    replays = replays_within(replays, time.perf_counter() - t0, max_seconds)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1000.0 / calls_per_replay)
    del graph
    return out


def renew_default_generator(torch: Any) -> None:
    """After a failed graph capture: the current device's default CUDA generator with a fresh state
    of the same seed and offset. A capture registers that generator and marks its state as being
    captured; a capture that fails never unmarks it, and from then on every random draw on it
    outside a capture raises "Offset increment outside graph capture encountered unexpectedly",
    in whatever later code draws. Nothing is done where this torch offers no graph-safe state."""
    index = torch.cuda.current_device()
    default = torch.cuda.default_generators[index]
    set_state = getattr(default, "graphsafe_set_state", None)
    if set_state is None:
        return
    fresh = torch.Generator(device=f"cuda:{index}")
    fresh.manual_seed(default.initial_seed())
    try:
        fresh.set_offset(default.get_offset())
    except (AttributeError, RuntimeError):  # an older torch without offsets: the seed alone
        pass
    set_state(fresh)


def measure(op: str, shape: str, impl: str, call: Callable[[], Any], calls_per_replay: int, replays: int,
            max_seconds: float = float("inf"), placements: int = 1) -> dict[str, Any]:
    """One row of the graph table: the replay timing, or status 'not capturable' with the reason
    (the cross-check is then skipped for that implementation, and the report says so). A call
    with several placements (harness.ops.bind_group) gets one graph per placement, the replays
    and `max_seconds` shared among them, and the row pools their replays."""
    row: dict[str, Any] = {"op": op, "shape": shape, "impl": impl, "calls_per_replay": calls_per_replay,
                           "replays": replays}
    select = getattr(call, "select", None)
    places = max(1, placements) if select is not None else 1
    try:
        times: list[float] = []
        for p in range(places):
            if select is not None:
                select(p)
            times += replay_times(call, calls_per_replay, max(1, -(-replays // places)), max_seconds / places)
    except Exception as exc:  # a library call that synchronises or allocates cannot be captured
        import torch

        torch.cuda.synchronize()
        renew_default_generator(torch)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        row.update(status="not capturable", reason=f"{type(exc).__name__}: {first}", graph_median_us=None,
                   graph_min_us=None, graph_max_us=None)
        return row
    row.update(status="ok", reason="", replays=len(times), graph_median_us=statistics.median(times),
               graph_min_us=min(times), graph_max_us=max(times))
    return row
