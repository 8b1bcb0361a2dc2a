"""The measure stage's workflow steps: a measurement group, its counters, and the session's
ceilings, each holding the GPU lock of its group. workflow/scripts/ call these, one per rule.

A measurement group is every implementation of one (operation, shape): one process, started under
nsys, checks them, captures them in interleaved rounds and times their spans
(harness.measure.group); this step takes the GPU, watches it through NVML, runs that process,
and writes what the tables read: the record of the group (the facts of the run), the launches the
capture attributed to each implementation's round, the span samples and the graph-replay timings.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import EvidenceError, ToolMissing
from harness.gpu import device
from harness.gpu.device import gpu_state
from harness.gpu.lock import group_gpu_lock, group_record, nvml_index
from harness.gpu.watch import Sampler, others_only, wait_until_quiet
from harness.io import write_csv, write_json, write_text
from harness.jobs import preload
from harness.measure import capture, group
from harness.measure import ceilings as ceilings_mod
from harness.measure import counters as ncu
from harness.measure.check import failure, unmeasured_record
from harness.tables import counters as counter_table
from harness.tables import derive, nsys
from harness.tools import clean_parent, run_command, versions


def lock(what: str, ns_dir: str | Path | None, timeout_s: float, op: str | None = None,
         shape: str | None = None) -> Any:
    """The GPU lock a GPU step holds (harness.gpu.lock). The jobs of one operation and shape form
    one measurement group (group `gpu-<op>-<shape>` in measure.smk): with several GPUs visible
    they all measure on the GPU the group's first job chose, noted under `<ns_dir>/logs/gpu/`."""
    if ns_dir is None:
        return group_gpu_lock(what, timeout_s=timeout_s)
    record = group_record(ns_dir, op, shape)
    name = f"gpu-{op}-{shape}" if op and shape else record.stem
    return group_gpu_lock(what, record, group=name, timeout_s=timeout_s, root=Path(ns_dir) / "logs" / "gpu")


def _gpu_reader(uuid: str) -> Any:
    """The NVML reading of the GPU the step holds (NVML counts devices by its own index, whatever
    CUDA_VISIBLE_DEVICES says; device 0 where NVML does not know it), with the compute processes
    of other jobs told apart from this measurement's own (harness.gpu.watch.others_only)."""
    index = nvml_index(uuid)
    return others_only(functools.partial(gpu_state, index) if index else gpu_state)


def crashed_record(op: str, shape: str, impl: str, message: str) -> dict[str, Any]:
    """The check record of an implementation that crashed the GPU: failed, neither captured nor timed."""
    return unmeasured_record(op, shape, impl, message, crashed=True)


SCRATCH = ("results.json", "progress.json", "plan.json")
"""What the group process and this step exchange in the group's folder; removed when the step ends."""


def measure(*, op: str, shape: str, impls: Sequence[str], plan: Mapping[str, Any], group_dir: str | Path, log: str,
            settings: Mapping[str, Any], exclusive: bool, threads: int) -> dict[str, Any]:
    """Measure one group into `group_dir` (harness.tables.derive.group_files). `plan` holds what
    determines the figures (the operation's config block, seed, cache mode, capture, span and
    cross-check settings, the nsys trace); `settings` what does not (tool paths, timeouts, the lock
    wait, the quiet-GPU policy). A crash of one implementation's check records it as failed and the
    group runs again without it. Without a CUDA GPU here, one sentence before nsys is started."""
    device.require_visible_gpu()
    files = derive.group_files(group_dir)
    folder = files["record"].parent
    folder.mkdir(parents=True, exist_ok=True)
    for stale in files.values():
        stale.unlink(missing_ok=True)
    ns_dir = folder.parents[2]
    try:
        crashed: dict[str, str] = {}
        started = time.time()
        preload("pandas", "sqlite_utils")  # needed once the group process has run: imported while it runs
        policy = settings["gpu_state"]
        with lock(f"measure {op} {shape}", ns_dir, float(settings["gpu_lock_timeout_s"]), op, shape) as uuid:
            reader = _gpu_reader(uuid)
            before, waited = wait_until_quiet(reader, policy)
            with Sampler(reader, float(policy["sample_interval_s"])) as sampler:
                while True:
                    remaining = [i for i in impls if i not in crashed]
                    full_plan = {**plan, "op": op, "shape": shape, "impls": remaining, "profile": True,
                                 "check_s": float(settings.get("check_s", group.CHECK_S)),
                                 "results": str(folder / "results.json"), "progress": str(folder / "progress.json")}
                    plan_path = folder / "plan.json"
                    write_json({**full_plan, "launched_at": time.time()}, plan_path)
                    profiled = time.time()
                    try:
                        info = capture.profile_group(settings["nsys_path"], plan["nsys"]["trace"], plan["nsys"]["extra_args"],
                                                     plan_path, files["report"], files["export"], Path(log),
                                                     float(settings["timeout_s"]))
                        profiled = time.time() - profiled
                        break
                    except capture.GroupFailed as exc:
                        progress = _read_json(folder / "progress.json")
                        if progress.get("step") == "crashed" and progress.get("impl") in remaining:
                            crashed[progress["impl"]] = progress["message"]
                            print(f"measure: {progress['message']}")
                            if len(crashed) < len(impls):
                                continue
                            info = None
                            break
                        where = progress.get("step", "start-up")
                        raise EvidenceError(f"the measurement of {op} {shape} stopped during {where}"
                                            f"{' of ' + progress['impl'] if progress.get('impl') else ''} with exit status "
                                            f"{exc.status}; see the log.") from None
            after = reader()
        results = _read_json(folder / "results.json") if info is not None else {"checks": {}, "passed": []}
        checks = dict(results.get("checks") or {})
        for impl, message in crashed.items():
            checks[impl] = crashed_record(op, shape, impl, message)
        for impl in impls:
            record = checks.get(impl)
            if record is not None and not record["passed"]:
                print(f"not timed: {record.get('error') or failure(record)}")
        derived = time.time()
        launches = derive.launch_rows(files["export"], op, shape) if info is not None and results["passed"] else []
        write_csv(launches, derive.LAUNCH_COLUMNS, files["launches"])
        write_csv(results.get("spans") or [], derive.SPAN_SAMPLE_COLUMNS, files["spans"])
        write_csv(results.get("graphs") or [], derive.GRAPH_COLUMNS, files["graph"])
        export = nsys.export_info(files["export"]) if info is not None else {}
        leaks = [*(info or {}).get("report_withheld", []),
                 *capture.keep_clean([files["report"], files["export"], Path(log)], capture.outside_values())]
        for note in leaks:
            print(f"environment: {note}")
        derived = time.time() - derived
        flags = sampler.flags()
        for flag in flags:
            print(f"capture disturbed: {flag}")
        record = {
            "op": op, "shape": shape, "impls": list(impls), "checks": {i: checks[i] for i in impls if i in checks},
            "passed": results.get("passed", []), "rounds": results.get("rounds"),
            "placements": results.get("placements", 1), "round_placements": results.get("round_placements"),
            "calls_per_round": results.get("calls_per_round", {}), "launch_paths": results.get("launch_paths", {}),
            "input_sets": results.get("input_sets", {}), "warmup_us_per_call": results.get("warmup_us_per_call", {}),
            "modules": results.get("modules", []),
            "crashed": crashed, "gpu_uuid": uuid,
            "gpu": {"before": before, "waited_s": waited, "during": sampler.summary(), "after": after},
            "span": {"exclusive": exclusive, "threads": threads, "measured": "in the group process, before the capture range opened"},
            "seconds": {**(results.get("seconds") or {}), "profile": profiled if info is not None else None,
                        **{f"profile {k}": v for k, v in ((info or {}).get("seconds") or {}).items()},
                        "derive": derived,
                        "job": time.time() - started},
            "nsys": (info or {}).get("nsys"), "nsys_version": export.get("nsys_version"), "export": export,
            "env_rows_removed": (info or {}).get("env_rows_removed"), "environment_removed": leaks,
            "isolation": (info or {}).get("isolation"),
            "versions": versions(), "host": platform.node(), "cache_mode": plan["cache_mode"],
            "baselines": _baseline_commits(plan), "baseline_dates": _baseline_commits(plan, "DATE"),
        }
    finally:  # the group process's plan, progress and results: scratch, on every exit
        for name in SCRATCH:
            (folder / name).unlink(missing_ok=True)
    write_json(record, files["record"])
    for impl in record["passed"]:
        k = record["calls_per_round"].get(impl)
        print(f"measured: {op} {shape} {impl}: {record['rounds']} rounds of {k} calls, launch {record['launch_paths'].get(impl)}")
    return record


def _baseline_commits(plan: Mapping[str, Any], name: str = "COMMIT") -> dict[str, str]:
    """label -> the commit (or, name='DATE', the commit's date) of each baseline revision the group
    measured, from its sources' folder (harness.baseline.extract)."""
    out = {}
    for label, root in ((plan.get("params") or {}).get("baselines") or {}).items():
        try:
            out[label] = (Path(root) / name).read_text().strip() or "unknown"
        except OSError:
            out[label] = "unknown"
    return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def counters(*, op: str, shape: str, impls: Sequence[str], plan: Mapping[str, Any], metrics: Mapping[str, str],
             namespace: str, record_json: str, raw_out: str, table_out: str, log: str,
             settings: Mapping[str, Any]) -> None:
    """Nsight Compute counters of every kernel of every implementation of (op, shape) that passed its
    check, in one ncu process over the group process (no spans, one round): the .ncu-rep beside
    `raw_out`, its raw CSV export in `raw_out`, and the counters table in `table_out`.

    Counters never take the report down: where they cannot be read here (no ncu, or the driver
    refuses counter access) each implementation's row says `unavailable` and why; where the
    profile, its export or its attribution fails, `failed` and the one-sentence reason (the trust
    rules' flags list both); an implementation whose check failed says `not measured`. The job
    succeeds in every case."""
    record = json.loads(Path(record_json).read_text())
    passed = [i for i in impls if i in record.get("passed", [])]
    raw, table = Path(raw_out), Path(table_out)
    raw.parent.mkdir(parents=True, exist_ok=True)

    def without(reason: str, status: str, which: Sequence[str]) -> list[dict[str, Any]]:
        if which:
            print(f"counters {status}: {', '.join(which)}: {reason}")
        return [row for impl in which for row in counter_table.unavailable_rows(reason, metrics, namespace, op, shape, impl,
                                                                                  status=status)]

    rows = without("its check failed, so it was neither captured nor profiled", "not measured",
                   [i for i in impls if i not in passed])
    if passed:
        try:
            rows += _profile_counters(op, shape, passed, plan, metrics, namespace, raw, log, settings, without)
        except EvidenceError as exc:
            rows += without(str(exc), "failed", passed)
    if not raw.is_file():
        write_text("", raw)
    write_csv(rows, counter_table.columns(metrics), table)


def _profile_counters(op: str, shape: str, passed: Sequence[str], plan: Mapping[str, Any], metrics: Mapping[str, str],
                      namespace: str, raw: Path, log: str, settings: Mapping[str, Any],
                      without: Any) -> list[dict[str, Any]]:
    """The counters rows of the implementations that passed (see `counters`): `unavailable` rows
    where counters cannot be read here; EvidenceError (one sentence) where the profile fails."""
    try:
        ncu_path = ncu.find_ncu(settings["ncu_path"])
    except ToolMissing as exc:
        return list(without(str(exc), "unavailable", passed))
    rep = raw.with_suffix("").with_suffix(".ncu-rep")
    tmp_base = raw.with_name(raw.name + ".partial")
    tmp_rep = tmp_base.with_name(tmp_base.name + ".ncu-rep")
    tmp_rep.unlink(missing_ok=True)
    plan_path = raw.with_name(raw.name + ".plan.json")
    write_json({**plan, "op": op, "shape": shape, "impls": list(passed), "profile": False, "spans": False, "check": False,
                "launched_at": time.time()}, plan_path)
    argv = ncu.profile_command(ncu_path, metrics, group.RANGE, tmp_base, [sys.executable, "-m", "harness", "group", str(plan_path)])
    try:
        with tempfile.TemporaryDirectory(prefix="evidence-ncu-") as private:
            with lock(f"counters {op} {shape}", raw.parents[2], float(settings["gpu_lock_timeout_s"]), op, shape):
                started = time.time()
                preload("pandas")  # the table's writer needs it once ncu has run: imported while it runs
                rc, output = run_command(clean_parent(argv), log, env=capture.private_env(Path(private)),
                                         timeout=float(settings["ncu_timeout_s"]),
                                         what=f"ncu profile of {op} {shape}")
                profiled = time.time() - started
        reason = ncu.unavailable_reason(output)
        if reason:
            return list(without(reason, "unavailable", passed))
        if rc != 0 or not tmp_rep.is_file():
            raise EvidenceError(f"ncu profile of {op} {shape} failed (exit status {rc}, report "
                                f"{'written' if tmp_rep.is_file() else 'not written'}); see the log.")
        rc, export = run_command(ncu.export_command(ncu_path, tmp_rep), None, timeout=float(settings["ncu_timeout_s"]),
                                 what=f"ncu export of {op} {shape}")
        if rc != 0:
            raise EvidenceError(f"ncu --import of {tmp_rep.name} failed with exit status {rc}.")
        print(f"counters: ncu profile {profiled:.1f} s, export {time.time() - started - profiled:.1f} s")
        write_text(export, raw)
        kernels = counter_table.read_raw_csv(raw)
        if not kernels:
            raise EvidenceError(f"ncu profiled no kernel inside the NVTX range '{group.RANGE}' of {op} {shape}; see the log.")
        found = counter_table.by_implementation(kernels, passed)
        os.replace(tmp_rep, rep)
    finally:
        plan_path.unlink(missing_ok=True)
        tmp_rep.unlink(missing_ok=True)
    for note in capture.keep_clean([rep, raw, Path(log)], capture.outside_values()):
        print(f"environment: {note}")
    rows: list[dict[str, Any]] = []
    for impl, kernels_of in found.items():
        got = counter_table.counter_rows(kernels_of, metrics, namespace, op, shape, impl)
        for row in got:
            print(f"counters: {impl}: {row['kernel'][:60]}: {row.get('duration_ns')} ns (ncu replay)")
        rows += got
    return rows


def ceilings(*, out: str, same_size: Sequence[int], cache_mode: str, settings: Mapping[str, Any]) -> None:
    """The session's ceilings (harness.measure.ceilings), the same-size copy at each byte count."""
    with lock("ceilings", Path(out).parents[1], float(settings["gpu_lock_timeout_s"])):
        rows = ceilings_mod.measure(same_size=same_size, cache_mode=cache_mode)
    for row in rows:
        print(f"ceiling: {row['ceiling']} = {row['value']:.1f} {row['unit']}")
    write_csv(rows, derive.CEILING_COLUMNS, out)
