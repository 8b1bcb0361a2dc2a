"""One measurement group in one process: every implementation of one (operation, shape), checked,
captured in interleaved rounds, and timed by event spans and graph replay.

`python -m harness group PLAN.json` runs what the plan says, in this order:

1. **Checks.** Each implementation against the float64 reference, on fresh inputs of its own
   (harness.measure.check). An implementation whose check fails is neither captured nor timed.
   A kernel that crashes the GPU leaves a dead CUDA context: the process records which one in its
   progress file and exits at once (status 3), and the measure step runs the group again without
   it. A check that does not finish within the plan's `check_s` (a hung kernel) is recorded the
   same way (status 124).
2. **Warm-up and calls per round.** The implementations that passed are bound together to one
   set of timing inputs per placement (harness.ops.bind_group: `capture.placements` copies of the
   same inputs at other addresses; every implementation launches on the same buffers, and those
   are the first part of a planted slowdown's grown ones where they can be), and each is called `capture.warmup` times; CUDA events over those calls
   estimate its time per call. Every implementation of the group makes the same number of calls
   per round: as many as the slowest fills `capture.round_us` with (between 1 and
   `capture.max_calls`). The same count for all keeps what one slot shares with the next (the L2
   the previous implementation left, the clocks) the same for all.
3. **Spans**, before the profiler range opens: `span.rounds` rounds of `span.samples / rounds`
   samples each (fewer where the slowest implementation's would take over `span.max_seconds`,
   at least MIN_SPAN_SAMPLES in all), in the rounds' orders and placements (below), each
   implementation's samples after one untimed call; each sample is a CUDA-event span around one
   call, waited for.
4. **Graph replay** (the cross-check of the kernel time, harness.measure.graph_replay): each
   implementation recorded into a graph per placement, the graphs replayed in interleaved rounds,
   in the rounds' orders and placements.
   With `cross_check.idle_starts`, then the calls of each variant and its base (idle_start.sized:
   what a size uses) timed one by one on an idle GPU (harness.measure.idle_start) in the same
   orders and placements: a planted slowdown's extra time as the capture runs it, without Nsight
   Systems.
5. **Capture**, last. One profiler range (cudaProfilerStart, for nsys
   --capture-range=cudaProfilerApi) holding `capture.rounds` rounds. In each round every
   implementation makes one untimed call (its inputs back in the cache after the previous
   implementation's), outside every NVTX range, and then its calls inside an NVTX range
   `capture/<impl>/<round>` nested in a range `capture`. Round r launches on the placement
   `round_placements` gives it (each placement once in every block of `capture.placements`
   rounds, in a seeded random order), in order r of a Williams design of the implementations (`balanced`):
   over its cycle every implementation comes right after every other equally often and stands
   in every position equally often, so neither drift in clock or temperature nor what one slot
   leaves the next favours one of them (a rotation by one put every implementation after the
   same neighbour in every round). Kernel time and its
   interval come from the kernels nsys attributes to the round ranges (harness.tables); ncu's
   `--nvtx-include capture/` profiles the kernels inside `capture` (harness.measure.counters), so
   neither sees the untimed calls. The range is closed by the process's exit, not by
   cudaProfilerStop: on the H200 a stop holds the process about 3 s while nsys flushes, an exit
   right after the range does not (`scripts/probe_starts.py`), and nothing is measured after it.

The results (checks, calls per round, launch paths, span samples, graph rows, the seconds each
phase took, and `windows`: the wall-clock start and end of the group's steps 1-4 and of its
captured rounds, by which the measure step tells what NVML saw while this group ran) are written as
JSON to the plan's `results` path, atomically.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import baseline, ops
from harness.errors import EvidenceError
from harness.gpu.deadline import deadline
from harness.gpu.device import require_gpu
from harness.io import write_json
from harness.launch import cuda as cuda_launch
from harness.measure import graph_replay, idle_start
from harness.measure.check import crash_message, failure, first_use, run_check, unmeasured_record
from harness.measure.order import balanced, place, round_placements
from harness.tables.derive import RANGE_PREFIX, parse_range, parse_round_range  # noqa: F401 (the names of the rounds)

RANGE = "capture"
"""The NVTX range around the captured rounds (ncu's --nvtx-include selects it)."""

CHECK_S = 300.0
"""The check deadline of a plan that names none (seconds per implementation)."""

# Each (implementation, round) range is named '<RANGE_PREFIX><op>/<shape>/<impl>/<round>' (before
# sessions: '<RANGE_PREFIX><impl>/<round>', which the readers still take): harness.tables.derive.

WINDOW_PREFIX = "group/"
"""Under nsys, a group's captured rounds lie in one range 'group/<op>/<shape>', opened and closed
with the GPU idle, so the session's export splits into one export per group by its time."""


def round_range(impl: str, index: int, group: tuple[str, str] | None = None) -> str:
    where = f"{group[0]}/{group[1]}/" if group else ""
    return f"{RANGE_PREFIX}{where}{impl}/{index}"


def calls_per_round(per_call_us: float, round_us: float, max_calls: int) -> int:
    """Calls that fill about `round_us` of GPU time, at least 1 and at most `max_calls`."""
    if not per_call_us > 0 or not math.isfinite(per_call_us):
        return max_calls
    return max(1, min(max_calls, math.ceil(round_us / per_call_us)))


class Progress:
    """The step the process is in, written to a file before each check, so that the step that
    started it knows which implementation crashed a dead context."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None

    def mark(self, what: str, **extra: Any) -> None:
        if self.path is not None:
            write_json({"step": what, **extra}, self.path)


def _event_us(torch: Any, call: Callable[[], Any], calls: int) -> float:
    """GPU time per call of `calls` back-to-back calls, by CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls


def checks(plan: Mapping[str, Any], progress: Progress,
           seconds: dict[str, float] | None = None) -> dict[str, dict[str, Any]]:
    """Each implementation's check record; a crash or a hang ends the process (module docstring).
    Where `seconds` is given, each part of each check adds its seconds there as `check <part>`
    (harness.measure.check.run_check's parts, summed over the implementations)."""
    out: dict[str, dict[str, Any]] = {}
    limit = float(plan.get("check_s", CHECK_S))
    for impl in plan["impls"]:
        progress.mark("check", op=plan["op"], shape=plan["shape"], impl=impl)
        message = (f"{plan['op']} {plan['shape']} {impl} did not finish its check within {limit:g} s (a hung "
                   "kernel?); it is neither captured nor timed, and the group is measured again without it.")

        def hung(status: int, impl: str = impl, message: str = message) -> None:
            progress.mark("crashed", op=plan["op"], shape=plan["shape"], impl=impl, message=message)
            print(message, file=sys.stderr, flush=True)
            os._exit(status)

        try:
            with deadline(limit, f"the check of {plan['op']} {plan['shape']} {impl}", stop=hung):
                record = run_check(plan["op"], plan["shape"], impl, plan["params"], plan["seed"])
                parts = record.pop("seconds", None) or {}
                if seconds is not None:
                    for part, value in parts.items():
                        seconds[f"check {part}"] = seconds.get(f"check {part}", 0.0) + value
                    seconds[f"check {impl}"] = sum(parts.values())
        except baseline.CannotMeasure as exc:
            if crash_message(exc.__cause__ or exc, plan["op"], plan["shape"], impl) is not None:
                raise
            out[impl] = unmeasured_record(plan["op"], plan["shape"], impl, str(exc))
            print(str(exc), file=sys.stderr, flush=True)
            continue
        except Exception as exc:
            crashed = crash_message(exc, plan["op"], plan["shape"], impl)
            if crashed is None:
                raise
            progress.mark("crashed", op=plan["op"], shape=plan["shape"], impl=impl, message=crashed)
            print(crashed, file=sys.stderr, flush=True)
            os._exit(3)  # the context is dead: no teardown
        record["error"] = failure(record)
        out[impl] = record
    return out


def capture_rounds(torch: Any, calls: Mapping[str, Callable[[], Any]], per_round: Mapping[str, int], rounds: int,
                   profile: bool, placements: list[int] | None = None, group: tuple[str, str] | None = None,
                   window: bool = False) -> float:
    """The captured rounds (module docstring, step 5); round r on `placements[r]`, its ranges named
    for `group` (round_range). With `profile`, the profiler starts first; with `window`, the
    rounds lie in the group's range (WINDOW_PREFIX), opened and closed with the GPU idle. Returns
    the seconds the profiler's start took (nsys begins its capture there)."""
    order = list(calls)
    torch.cuda.synchronize()
    started = time.perf_counter()
    if profile:  # closed by the process's exit (module docstring, step 5)
        torch.cuda.profiler.start()
    started = time.perf_counter() - started
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    if window and group:
        push(f"{WINDOW_PREFIX}{group[0]}/{group[1]}")
    for r in range(rounds):
        place(calls, placements[r] if placements else 0)
        for impl in balanced(order, r):
            call, k = calls[impl], per_round[impl]
            call()  # untimed: outside every range, after the previous implementation's calls
            push(RANGE)
            push(round_range(impl, r, group))
            for _ in range(k):
                call()
            pop()
            pop()
        torch.cuda.synchronize()
    if window and group:
        pop()
    return started


MIN_SPAN_SAMPLES = 30
"""The fewest span samples an implementation gets, whatever `span.max_seconds` says."""


def span_samples_per_round(samples: int, rounds: int, slowest_us: float, max_seconds: float) -> int:
    """Span samples per implementation and round: `samples` over the rounds, fewer where the
    slowest implementation's calls (`slowest_us` each, by the warm-up's events) would take longer
    than `max_seconds` in all, but never fewer than MIN_SPAN_SAMPLES in all (the same number for
    every implementation, as the capture's calls per round)."""
    rounds = max(1, rounds)
    per_round = max(1, samples // rounds)
    if not (slowest_us > 0 and math.isfinite(slowest_us) and math.isfinite(max_seconds)):
        return per_round
    within = max(MIN_SPAN_SAMPLES, int(max_seconds * 1e6 / slowest_us))
    return max(1, min(per_round, math.ceil(within / rounds)))


def span_samples(torch: Any, calls: Mapping[str, Callable[[], Any]], op: str, shape: str, samples: int,
                 rounds: int, placements: list[int] | None = None, per_round: int | None = None) -> list[dict[str, Any]]:
    """Event spans (module docstring, step 3): one row per sample, `per_round` samples of each
    implementation per round (by default `samples` over the rounds)."""
    order = list(calls)
    per_round = per_round or max(1, samples // max(1, rounds))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        place(calls, placements[r % len(placements)] if placements else 0)
        for impl in balanced(order, r):
            call = calls[impl]
            call()  # untimed, as in the capture
            for i in range(per_round):
                start.record()
                call()
                end.record()
                end.synchronize()
                rows.append({"op": op, "shape": shape, "impl": impl, "round": r, "sample": i,
                             "span_us": start.elapsed_time(end) * 1000.0})
    return rows


SESSION_KEYS = ("launched_at", "progress", "profile")
"""The keys of a session plan besides its `groups`; a group's own plan holds the rest."""


def run(plan: Mapping[str, Any]) -> Any:
    """Everything the plan asks for; returns the results (and writes each group's to its plan's
    `results` path). A session plan (`groups`: the plans of its groups, in order) returns the list
    of its groups' results; a group's own plan is a session of that one group and returns its
    results (module docstring)."""
    if "groups" in plan:
        return run_session(plan)
    return run_session({**{k: plan[k] for k in SESSION_KEYS if k in plan}, "groups": [plan]})[0]


class _Prepared:
    """One group of a session between its preparation and its capture."""

    def __init__(self, plan: Mapping[str, Any]) -> None:
        self.plan = plan
        self.seconds: dict[str, float] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self.passed: list[str] = []
        self.calls: dict[str, Any] = {}
        self.per_round: dict[str, int] = {}
        self.per_call: dict[str, float] = {}
        self.sequence: list[int] = []
        self.placements = 1
        self.spans: list[dict[str, Any]] = []
        self.graphs: list[dict[str, Any]] = []
        self.modules: list[dict[str, str]] = []
        self.windows: list[list[float]] = []
        """The wall-clock (start, end) of its preparation and of its capture: when it ran on the GPU."""


LIBRARIES = {"cupy": ("cuda", "external"), "triton": ("triton",)}
"""The libraries our implementations launch through, by the implementations (variants by their base
name) that need each."""


def import_libraries(plans: Sequence[Mapping[str, Any]]) -> list[str]:
    """Import the libraries of LIBRARIES that the plans' implementations need, once at the session's
    start (with torch and the CUDA context, its `gpu_init`), not in the first check that launches
    through each: every group's `checks` then time its checks. Returns the names imported."""
    wanted = {str(i).partition(".")[0] for plan in plans for i in plan.get("impls", ())}
    names = [name for name, impls in LIBRARIES.items() if wanted & set(impls)]
    for name in names:
        importlib.import_module(name)
    return names


def run_session(session: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every group of the session in one process: each group's checks, warm-up, spans and cross-
    checks in turn (steps 1-4), then one profiler range holding every group's captured rounds
    (step 5), each in its window (WINDOW_PREFIX) under nsys. Where the session says when its process
    was launched (`launched_at`, the launcher's time.time()), its `seconds` hold `start_up`, from
    then until this call (the profiler's start, Python's and the imports), and `gpu_init` (torch,
    the CUDA context, the libraries the groups launch through (import_libraries) and, where a group
    checks, the first use of what every check uses (check.first_use)); each group's `seconds` hold
    its phases, and `session` the session's."""
    session_seconds: dict[str, float] = {}
    if "launched_at" in session:
        session_seconds["start_up"] = time.time() - float(session["launched_at"])
    t = time.perf_counter()
    require_gpu()
    import torch

    imported = import_libraries(session["groups"])
    if any(plan.get("check", True) for plan in session["groups"]):
        first_use(torch, triton="triton" in imported)
    session_seconds["gpu_init"] = time.perf_counter() - t
    progress = Progress(session.get("progress"))
    prepared = []
    for plan in session["groups"]:
        began = time.time()
        prepared.append(_prepare(torch, plan, progress))
        prepared[-1].windows.append([began, time.time()])

    progress.mark("capture")
    profile = bool(session.get("profile", True))
    started = False
    for p in prepared:
        t = time.perf_counter()
        if p.passed:
            cap = p.plan["capture"]
            start = profile and not started
            began = time.time()
            took = capture_rounds(torch, p.calls, p.per_round, int(cap["rounds"]), start, p.sequence,
                                  (p.plan["op"], p.plan["shape"]), window=profile)
            p.windows.append([began, time.time()])
            if start:
                session_seconds["profiler_start"] = took
                started = True
        p.seconds["capture"] = time.perf_counter() - t
        p.seconds["total"] = math.fsum(v for k, v in p.seconds.items() if not k.startswith("check ") and k != "total")
    out = [_results(p, session_seconds) for p in prepared]
    progress.mark("done")
    for p in prepared:
        print(f"group seconds: {p.plan['op']} {p.plan['shape']}: " + ", ".join(f"{k} {v:.2f}" for k, v in p.seconds.items()),
              file=sys.stderr, flush=True)
    print("session seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in session_seconds.items()), file=sys.stderr, flush=True)
    for p, results in zip(prepared, out):
        if p.plan.get("results"):
            write_json(results, p.plan["results"])
    return out


def _prepare(torch: Any, plan: Mapping[str, Any], progress: Progress) -> _Prepared:
    """Steps 1-4 of one group (module docstring): its checks, its binding and warm-up, its spans and
    cross-checks; what its capture needs is kept."""
    p = _Prepared(plan)
    seconds = p.seconds
    before = {(m["source"], m["kernel"], m["options"], m["at"]) for m in cuda_launch.loaded()}
    t0 = time.perf_counter()
    op, shape = plan["op"], plan["shape"]
    cap, span, cc = plan["capture"], plan["span"], plan["cross_check"]

    if plan.get("check", True):
        p.records = checks(plan, progress, seconds)
    else:  # the counters' run: the measure step already checked these
        p.records = {impl: {"op": op, "shape": shape, "impl": impl, "passed": True} for impl in plan["impls"]}
    seconds["checks"] = time.perf_counter() - t0
    p.passed = passed = [i for i in plan["impls"] if p.records[i]["passed"]]

    t = time.perf_counter()
    progress.mark("bind", op=op, shape=shape)
    placements = int(cap.get("placements", 1))
    p.calls = calls = ops.bind_group(op, passed, shape, plan["params"], plan["seed"], plan["cache_mode"],
                                     placements) if passed else {}
    p.placements = placements = max((int(getattr(c, "placements", 1)) for c in calls.values()), default=1)
    p.sequence = sequence = round_placements(int(cap["rounds"]), placements, int(plan["seed"]))
    per_call = p.per_call
    for impl, call in calls.items():
        for _ in range(int(cap["warmup"])):
            call()
        per_call[impl] = _event_us(torch, call, max(1, int(cap["warmup"])))
    k = calls_per_round(max(per_call.values(), default=float("nan")), float(cap["round_us"]), int(cap["max_calls"]))
    p.per_round = {impl: k for impl in passed}
    seconds["bind_and_warmup"] = time.perf_counter() - t

    if plan.get("spans", True) and passed:
        t = time.perf_counter()
        progress.mark("spans", op=op, shape=shape)
        for call in calls.values():
            for _ in range(int(span["warmup"])):
                call()
        torch.cuda.synchronize()
        per_round_spans = span_samples_per_round(int(span["samples"]), int(span["rounds"]),
                                                 max(per_call.values(), default=float("nan")),
                                                 float(span.get("max_seconds", float("inf"))))
        p.spans = span_samples(torch, calls, op, shape, int(span["samples"]), int(span["rounds"]), sequence,
                               per_round_spans)
        seconds["spans"] = time.perf_counter() - t
        if cc["enabled"]:
            t = time.perf_counter()
            progress.mark("graph replay", op=op, shape=shape)
            p.graphs = graph_replay.measure_group(op, shape, calls, int(cc["calls"]), int(cc["replays"]),
                                                  float(cc["max_seconds"]), placements, sequence)
            seconds["graph_replay"] = time.perf_counter() - t
            if cc.get("idle_starts"):
                t = time.perf_counter()
                progress.mark("idle starts", op=op, shape=shape)
                idle = idle_start.measure_group(calls, int(cc["calls"]), int(cc["replays"]), float(cc["max_seconds"]),
                                                sequence)
                for row in p.graphs:
                    row.update(idle.get(row["impl"], {}))
                seconds["idle_starts"] = time.perf_counter() - t
    p.modules = [m for m in cuda_launch.loaded() if (m["source"], m["kernel"], m["options"], m["at"]) not in before]
    return p


def _results(p: _Prepared, session_seconds: Mapping[str, float]) -> dict[str, Any]:
    """What one group of the session leaves (module docstring's last paragraph)."""
    plan, passed = p.plan, p.passed
    spans = p.spans
    return {
        "op": plan["op"], "shape": plan["shape"], "impls": list(plan["impls"]), "checks": p.records, "passed": passed,
        "rounds": int(plan["capture"]["rounds"]), "placements": p.placements,
        "round_placements": p.sequence, "calls_per_round": p.per_round,
        "warmup_us_per_call": {i: p.per_call[i] for i in passed},
        "launch_paths": {impl: str(getattr(call, "launch_path", "direct")) for impl, call in p.calls.items()},
        "input_sets": {impl: int(getattr(call, "input_sets", 1)) for impl, call in p.calls.items()},
        "spans": spans, "graphs": p.graphs, "seconds": dict(p.seconds), "session_seconds": dict(session_seconds),
        "windows": [list(w) for w in p.windows],
        "modules": p.modules,
        "span_median_us": {i: statistics.median([s["span_us"] for s in spans if s["impl"] == i])
                           for i in passed if any(s["impl"] == i for s in spans)},
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        raise EvidenceError("usage: python -m harness group PLAN.json (a plan the measure step writes).")
    try:
        plan = json.loads(Path(argv[0]).read_text())
    except (OSError, ValueError) as exc:
        raise EvidenceError(f"cannot read the group plan {argv[0]}: {exc}.") from None
    run(plan)
    return 0
