"""The captured rounds of a group process (harness.measure.group.capture_rounds) with a torch that
records what happens: every timed call lies inside its round's range nested in `capture`, and
each slot's untimed call lies outside every range, so neither nsys's round ranges nor ncu's
`--nvtx-include capture/` ever see it (a kernel ncu profiled outside a round range took every
counters job down)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from harness.measure import group
from harness.measure.counters import profile_command
from harness.tables import counters as counter_table


def recording_torch(log: list[tuple[str, ...]]) -> tuple[SimpleNamespace, list[str]]:
    stack: list[str] = []

    def push(name: str) -> None:
        stack.append(name)

    def pop() -> None:
        stack.pop()

    nvtx = SimpleNamespace(range_push=push, range_pop=pop)
    profiler = SimpleNamespace(start=lambda: log.append(("profiler start",)), stop=lambda: log.append(("profiler stop",)))
    cuda = SimpleNamespace(nvtx=nvtx, profiler=profiler, synchronize=lambda: None)
    return SimpleNamespace(cuda=cuda), stack


def round_of(name: str) -> tuple[str, int]:
    """(impl, round) of a range name that must be a round range."""
    parsed = group.parse_range(name)
    assert parsed is not None, name
    return parsed


def test_timed_calls_lie_in_their_round_range_and_untimed_calls_outside_every_range() -> None:
    log: list[tuple[str, ...]] = []
    torch, stack = recording_torch(log)

    def call_of(impl: str) -> Any:
        return lambda: log.append((impl, *stack))

    calls = {impl: call_of(impl) for impl in ("cuda", "triton", "torch")}
    group.capture_rounds(torch, calls, {"cuda": 3, "triton": 3, "torch": 3}, rounds=4, profile=True)
    # the range is closed by the process's exit (harness.measure.group, step 5): never stopped
    assert log[0] == ("profiler start",) and ("profiler stop",) not in log and stack == []
    made = log[1:]
    untimed = [entry for entry in made if len(entry) == 1]
    timed = [entry for entry in made if len(entry) > 1]
    assert len(untimed) == 4 * 3 and len(timed) == 4 * 3 * 3
    for impl, *ranges in timed:  # what ncu's push/pop column would hold: the outer range, then the round's
        assert ranges[0] == group.RANGE and round_of(ranges[1])[0] == impl and len(ranges) == 2
    rounds_seen = {round_of(r[2])[1] for r in timed}
    assert rounds_seen == {0, 1, 2, 3}


def test_the_counters_range_filter_and_reader_attribute_every_kernel_it_selects() -> None:
    """ncu selects kernels under the range `capture` (profile_command); each of them carries its
    round range, so `by_implementation` attributes every one."""
    argv = profile_command("ncu", {"dram": "dram__bytes.sum"}, group.RANGE, "/tmp/x", ["python"])
    assert argv[argv.index("--nvtx-include") + 1] == f"{group.RANGE}/"
    log: list[tuple[str, ...]] = []
    torch, stack = recording_torch(log)
    calls = {impl: (lambda impl=impl: log.append((impl, *stack))) for impl in ("cuda", "triton")}
    group.capture_rounds(torch, calls, {"cuda": 2, "triton": 2}, rounds=1, profile=False)
    selected = [entry for entry in log if len(entry) > 1 and entry[1] == group.RANGE]
    kernels = [{"ID": i, "Kernel Name": "k", counter_table.PUSH_POP_COLUMN: ":".join(entry[1:])}
               for i, entry in enumerate(selected)]
    split = counter_table.by_implementation(kernels, ["cuda", "triton"])
    assert {impl: len(found) for impl, found in split.items()} == {"cuda": 2, "triton": 2}
