"""The measure stage's workflow steps: checks, captures, spans, counters and ceilings, each holding
the GPU lock of its measurement group.

workflow/scripts/ call these, one function per rule."""

from __future__ import annotations

import functools
import importlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from harness.errors import EvidenceError, GPUFault, ToolMissing
from harness.gpu.deadline import deadline
from harness.gpu.device import gpu_state
from harness.gpu.lock import group_gpu_lock, group_record, nvml_index
from harness.gpu.watch import Sampler, wait_until_quiet
from harness.io import write_csv, write_json, write_text
from harness.measure import ceilings as ceilings_mod
from harness.measure import counters as ncu
from harness.measure import spans
from harness.measure.capture import capture as run_capture
from harness.measure.capture import minimal_env
from harness.measure.check import crash_message, failure, passed, read_check, run_check
from harness.tables import counters as counter_table
from harness.tables import derive, nsys
from harness.tables.derive import capture_paths
from harness.tools import run_command, versions


def _preload(impls: list[str]) -> None:
    """Import what the implementations launch with before the GPU lock is taken: importing touches
    no GPU (no CUDA context exists until the first CUDA call, inside the lock), and it is most of a
    GPU job's start-up, so a job waiting for the lock (snakemake --resources gpu=2 on one GPU) has
    it done by the time the lock is free."""

    wanted = ["torch"]
    if any(i.split(".")[0] in ("cuda", "external") for i in impls):
        wanted += ["cupy", "harness.launch.cuda"]
    if any(i == "triton" for i in impls):
        wanted += ["triton"]
    for name in wanted:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # the step itself says what is missing, in one sentence


def _lock(cfg: dict[str, Any], what: str, ns_dir: str | Path | None = None, op: str | None = None,
          shape: str | None = None) -> Any:
    """The GPU lock every GPU step holds (harness.gpulock), with the configured timeout. The jobs of
    one operation and shape form one measurement group (group `gpu-<op>-<shape>` in measure.smk):
    with several GPUs visible they all measure on the GPU the group's first job chose, noted under
    `<ns_dir>/logs/gpu/`; with one GPU it is the plain lock of that GPU, and the note is kept too."""

    timeout_s = float(cfg["gpu_lock_timeout_s"])
    if ns_dir is None:
        return group_gpu_lock(what, timeout_s=timeout_s)
    record = group_record(ns_dir, op, shape)
    group = f"gpu-{op}-{shape}" if op and shape else record.stem
    return group_gpu_lock(what, record, group=group, timeout_s=timeout_s, root=Path(ns_dir) / "logs" / "gpu")


def _gpu_reader(uuid: str) -> Any:
    """The NVML reading of the GPU the step holds (NVML counts devices by its own index, whatever
    CUDA_VISIBLE_DEVICES says); device 0 where NVML does not know it, as before."""


    index = nvml_index(uuid)
    return functools.partial(gpu_state, index) if index else gpu_state


def check(cfg: dict[str, Any], op: str, shape: str, impl: str, out: str) -> None:
    """Check (op, shape, impl) and write its record, passed or not (a wrong answer stops only this
    implementation: the workflow measures the ones that passed). A GPU fault fails the job with
    one sentence; a hang is stopped by the deadline (`timeouts.check_s`)."""

    _preload([impl])
    with _lock(cfg, f"check {op} {shape} {impl}", Path(out).parents[3], op, shape) as uuid:
        with deadline(float(cfg["timeouts"]["check_s"]), f"the check of {op} {shape} {impl}"):
            try:
                record = run_check(op, shape, impl, cfg["operations"][op], cfg["seed"])
            except Exception as exc:
                message = crash_message(exc, op, shape, impl)
                if message is None:
                    raise
                raise GPUFault(message) from None
    record["gpu_uuid"] = uuid
    record["error"] = failure(record)
    print(json.dumps(record, indent=1))
    if record["error"]:
        print(record["error"])
    write_json(record, out)


def capture(cfg: dict[str, Any], op: str, shape: str, impl: str, meta: str, log: str,
            check_json: str | None = None) -> None:
    """Capture (op, shape, impl) with Nsight Systems and write its record `meta` last (the report
    and the export beside it are complete before it exists). If its check failed, nothing runs on
    the GPU: the record says 'not measured' with the check's error, and no capture exists."""


    rep, sqlite = capture_paths(meta)
    if check_json:
        record = read_check(check_json)
        if not record["passed"]:
            for stale in (rep, sqlite):  # a capture from an earlier run of a kernel that now fails
                stale.unlink(missing_ok=True)
            reason = record.get("error") or "its check failed"
            print(f"not captured: {reason}")
            write_json({"op": op, "shape": shape, "impl": impl, "measured": False, "reason": reason}, meta)
            return
    policy = cfg["gpu_state"]
    with _lock(cfg, f"capture {op} {shape} {impl}", Path(meta).parents[3], op, shape) as uuid:
        gpu_state = _gpu_reader(uuid)
        before, waited = wait_until_quiet(gpu_state, policy)
        with Sampler(gpu_state, float(policy["sample_interval_s"])) as sampler:
            info = run_capture(cfg, op, shape, impl, rep, sqlite, Path(log))
        after = gpu_state()
    for flag in sampler.flags():
        print(f"capture disturbed: {flag}")
    export = nsys.export_info(sqlite)
    info.update({"op": op, "shape": shape, "impl": impl, "measured": True, "export": export,
                 "nsys_version": export.get("nsys_version"), "versions": versions(), "host": platform.node(),
                 "gpu": {"before": before, "waited_s": waited, "during": sampler.summary(), "after": after},
                 "gpu_uuid": uuid})
    write_json(info, meta)


def span(cfg: dict[str, Any], op: str, shape: str, impls: list[str], samples_out: str, summary_out: str,
         graph_out: str | None = None, checks: list[str] | None = None) -> None:
    """Event spans (and the graph-replay cross-check) of the implementations of (op, shape) whose
    check passed; `checks` are their check records (all implementations, in `impls` order)."""


    if checks:
        skipped = [i for i, c in zip(impls, checks) if not passed(c)]
        impls = [i for i, c in zip(impls, checks) if passed(c)]
        for impl in skipped:
            print(f"span: {op} {shape} {impl} failed its check and is not timed")
    graph_rows: list[dict[str, Any]] = []
    _preload(impls)
    with _lock(cfg, f"span {op} {shape}", Path(summary_out).parents[2], op, shape):
        with deadline(float(cfg["timeouts"]["span_s"]), f"the spans of {op} {shape}"):
            rows = spans.measure(cfg, op, shape, impls, graph_rows) if impls else []
    write_csv(rows, ["op", "shape", "impl", "round", "sample", "span_us"], samples_out)
    for g in graph_rows:
        print(f"graph replay: {op} {shape} {g['impl']}: " + (f"median {g['graph_median_us']:.2f} us per call"
                                                              if g["status"] == "ok" else f"{g['status']} ({g['reason']})"))
    if graph_out:
        write_csv(graph_rows, derive.GRAPH_COLUMNS, graph_out)
    summary = spans.summarise(rows)
    for row in summary:
        row.update({"namespace": cfg["namespace"], "cache_mode": cfg["cache_mode"], "rounds": cfg["span"]["rounds"]})
        print(f"span: {op} {shape} {row['impl']}: median {row['span_median_us']:.2f} us over {row['samples']} samples")
    write_csv(summary, derive.SPAN_COLUMNS, summary_out)


def counters(cfg: dict[str, Any], op: str, shape: str, impl: str, raw_out: str, table_out: str, log: str,
             check_json: str | None = None) -> None:
    """Nsight Compute counters of every kernel of (op, shape, impl): the .ncu-rep beside `raw_out`,
    its raw CSV export in `raw_out`, and the counters table in `table_out`. Where counters cannot be
    read here (no ncu, or the driver refuses counter access) the table holds one row saying why,
    and the job succeeds: the rest of the pipeline does not depend on counters."""

    c, metrics = cfg["counters"], cfg["counters"]["metrics"]
    ident = (cfg["namespace"], op, shape, impl)

    def without_counters(reason: str, status: str = "unavailable") -> None:
        print(f"counters {status}: {reason}")
        write_csv(counter_table.unavailable_rows(reason, metrics, *ident, status=status), counter_table.columns(metrics), table_out)
        write_text("", raw_out)

    if check_json:

        record = read_check(check_json)
        if not record["passed"]:
            without_counters(f"not measured: {record.get('error') or 'its check failed'}", "not measured")
            return
    raw, table = Path(raw_out), Path(table_out)
    raw.parent.mkdir(parents=True, exist_ok=True)
    rep = raw.with_name(f"{impl}.ncu-rep")
    tmp_base = raw.with_name(f"{impl}.partial")
    tmp_rep = tmp_base.with_name(tmp_base.name + ".ncu-rep")
    tmp_rep.unlink(missing_ok=True)
    try:
        ncu_path = ncu.find_ncu(c["ncu"])
    except ToolMissing as exc:
        without_counters(str(exc))
        return
    target_cfg = json.loads(json.dumps(cfg))
    target_cfg["capture"].update(warmup=c["warmup"], iterations=c["iterations"])
    cfg_path = raw.with_name(f"{impl}.config.json")
    cfg_path.write_text(json.dumps(target_cfg, indent=1))

    argv = ncu.profile_command(ncu_path, metrics, cfg["capture"]["range"], tmp_base,
                               [sys.executable, "-m", "harness", "target", "--config", str(cfg_path),
                                "--op", op, "--shape", shape, "--impl", impl])
    with _lock(cfg, f"counters {op} {shape} {impl}", raw.parents[3], op, shape):
        rc, output = run_command(argv, log, env=minimal_env(), timeout=float(c["timeout_s"]),
                                 what=f"ncu profile of {op} {shape} {impl}")
    reason = ncu.unavailable_reason(output)
    if reason:
        without_counters(reason)
        return
    if rc != 0 or not tmp_rep.is_file():
        raise EvidenceError(f"ncu profile of {op} {shape} {impl} failed (exit status {rc}, report "
                            f"{'written' if tmp_rep.is_file() else 'not written'}); see the log.")
    rc, export = run_command(ncu.export_command(ncu_path, tmp_rep), None, timeout=float(c["timeout_s"]),
                             what=f"ncu export of {op} {shape} {impl}")
    if rc != 0:
        raise EvidenceError(f"ncu --import of {tmp_rep.name} failed with exit status {rc}.")
    write_text(export, raw)
    kernels = counter_table.read_raw_csv(raw)
    if not kernels:
        raise EvidenceError(f"ncu profiled no kernel inside the NVTX range '{cfg['capture']['range']}' of "
                            f"{op} {shape} {impl}; see the log.")
    os.replace(tmp_rep, rep)
    rows = counter_table.counter_rows(kernels, metrics, *ident)
    for row in rows:
        print(f"counters: {row['kernel'][:60]}: {row.get('duration_ns')} ns (ncu replay)")
    write_csv(rows, counter_table.columns(metrics), table)


def ceilings(cfg: dict[str, Any], out: str) -> None:

    with _lock(cfg, "ceilings", Path(out).parents[1]):
        rows = ceilings_mod.measure()
    for row in rows:
        print(f"ceiling: {row['ceiling']} = {row['value']:.1f} {row['unit']}")
    write_csv(rows, derive.CEILING_COLUMNS, out)
