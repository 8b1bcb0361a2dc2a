"""Cross-check of the nsys kernel time: an independent timing of the same kernels by CUDA graph
replay.

`cross_check.calls` calls of each implementation are recorded into one CUDA graph (one per
placement of the inputs, where the call has several: harness.ops.bind_group), and the graphs are
replayed in rounds: in round r every implementation's graph of the round's placement is replayed
once untimed and once between two CUDA events, in order r of the Williams design the capture uses
(harness.measure.order), so whatever drifts over the replays (clocks, temperature) and whatever
one replay leaves the next moves every implementation alike. The time per call is a replay's
event time divided by the calls in it, and an implementation's value is the median over its
replays. Replay has no Python or launch path in it, only the kernels and the gaps between them, so
it should agree with the sum of kernel durations that nsys recorded, within a tolerance for those
gaps (harness.tables.cross_check compares them); and the ratio of two implementations' medians
is a size measured without Nsight Systems (the planted slowdowns', harness.report.resolution).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.measure.order import balanced

MIN_REPLAYS = 3


def replays_within(replays: int, first_replay_s: float, max_seconds: float) -> int:
    """How many timed replays to make: the configured number, fewer when they would take longer
    than `max_seconds` at the first (untimed) replay's duration, but never fewer than MIN_REPLAYS."""
    if first_replay_s <= 0 or max_seconds == float("inf"):
        return replays
    return max(min(replays, MIN_REPLAYS), min(replays, int(max_seconds / first_replay_s)))


def record(call: Callable[[], Any], calls_per_replay: int) -> Any:
    """A CUDA graph of `calls_per_replay` calls, replayed once (its upload) and waited for. Raises
    whatever CUDA graph capture raises when the call cannot be captured."""
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
    return graph


def replay_rounds(graphs: Mapping[str, Sequence[Any]], calls_per_replay: int, replays: int,
                  max_seconds: float = float("inf"), sequence: Sequence[int] | None = None) -> dict[str, list[float]]:
    """Per-call time (µs) of each timed replay, by implementation: `graphs[impl][p]` is its graph on
    placement p (all implementations with the same number of them). Round r replays, in order r of
    the Williams design, each implementation's graph of placement `sequence[r % len(sequence)]`
    (0 without a sequence) twice, the second time between events: as in the capture, what one
    slot leaves the next (here also the switch from another graph) stays out of the timing.
    `replays` rounds, fewer where they would take over `max_seconds` for the whole group at one
    untimed round's duration (replays_within)."""
    import torch

    impls = list(graphs)
    count = min(len(g) for g in graphs.values()) if graphs else 0
    if not impls or count == 0:
        return {impl: [] for impl in impls}
    seq = [p % count for p in sequence] if sequence else [0]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for impl in impls:
        graphs[impl][seq[0]].replay()
    torch.cuda.synchronize()
    rounds = replays_within(replays, 2.0 * (time.perf_counter() - t0), max_seconds)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out: dict[str, list[float]] = {impl: [] for impl in impls}
    for r in range(rounds):
        p = seq[r % len(seq)]
        for impl in balanced(impls, r):
            graph = graphs[impl][p]
            graph.replay()  # untimed: what switching from the previous graph costs stays out of the timing
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            out[impl].append(start.elapsed_time(end) * 1000.0 / calls_per_replay)
    return out


def replay_times(call: Callable[[], Any], calls_per_replay: int, replays: int,
                 max_seconds: float = float("inf")) -> list[float]:
    """Per-call time (µs) of each timed replay of one call's graph (replay_rounds of one)."""
    graph = record(call, calls_per_replay)
    try:
        return replay_rounds({"one": [graph]}, calls_per_replay, replays, max_seconds)["one"]
    finally:
        del graph


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


def _not_capturable(exc: BaseException) -> str:
    """The reason of a failed capture, after leaving the GPU and the default generator usable."""
    import torch

    torch.cuda.synchronize()
    renew_default_generator(torch)
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return f"{type(exc).__name__}: {first}"


class Recorded(Sequence[Any]):
    """One implementation's graphs by placement, each recorded when a round first replays it:
    recording only what a round replays records no placement that is never replayed (a round
    budget, `max_seconds`, that stops the replays early leaves the placements it never reached
    unrecorded). Placement `first` is recorded at once, so a call that cannot be recorded is known
    before any round starts. `width`, its len for replay_rounds, is its own number of placements
    until measure_group sets it to the group's widest: a call with fewer placements then serves
    every round from its own (placement p is p modulo its own)."""

    def __init__(self, call: Callable[[], Any], calls_per_replay: int, placements: int, first: int = 0) -> None:
        self.call, self.calls_per_replay, self.placements = call, calls_per_replay, max(1, placements)
        self.width = self.placements
        self._graphs: dict[int, Any] = {}
        self[first % self.placements]

    def __len__(self) -> int:
        return self.width

    def __getitem__(self, p: Any) -> Any:
        if not isinstance(p, int):
            raise TypeError("a placement is an int")
        p %= self.placements
        if p not in self._graphs:
            select = getattr(self.call, "select", None)
            if select is not None:
                select(p)
            self._graphs[p] = record(self.call, self.calls_per_replay)
        return self._graphs[p]

    def clear(self) -> None:
        self._graphs.clear()


def measure_group(op: str, shape: str, calls: Mapping[str, Callable[[], Any]], calls_per_replay: int, replays: int,
                  max_seconds: float = float("inf"), placements: int = 1,
                  sequence: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """The graph table's rows of a group, one per implementation in the order of `calls`: each
    implementation recorded on its placements (harness.ops.bind_group; up to `placements`, each
    when a round first needs it: `Recorded`), and all replayed in interleaved rounds (module
    docstring) on the placements `sequence` gives round by round, `max_seconds` per
    implementation. An implementation whose call cannot be recorded gets status 'not capturable'
    with the reason (the cross-check is then skipped for it, and the report says so); the others
    are replayed without it."""
    rows: dict[str, dict[str, Any]] = {}
    graphs: dict[str, Recorded] = {}
    first = sequence[0] if sequence else 0
    for impl, call in calls.items():
        rows[impl] = {"op": op, "shape": shape, "impl": impl, "calls_per_replay": calls_per_replay, "replays": replays}
        places = max(1, placements) if getattr(call, "select", None) is not None else 1
        try:
            graphs[impl] = Recorded(call, calls_per_replay, places, first)
        except Exception as exc:  # a library call that synchronises or allocates cannot be captured
            rows[impl].update(status="not capturable", reason=_not_capturable(exc), graph_median_us=None,
                              graph_min_us=None, graph_max_us=None)
    # a call without placements has one graph: it serves every round (Recorded wraps the placement)
    widest = max((g.placements for g in graphs.values()), default=1)
    for g in graphs.values():
        g.width = widest
    times = replay_rounds(graphs, calls_per_replay, replays, max_seconds * max(1, len(graphs)), sequence)
    for impl, values in times.items():
        rows[impl].update(status="ok", reason="", replays=len(values), graph_median_us=statistics.median(values),
                          graph_min_us=min(values), graph_max_us=max(values))
    for recorded in graphs.values():
        recorded.clear()
    graphs.clear()
    return [rows[impl] for impl in calls]


def measure(op: str, shape: str, impl: str, call: Callable[[], Any], calls_per_replay: int, replays: int,
            max_seconds: float = float("inf"), placements: int = 1) -> dict[str, Any]:
    """One implementation's row of the graph table (measure_group of one)."""
    return measure_group(op, shape, {impl: call}, calls_per_replay, replays, max_seconds, placements,
                         list(range(max(1, placements))))[0]
