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

from harness import ops
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


def lock(what: str, ns_dir: str | Path, timeout_s: float, session: bool = False) -> Any:
    """The GPU lock a GPU step holds (harness.gpu.lock), noted under `<ns_dir>/logs/gpu/`: with
    `session`, that of the measurement session (group `gpu-session` in measure.smk: with several
    GPUs visible, its measure and counters jobs measure on the GPU its first job chose), else the
    ceilings'."""
    root = Path(ns_dir) / "logs" / "gpu"
    record = root / "session.json" if session else group_record(ns_dir)
    return group_gpu_lock(what, record, group="gpu-session" if session else record.stem, timeout_s=timeout_s, root=root)


def _gpu_reader(uuid: str) -> Any:
    """The NVML reading of the GPU the step holds (NVML counts devices by its own index, whatever
    CUDA_VISIBLE_DEVICES says; device 0 where NVML does not know it), with the compute processes
    of other jobs told apart from this measurement's own (harness.gpu.watch.others_only)."""
    index = nvml_index(uuid)
    return others_only(functools.partial(gpu_state, index) if index else gpu_state)


def crashed_record(op: str, shape: str, impl: str, message: str) -> dict[str, Any]:
    """The check record of an implementation that crashed the GPU: failed, neither captured nor timed."""
    return unmeasured_record(op, shape, impl, message, crashed=True)


SCRATCH = ("results.json",)
"""What the session process leaves in a group's folder for this step; removed when the step ends."""

SESSION_SCRATCH = ("session.plan.json", "session.progress.json", "session.sqlite")
"""What the session process and this step exchange in the session's folder; removed at the end."""

def measure(*, op: str, shape: str, impls: Sequence[str], plan: Mapping[str, Any], group_dir: str | Path, log: str,
            settings: Mapping[str, Any], exclusive: bool, threads: int) -> dict[str, Any]:
    """Measure one group into `group_dir`: a session of that one group (`measure_session`), whose
    folder is the one above the operation's (artifacts/<ns>/measure/)."""
    folder = Path(group_dir)
    return measure_session(groups=[{"op": op, "shape": shape, "impls": list(impls), "plan": plan, "group_dir": folder}],
                           session_dir=folder.parents[1], log=log, settings=settings, exclusive=exclusive,
                           threads=threads)[0]


def measure_session(*, groups: Sequence[Mapping[str, Any]], session_dir: str | Path, log: str,
                    settings: Mapping[str, Any], exclusive: bool, threads: int) -> list[dict[str, Any]]:
    """Measure every group of a session in one process under nsys (harness.measure.group.run_session):
    each group (`op`, `shape`, `impls`, `plan`, `group_dir`) into its folder
    (harness.tables.derive.group_files), its part of the session's export among them
    (capture.split_export); the session's raw report at `session_dir`/capture.SESSION_REPORT. `plan`
    holds what determines a group's figures (the operation's config block, seed, cache mode,
    capture, span and cross-check settings, the nsys trace); `settings` what does not (tool paths,
    timeouts, the lock wait, the quiet-GPU policy). A crash of one implementation's check records
    it as failed and the session runs again without it. Without a CUDA GPU here, one sentence
    before nsys is started. Returns the groups' records, in order."""
    device.require_visible_gpu()
    session = Path(session_dir)
    session.mkdir(parents=True, exist_ok=True)
    report, export = session / capture.SESSION_REPORT, session / "session.sqlite"
    ns_dir = session.parent
    folders = [Path(g["group_dir"]) for g in groups]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        for stale in derive.group_files(folder).values():
            stale.unlink(missing_ok=True)
    plan_path, progress_path = session / "session.plan.json", session / "session.progress.json"
    crashed: dict[tuple[str, str], dict[str, str]] = {}
    try:
        started = time.time()
        preload("pandas", "sqlite_utils")  # needed once the session process has run: imported while it runs
        policy = settings["gpu_state"]
        first = groups[0]["plan"]
        profiled: float | None = None
        records: list[dict[str, Any]] = []
        with lock("measure session", ns_dir, float(settings["gpu_lock_timeout_s"]), session=True) as uuid:
            reader = _gpu_reader(uuid)
            before, waited = wait_until_quiet(reader, policy)
            with Sampler(reader, float(policy["sample_interval_s"])) as sampler:
                while True:
                    plans = []
                    for g, folder in zip(groups, folders):
                        gone = crashed.get((g["op"], g["shape"]), {})
                        remaining = [i for i in g["impls"] if i not in gone]
                        if remaining:
                            plans.append({**g["plan"], "op": g["op"], "shape": g["shape"], "impls": remaining,
                                          "check_s": float(settings.get("check_s", group.CHECK_S)),
                                          "results": str(folder / "results.json")})
                    if not plans:
                        info = None
                        break
                    write_json({"groups": plans, "profile": True, "progress": str(progress_path),
                                "launched_at": time.time()}, plan_path)
                    profiled = time.time()
                    try:
                        info = capture.profile_group(settings["nsys_path"], first["nsys"]["trace"],
                                                     first["nsys"]["extra_args"], plan_path, report, export, Path(log),
                                                     float(settings["timeout_s"]) * len(plans))
                        profiled = time.time() - profiled
                        break
                    except capture.GroupFailed as exc:
                        progress = _read_json(progress_path)
                        key = (str(progress.get("op")), str(progress.get("shape")))
                        asked: list[str] = next((p["impls"] for p in plans if (p["op"], p["shape"]) == key), [])
                        if progress.get("step") == "crashed" and progress.get("impl") in asked:
                            crashed.setdefault(key, {})[progress["impl"]] = progress["message"]
                            print(f"measure: {progress['message']}")
                            continue
                        where = progress.get("step", "start-up")
                        of = " of " + " ".join(str(progress[k]) for k in ("op", "shape", "impl") if progress.get(k)) \
                            if progress.get("impl") or progress.get("op") else ""
                        raise EvidenceError(f"the measurement session stopped during {where}{of} with exit status "
                                            f"{exc.status}; see the log.") from None
            after = reader()
        flags = sampler.flags()
        for flag in flags:
            print(f"capture disturbed: {flag}")
        leaks = [*(info or {}).get("report_withheld", []),
                 *capture.keep_clean([report, Path(log)], capture.outside_values())]
        split = time.time()
        inside: dict[str, float] = {}
        for g, folder in zip(groups, folders):
            record, process = _group_record(g, folder, export if info is not None else None, len(groups) == 1,
                                            crashed.get((g["op"], g["shape"]), {}), info, leaks, uuid,
                                            {"before": before, "waited_s": waited, "during": sampler.summary(),
                                             "after": after}, exclusive, threads, sampler)
            records.append(record)
            inside = inside or process
        split = time.time() - split
        session_seconds = {**inside,
                           "profile": profiled if info is not None else None,
                           **{f"profile {k}": v for k, v in ((info or {}).get("seconds") or {}).items()},
                           "groups_written": split, "job": time.time() - started}
        names = [f"{g['op']}/{g['shape']}" for g in groups]
        for record, folder in zip(records, folders):
            record["session"] = {"groups": names, "report": capture.SESSION_REPORT, "seconds": session_seconds}
            write_json(record, derive.group_files(folder)["record"])
    finally:  # the session's plan, progress and export and each group's results: scratch, on every exit
        for name in SESSION_SCRATCH:
            (session / name).unlink(missing_ok=True)
        for folder in folders:
            for name in SCRATCH:
                (folder / name).unlink(missing_ok=True)
    for record in records:
        for impl in record["passed"]:
            k = record["calls_per_round"].get(impl)
            print(f"measured: {record['op']} {record['shape']} {impl}: {record['rounds']} rounds of {k} calls, "
                  f"launch {record['launch_paths'].get(impl)}")
    return records


def _group_record(g: Mapping[str, Any], folder: Path, export: Path | None, alone: bool, crashed: Mapping[str, str],
                  info: Mapping[str, Any] | None, leaks: list[str], uuid: str, gpu: Mapping[str, Any],
                  exclusive: bool, threads: int, sampler: Sampler | None = None) -> tuple[dict[str, Any], dict[str, float]]:
    """One group's files from the session (its part of the export, its launches, spans and graph
    rows) and its record (written by the caller, with the session's facts), with the seconds the
    session process gave its own start (start_up, gpu_init, profiler_start). `gpu` is NVML's
    reading of the session (`during`: the whole session's watch); where the group process noted its
    windows and `sampler` holds the session's readings, `gpu.group` is what NVML saw in this
    group's own windows (Sampler.within), with the windows."""
    op, shape, impls, plan = g["op"], g["shape"], list(g["impls"]), g["plan"]
    files = derive.group_files(folder)
    results = _read_json(folder / "results.json") if export is not None else {}
    results = results or {"checks": {}, "passed": []}
    checks = dict(results.get("checks") or {})
    for impl, message in crashed.items():
        checks[impl] = crashed_record(op, shape, impl, message)
    for impl in impls:
        record = checks.get(impl)
        if record is not None and not record["passed"]:
            print(f"not timed: {record.get('error') or failure(record)}")
    derived = time.time()
    # captured: the group has rounds in the session's export (an implementation passed its check);
    # a group none of whose implementations passed has no window there, and no export of its own
    measured = export is not None and bool(results.get("op")) and bool(results.get("passed"))
    if export is not None and measured:
        if alone:
            os.replace(export, files["export"])
        else:
            capture.split_export(export, files["export"], f"{group.WINDOW_PREFIX}{op}/{shape}")
    launches = derive.launch_rows(files["export"], op, shape) if measured else []
    write_csv(launches, derive.LAUNCH_COLUMNS, files["launches"])
    write_csv(results.get("spans") or [], derive.SPAN_SAMPLE_COLUMNS, files["spans"])
    write_csv(results.get("graphs") or [], derive.GRAPH_COLUMNS, files["graph"])
    export_facts = nsys.export_info(files["export"]) if measured else {}
    group_leaks = [*leaks, *capture.keep_clean([files["export"]], capture.outside_values())] if measured else list(leaks)
    for note in group_leaks:
        print(f"environment: {note}")
    seconds = dict(results.get("seconds") or {})
    seconds["derive"] = time.time() - derived
    windows = [(float(w[0]), float(w[1])) for w in results.get("windows") or [] if len(w) == 2]
    if windows and sampler is not None:
        gpu = {**gpu, "group": {**sampler.within(windows).summary(), "windows": [list(w) for w in windows]}}
    return {
        "op": op, "shape": shape, "impls": impls, "checks": {i: checks[i] for i in impls if i in checks},
        "passed": results.get("passed", []), "rounds": results.get("rounds"),
        "placements": results.get("placements", 1), "round_placements": results.get("round_placements"),
        "calls_per_round": results.get("calls_per_round", {}), "launch_paths": results.get("launch_paths", {}),
        "input_sets": results.get("input_sets", {}), "warmup_us_per_call": results.get("warmup_us_per_call", {}),
        "modules": results.get("modules", []),
        "crashed": dict(crashed), "gpu_uuid": uuid, "gpu": dict(gpu),
        "span": {"exclusive": exclusive, "threads": threads, "measured": "in the group process, before the capture range opened"},
        "seconds": seconds,
        "nsys": (info or {}).get("nsys"), "nsys_version": export_facts.get("nsys_version"), "export": export_facts,
        "env_rows_removed": (info or {}).get("env_rows_removed"), "environment_removed": group_leaks,
        "isolation": (info or {}).get("isolation"),
        "versions": versions(), "host": platform.node(), "cache_mode": plan["cache_mode"],
        "baselines": _baseline_commits(plan), "baseline_dates": _baseline_commits(plan, "DATE"),
        "baseline_dispatch": _baseline_dispatch(op, plan),
    }, dict(results.get("session_seconds") or {})


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


def _baseline_dispatch(op: str, plan: Mapping[str, Any]) -> dict[str, str]:
    """label -> whose dispatch chose and launched the revision's kernels (harness.ops.whose_dispatch)."""
    roots = (plan.get("params") or {}).get("baselines") or {}
    return {label: ops.whose_dispatch(op, root) for label, root in roots.items()}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def counters(*, op: str, shape: str, impls: Sequence[str], plan: Mapping[str, Any], metrics: Mapping[str, str],
             namespace: str, record_json: str, raw_out: str, table_out: str, log: str,
             settings: Mapping[str, Any]) -> None:
    """The counters of one group (`counters_session` of that one group), its .ncu-rep beside `raw_out`."""
    raw = Path(raw_out)
    counters_session(groups=[{"op": op, "shape": shape, "impls": list(impls), "plan": plan, "record": record_json,
                              "raw": raw_out, "table": table_out}], metrics=metrics, namespace=namespace,
                     report=str(raw.with_suffix("").with_suffix(".ncu-rep")), log=log, settings=settings)


def counters_session(*, groups: Sequence[Mapping[str, Any]], metrics: Mapping[str, str], namespace: str, report: str,
                     log: str, settings: Mapping[str, Any]) -> None:
    """Nsight Compute counters of every kernel of every implementation that passed its check, of
    every group of the session (`op`, `shape`, `impls`, `plan`, its measure `record`, and where its
    `raw` export and its `table` go), in one ncu process over one session process (no checks, no
    spans, one round each): the .ncu-rep at `report`, each group's part of the raw CSV export in
    its `raw`, and its counters table in its `table`.

    Counters never take the report down: where they cannot be read here (no ncu, or the driver
    refuses counter access) each implementation's row says `unavailable` and why; where the
    profile, its export or its attribution fails, `failed` and the one-sentence reason (the trust
    rules' flags list both); an implementation whose check failed says `not measured`. The job
    succeeds in every case."""
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    passed: dict[tuple[str, str], list[str]] = {}
    for g in groups:
        key = (g["op"], g["shape"])
        record = json.loads(Path(g["record"]).read_text())
        passed[key] = [i for i in g["impls"] if i in record.get("passed", [])]
        Path(g["raw"]).parent.mkdir(parents=True, exist_ok=True)
        rows[key] = _without(metrics, namespace, key, "its check failed, so it was neither captured nor profiled",
                             "not measured", [i for i in g["impls"] if i not in passed[key]])
    profiled = [g for g in groups if passed[(g["op"], g["shape"])]]
    raws: dict[tuple[str, str], str] = {}
    if profiled:
        try:
            found, raws = _profile_counters(profiled, passed, metrics, namespace, Path(report), log, settings)
            for key, got in found.items():
                rows[key] += got
        except _Unavailable as exc:
            for g in profiled:
                key = (g["op"], g["shape"])
                rows[key] += _without(metrics, namespace, key, str(exc), "unavailable", passed[key])
        except EvidenceError as exc:
            for g in profiled:
                key = (g["op"], g["shape"])
                rows[key] += _without(metrics, namespace, key, str(exc), "failed", passed[key])
    for g in groups:
        key = (g["op"], g["shape"])
        write_text(raws.get(key, ""), Path(g["raw"]))
        write_csv(rows[key], counter_table.columns(metrics), g["table"])
    for note in capture.keep_clean([Path(g["raw"]) for g in groups], capture.outside_values()):
        print(f"environment: {note}")


class _Unavailable(Exception):
    """Counters cannot be read on this host (no ncu, or no permission): the reason, one sentence."""


def _without(metrics: Mapping[str, str], namespace: str, key: tuple[str, str], reason: str, status: str,
             which: Sequence[str]) -> list[dict[str, Any]]:
    """The one row per implementation of `which` that says why it has no counters (`status`)."""
    if which:
        print(f"counters {status}: {key[0]} {key[1]}: {', '.join(which)}: {reason}")
    return [row for impl in which for row in counter_table.unavailable_rows(reason, metrics, namespace, key[0], key[1], impl,
                                                                              status=status)]


def _profile_counters(groups: Sequence[Mapping[str, Any]], passed: Mapping[tuple[str, str], list[str]],
                      metrics: Mapping[str, str], namespace: str, rep: Path, log: str,
                      settings: Mapping[str, Any]) -> tuple[dict[tuple[str, str], list[dict[str, Any]]],
                                                             dict[tuple[str, str], str]]:
    """The counters rows and the part of the raw export of each group profiled (see
    `counters_session`); _Unavailable where counters cannot be read here, EvidenceError (one
    sentence) where the profile fails."""
    try:
        ncu_path = ncu.find_ncu(settings["ncu_path"])
    except ToolMissing as exc:
        raise _Unavailable(str(exc)) from None
    what = (f"ncu profile of {groups[0]['op']} {groups[0]['shape']}" if len(groups) == 1
            else f"ncu profile of the session ({len(groups)} groups)")
    tmp_base = rep.with_name(rep.name.removesuffix(".ncu-rep") + ".partial")
    tmp_rep = tmp_base.with_name(tmp_base.name + ".ncu-rep")
    tmp_rep.unlink(missing_ok=True)
    plan_path = rep.with_name(rep.name + ".plan.json")
    plans = [{**g["plan"], "op": g["op"], "shape": g["shape"], "impls": passed[(g["op"], g["shape"])], "spans": False,
              "check": False} for g in groups]
    write_json({"groups": plans, "profile": False, "launched_at": time.time()}, plan_path)
    argv = ncu.profile_command(ncu_path, metrics, group.RANGE, tmp_base, [sys.executable, "-m", "harness", "group", str(plan_path)])
    timeout = float(settings["ncu_timeout_s"]) * len(groups)
    try:
        with tempfile.TemporaryDirectory(prefix="evidence-ncu-") as private:
            ns_dir = Path(groups[0]["record"]).parents[3]  # artifacts/<ns>/measure/<op>/<shape>/record.json
            with lock("counters session", ns_dir, float(settings["gpu_lock_timeout_s"]), session=True):
                started = time.time()
                preload("pandas")  # the table's writer needs it once ncu has run: imported while it runs
                rc, output = run_command(clean_parent(argv), log, env=capture.private_env(Path(private)),
                                         timeout=timeout, what=what)
                profiled = time.time() - started
        reason = ncu.unavailable_reason(output)
        if reason:
            raise _Unavailable(reason)
        if rc != 0 or not tmp_rep.is_file():
            raise EvidenceError(f"{what} failed (exit status {rc}, report "
                                f"{'written' if tmp_rep.is_file() else 'not written'}); see the log.")
        rc, export = run_command(ncu.export_command(ncu_path, tmp_rep), None, timeout=timeout,
                                 what=f"ncu export of {tmp_rep.name}")
        if rc != 0:
            raise EvidenceError(f"ncu --import of {tmp_rep.name} failed with exit status {rc}.")
        print(f"counters: ncu profile {profiled:.1f} s, export {time.time() - started - profiled:.1f} s")
        keys = [(g["op"], g["shape"]) for g in groups]
        parts = counter_table.split_raw(export, keys) if len(groups) > 1 else {keys[0]: export}
        found: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for key in keys:
            kernels = counter_table.read_raw_text(parts.get(key, ""), f"the ncu export of {key[0]} {key[1]}")
            if not kernels:
                raise EvidenceError(f"ncu profiled no kernel inside the NVTX range '{group.RANGE}' of {key[0]} {key[1]}; "
                                    "see the log.")
            by_impl = counter_table.by_implementation(kernels, passed[key])
            found[key] = []
            for impl, kernels_of in by_impl.items():
                got = counter_table.counter_rows(kernels_of, metrics, namespace, key[0], key[1], impl)
                for row in got:
                    print(f"counters: {key[0]} {key[1]} {impl}: {row['kernel'][:60]}: {row.get('duration_ns')} ns "
                          "(ncu replay)")
                found[key] += got
        os.replace(tmp_rep, rep)
    finally:
        plan_path.unlink(missing_ok=True)
        tmp_rep.unlink(missing_ok=True)
    for note in capture.keep_clean([rep, Path(log)], capture.outside_values()):
        print(f"environment: {note}")
    return found, {key: text for key, text in parts.items() if key in found}


def ceilings(*, out: str, same_size: Sequence[int], cache_mode: str, settings: Mapping[str, Any]) -> None:
    """The session's ceilings (harness.measure.ceilings), the same-size copy at each byte count."""
    with lock("ceilings", Path(out).parents[1], float(settings["gpu_lock_timeout_s"])):
        rows = ceilings_mod.measure(same_size=same_size, cache_mode=cache_mode)
    for row in rows:
        print(f"ceiling: {row['ceiling']} = {row['value']:.1f} {row['unit']}")
    write_csv(rows, derive.CEILING_COLUMNS, out)
