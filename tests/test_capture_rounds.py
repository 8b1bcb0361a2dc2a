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


def test_a_session_opens_one_profiler_range_and_captures_each_group_in_its_window(monkeypatch: Any) -> None:
    """run_session with a recording torch and stand-in bound calls (no checks, spans or
    cross-checks): every group is bound and warmed up before the profiler starts, the profiler
    starts once, and each group's timed calls lie in its window group/<op>/<shape> and in round
    ranges that name it, one window after the other; each group's results are its own."""
    import sys

    log: list[tuple[str, ...]] = []
    torch, stack = recording_torch(log)

    class Event:
        def record(self) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, other: "Event") -> float:
            return 0.01  # ms

    torch.cuda.Event = lambda enable_timing=True: Event()
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(group, "require_gpu", lambda: None)

    def bind_group(op: str, impls: list[str], shape: str, *a: Any, **k: Any) -> dict[str, Any]:
        log.append(("bind", op, shape))
        return {impl: (lambda impl=impl: log.append((f"{op}/{shape}/{impl}", *stack))) for impl in impls}

    monkeypatch.setattr(group.ops, "bind_group", bind_group)
    base = {"params": {}, "seed": 1, "cache_mode": "hot", "check": False, "spans": False,
            "capture": {"warmup": 1, "rounds": 2, "round_us": 30.0, "max_calls": 2, "placements": 1},
            "span": {}, "cross_check": {"enabled": False}}
    plans = [{**base, "op": "layernorm", "shape": "4096x768", "impls": ["cuda", "triton"]},
             {**base, "op": "softmax", "shape": "4096x1024", "impls": ["cuda", "torch"]}]
    out = group.run({"groups": plans, "profile": True})
    assert [(r["op"], r["shape"], r["passed"]) for r in out] == [("layernorm", "4096x768", ["cuda", "triton"]),
                                                                ("softmax", "4096x1024", ["cuda", "torch"])]
    start = log.index(("profiler start",))
    assert log.count(("profiler start",)) == 1 and ("profiler stop",) not in log and stack == []
    assert [e for e in log[:start] if e[0] == "bind"] == [("bind", "layernorm", "4096x768"), ("bind", "softmax", "4096x1024")]
    made = log[start + 1:]
    windows = [e[1] for e in made]
    assert windows == sorted(windows, key=lambda w: w != "group/layernorm/4096x768")  # one group after the other
    for who, window, *ranges in made:  # an untimed call lies in the window only, a timed one in its round too
        op, shape, impl = who.split("/")
        assert window == f"group/{op}/{shape}" and len(ranges) in (0, 2)
        if ranges:
            parsed = group.parse_round_range(ranges[1])
            assert ranges[0] == group.RANGE and parsed is not None and parsed[:3] == (op, shape, impl)
    assert sum(1 for e in made if len(e) == 4) == 2 * 2 * 2 * 2  # groups x impls x rounds x calls
    assert {r["calls_per_round"]["cuda"] for r in out} == {2}
    for r in out:
        assert set(r["seconds"]) >= {"checks", "bind_and_warmup", "capture", "total"}
        assert set(r["session_seconds"]) >= {"gpu_init", "profiler_start"}
    # each group notes when it ran, its preparation and its captured rounds, in wall-clock seconds
    # (the measure step reads NVML's samples by them): every group's preparation, then every capture
    (prep_a, cap_a), (prep_b, cap_b) = (r["windows"] for r in out)
    edges = [*prep_a, *prep_b, *cap_a, *cap_b]
    assert edges == sorted(edges) and all(isinstance(t, float) for t in edges)


def test_a_session_imports_the_libraries_its_implementations_launch_through_once_at_its_start(monkeypatch: Any) -> None:
    """CuPy where an implementation (or a variant of one) is ours in CUDA or external PTX, Triton
    where one is ours in Triton, nothing for the library call alone: imported before the first
    group's checks, so that no group's checks time an import."""
    imported: list[str] = []
    monkeypatch.setattr(group.importlib, "import_module", lambda name: imported.append(name))
    assert group.import_libraries([{"impls": ["torch"]}]) == [] and imported == []
    assert group.import_libraries([{"impls": ["torch", "cuda.twin"]}, {"impls": ["torch"]}]) == ["cupy"]
    assert group.import_libraries([{"impls": ["triton"]}, {"impls": ["external"]}]) == ["cupy", "triton"]
    assert imported == ["cupy", "cupy", "triton"]
