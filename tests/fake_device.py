"""A stand-in device for CPU tests of the measure stage and of whole runs: a stand-in `nsys` that,
instead of profiling the group process, writes what that process and nsys would have written for
the session plan it is given — each group's results file and one synthetic SQLite export with
one range 'capture/<op>/<shape>/<impl>/<round>' per group, implementation and round, each group's
inside its window 'group/<op>/<shape>' (kernel durations drawn around a per-call time of the
test's choosing) — and a stand-in `ncu` that is simply missing.

Used by tests/test_measure_step.py and tests/test_pipeline_cpu.py. Nothing here is part of the
product: the real group process (harness.measure.group) needs a GPU.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import stat
import sys
import time
from pathlib import Path
from typing import Any

from nsys_exports import ExportBuilder

PER_CALL_NS = {"cuda": 5000, "triton": 5100, "torch": 9000, "external": 6000}
"""Default kernel time per call of each implementation (ns); a variant, and ours at a baseline
revision, take their base's."""

STANDIN = """#!{python}
import sys
sys.path.insert(0, {tests!r})
import fake_device
sys.exit(fake_device.standin_nsys(sys.argv[1:]))
"""


def per_call(impl: str, overrides: dict[str, int] | None = None) -> int:
    base = impl.split("@", 1)[0].split(".", 1)[0]  # a variant, or ours at a baseline revision, takes its base's
    table = {**PER_CALL_NS, **(overrides or {})}
    value = table.get(impl, table.get(base, 7000))
    if impl.endswith(".planted"):
        value = int(value * 1.025)
    return value


def synthetic_export(path: Path, impls: list[str], rounds: int, calls: dict[str, int], seed: int = 0,
                     overrides: dict[str, int] | None = None, noise: float = 0.01) -> Path:
    """An export with, per round and implementation (rotated), `calls[impl]` launches inside a
    range capture/<impl>/<round>, all inside an outer range `capture`."""
    b = ExportBuilder()
    _add_group(b, 1_000_000, impls, rounds, calls, random.Random(seed), overrides, noise)
    return b.write(path)


def session_export(path: Path, groups: list[tuple[str, str, list[str], int, dict[str, int]]], seed: int = 0,
                   overrides: dict[str, int] | None = None, noise: float = 0.01) -> Path:
    """The export of a session: each group (op, shape, impls, rounds, calls per round) as in
    `synthetic_export`, its ranges named capture/<op>/<shape>/<impl>/<round>, inside its window
    group/<op>/<shape>, the groups one after the other."""
    b = ExportBuilder()
    rng = random.Random(seed)
    t = 1_000_000
    for op, shape, impls, rounds, calls in groups:
        start = t
        t = _add_group(b, t + 500, impls, rounds, calls, rng, overrides, noise, f"{op}/{shape}/") + 500
        b.add_range(start, t, f"group/{op}/{shape}", 4242, 4242)
        t += 10_000
    return b.write(path)


def _add_group(b: ExportBuilder, t: int, impls: list[str], rounds: int, calls: dict[str, int], rng: random.Random,
               overrides: dict[str, int] | None, noise: float, where: str = "") -> int:
    """One group's rounds into `b` from time `t`; returns the time after them."""
    pid, tid = 4242, 4242
    start = t
    order = list(impls)
    for r in range(rounds):
        k = r % len(order) if order else 0
        for impl in order[k:] + order[:k]:
            r0 = t
            for _ in range(calls[impl]):
                dur = int(per_call(impl, overrides) * (1.0 + rng.gauss(0.0, noise)))
                b.launch(pid, tid, t + 100, t + 2_000, dur, f"{impl.split('.')[0]}_kernel", grid=(64, 1, 1), block=(128, 1, 1))
                t += dur + 5_000
            b.add_range(r0, t, f"capture/{where}{impl}/{r}", pid, tid)
            t += 1_000
    b.add_range(start - 10, t + 10, "capture", pid, tid)
    return t + 10


def results(plan: dict[str, Any], impls: list[str], failing: set[str]) -> dict[str, Any]:
    """What harness.measure.group.run writes, for the plan."""
    passed = [i for i in impls if i not in failing]
    rounds = int(plan["capture"]["rounds"])
    slowest = max((per_call(i) for i in passed), default=1)  # every implementation makes the slowest's count
    k = min(int(plan["capture"]["max_calls"]), max(1, int(float(plan["capture"]["round_us"]) * 1000 // slowest)))
    calls = {i: k for i in passed}
    checks = {}
    for i in impls:
        ok = i not in failing
        checks[i] = {"op": plan["op"], "shape": plan["shape"], "impl": i, "passed": ok, "max_abs_err": 1e-7 if ok else 1.0,
                     "max_rel_err": 1e-7 if ok else 1.0, "rel_l2_err": 1e-8 if ok else 0.5, "atol": 1e-4, "rtol": 1e-4,
                     "nonfinite_outputs": 0, "unwritten_outputs": 0 if ok else 768, "elements": 1000,
                     "error": "" if ok else f"check failed for {plan['op']} {plan['shape']} {i}: max abs error 1, "
                                            "max rel error 1 against atol 0.0001 / rtol 0.0001, 0 non-finite and 768 "
                                            "unwritten outputs; nothing of it is captured or timed."}
    spans = [{"op": plan["op"], "shape": plan["shape"], "impl": i, "round": r, "sample": s,
              "span_us": 20.0 + per_call(i) / 1000.0 + s * 0.01} for r in range(3) for i in passed for s in range(5)]
    graphs = [{"op": plan["op"], "shape": plan["shape"], "impl": i, "status": "ok", "reason": "", "calls_per_replay": 20,
               "replays": 20, "graph_median_us": per_call(i) / 1000.0 + 0.3, "graph_min_us": per_call(i) / 1000.0 + 0.2,
               "graph_max_us": per_call(i) / 1000.0 + 0.5,
               # idle starts (cross_check.idle_starts): the kernel and a fixed 2.5 µs of events and start
               **({"idle_status": "ok", "idle_median_us": per_call(i) / 1000.0 + 2.5, "idle_slots": 20}
                  if (plan.get("cross_check") or {}).get("idle_starts") else {})} for i in passed]
    return {"op": plan["op"], "shape": plan["shape"], "impls": impls, "checks": checks, "passed": passed,
            "rounds": rounds, "calls_per_round": calls, "warmup_us_per_call": {i: per_call(i) / 1000.0 for i in passed},
            "launch_paths": {i: "prepared" if i.startswith("triton") else "direct" for i in passed},
            "input_sets": {i: 1 for i in passed}, "spans": spans, "graphs": graphs,
            "seconds": {"checks": 0.1, "capture": 0.1, "total": 0.3}}


def standin_nsys(argv: list[str]) -> int:
    """`nsys profile ... --output BASE <python> -m harness group PLAN` on the CPU (module docstring).
    An implementation named '<base>.crash' crashes its check (the progress file says so, exit 3);
    one named '<base>.wrong' fails its check; a file `sleep-s` beside the stand-in makes the group
    take that many seconds, and `per-call-ns.json` there overrides PER_CALL_NS (files, since nsys
    runs under the step's minimal environment).
    The environment it was given is written to `seen-env.json` (names) and `seen-environ.json`
    (names and values) beside the stand-in, its parent's to `seen-parent-environ`, and the text of
    a file `leak` there, when there is one, into the report: a value that reached the capture by
    another way than the environment (to test that the step finds it).
    While it runs it holds the lock `measuring` (see `measuring`); one started while another holds
    it, two sessions on one device at once, says so and exits 4."""
    here = Path(sys.argv[0]).resolve().parent
    lock = open(here / LOCK, "a")  # held until this process ends, however it ends
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("stand-in nsys: another session is measuring on this device", file=sys.stderr)
        return 4
    (here / "seen-env.json").write_text(json.dumps(sorted(os.environ)))
    # What a profiler could copy into its report: its own environment (the profiled process's), and
    # its parent's as /proc gives it (nsys runs as the child of a clean shell).
    (here / "seen-environ.json").write_text(json.dumps(dict(os.environ)))
    try:
        (here / "seen-parent-environ").write_bytes(Path(f"/proc/{os.getppid()}/environ").read_bytes())
    except OSError:
        pass
    leak = (here / "leak").read_bytes() if (here / "leak").is_file() else b""
    if not argv or argv[0] != "profile":
        print("stand-in nsys: only 'profile' is played", file=sys.stderr)
        return 2
    base = Path(argv[argv.index("--output") + 1])
    plan_path = Path(argv[-1])
    session = json.loads(plan_path.read_text())
    plans = session["groups"] if "groups" in session else [session]
    progress = Path(session["progress"])
    for plan in plans:
        crash = next((i for i in plan["impls"] if i.endswith(".crash")), None)
        if crash is not None:
            progress.write_text(json.dumps({"step": "crashed", "op": plan["op"], "shape": plan["shape"], "impl": crash,
                                            "message": f"{plan['op']} {plan['shape']} {crash} crashed on the GPU (CUDA "
                                                       "error: an illegal memory access was encountered); this job stops."}))
            return 3
    slow = here / "sleep-s"
    time.sleep(float(slow.read_text()) if slow.is_file() else 0.0)
    overrides = json.loads((here / "per-call-ns.json").read_text()) if (here / "per-call-ns.json").is_file() else None
    outs = [results(plan, list(plan["impls"]), {i for i in plan["impls"] if i.endswith(".wrong")}) for plan in plans]
    # each group's window on the GPU, as the group process notes it (harness.measure.group): an
    # instant, or with a file `group-s` beside the stand-in that many seconds, during which a file
    # `capping` exists beside it for the groups whose shape `cap-shapes` lists (a test's NVML reads it)
    spell = float((here / "group-s").read_text()) if (here / "group-s").is_file() else 0.0
    capped = (here / "cap-shapes").read_text().split() if (here / "cap-shapes").is_file() else []
    for plan, out in zip(plans, outs):
        began = time.time()
        if plan["shape"] in capped:
            (here / "capping").touch()
        time.sleep(spell)
        (here / "capping").unlink(missing_ok=True)
        out["windows"] = [[began, time.time()]]
    session_export(base.with_name(base.name + ".sqlite"),
                   [(o["op"], o["shape"], o["passed"], o["rounds"], o["calls_per_round"]) for o in outs],
                   seed=int(plans[0].get("seed", 0)), overrides=overrides)
    base.with_name(base.name + ".nsys-rep").write_bytes(b"stand-in report " + leak)
    for plan, out in zip(plans, outs):
        Path(plan["results"]).write_text(json.dumps(out))
    progress.write_text(json.dumps({"step": "done"}))
    return 0


LOCK = "measuring.lock"


def measuring(bin_dir: Path, settle_s: float = 2.0) -> bool:
    """Whether a stand-in installed in bin_dir is still running `settle_s` seconds from now at the
    latest (a killed one releases its lock when it is gone, which takes a moment)."""
    return held(bin_dir / LOCK, settle_s)


def held(lock_path: Path, settle_s: float = 2.0) -> bool:
    """Whether some process still holds an exclusive flock on `lock_path` after `settle_s` seconds."""
    deadline = time.monotonic() + settle_s
    with open(lock_path, "a") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return True
                time.sleep(0.05)
                continue
            fcntl.flock(lock, fcntl.LOCK_UN)
            return False


def install(bin_dir: Path) -> Path:
    """Write the stand-in `nsys` into bin_dir (put it first on PATH); returns its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "nsys"
    path.write_text(STANDIN.format(python=sys.executable, tests=str(Path(__file__).parent)))
    path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return path
