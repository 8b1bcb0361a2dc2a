"""One function per workflow step, with explicit arguments; workflow/scripts/ only call these.

pandas and the tables module (which loads sqlite-utils) are imported inside the steps that use
them: a GPU job starts a fresh interpreter, and half a second of imports per job adds up over a
run of a few hundred jobs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


from harness.config import parse_shape
from harness.errors import EvidenceError, GPUFault


def _write_json(obj: Any, path: str | Path) -> None:
    _write_text(json.dumps(obj, indent=1, default=str) + "\n", path)


def build(op: str, impl: str, shapes: list[str], arch: str, census_out: str, external_cfg: dict[str, Any] | None = None,
          op_cfg: dict[str, Any] | None = None) -> None:
    from harness.build import build_census

    outdir = Path(census_out).parent
    outdir.mkdir(parents=True, exist_ok=True)
    if impl == "external":
        from harness import external

        rows = external.census_rows(op, external_cfg or {}, arch, outdir, shapes=[parse_shape(s) for s in shapes])
    elif "." in impl:  # a named variant of our CUDA kernel (harness.variants)
        from harness import variants

        base, _ = variants.split(impl)
        rows = build_census(op, base, [parse_shape(s) for s in shapes], arch=arch, outdir=outdir,
                            variant=(impl, variants.compiler_options(op_cfg, impl)))
    else:
        rows = build_census(op, impl, [parse_shape(s) for s in shapes], arch=arch, outdir=outdir)
    for row in rows:
        print(f"census: {row['kernel']} [{row['specialization']}] registers={row['registers']} "
              f"spills={row['spill_stores']}/{row['spill_loads']} ld128={row['ld_global_128']} ld32={row['ld_global_32']}")
    _write_json(rows, census_out)


def _write_text(text: str, path: str | Path) -> None:
    from harness.atomic import write_text

    write_text(text, path)


def _preload(impls: list[str]) -> None:
    """Import what the implementations launch with before the GPU lock is taken: importing touches
    no GPU (no CUDA context exists until the first CUDA call, inside the lock), and it is most of a
    GPU job's start-up, so a job waiting for the lock (snakemake --resources gpu=2 on one GPU) has
    it done by the time the lock is free."""
    import importlib

    wanted = ["torch"]
    if any(i.split(".")[0] in ("cuda", "external") for i in impls):
        wanted += ["cupy", "harness.cuda_module"]
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
    from harness.gpulock import group_gpu_lock, group_record

    timeout_s = float(cfg["gpu_lock_timeout_s"])
    if ns_dir is None:
        return group_gpu_lock(what, timeout_s=timeout_s)
    record = group_record(ns_dir, op, shape)
    group = f"gpu-{op}-{shape}" if op and shape else record.stem
    return group_gpu_lock(what, record, group=group, timeout_s=timeout_s, root=Path(ns_dir) / "logs" / "gpu")


def _gpu_reader(uuid: str) -> Any:
    """The NVML reading of the GPU the step holds (NVML counts devices by its own index, whatever
    CUDA_VISIBLE_DEVICES says); device 0 where NVML does not know it, as before."""
    import functools

    from harness.gpu import gpu_state
    from harness.gpulock import nvml_index

    index = nvml_index(uuid)
    return functools.partial(gpu_state, index) if index else gpu_state


def check(cfg: dict[str, Any], op: str, shape: str, impl: str, out: str) -> None:
    """Check (op, shape, impl) and write its record, passed or not (a wrong answer stops only this
    implementation: the workflow measures the ones that passed). A GPU fault fails the job with
    one sentence; a hang is stopped by the deadline (`timeouts.check_s`)."""
    from harness.check import crash_message, failure, run_check
    from harness.watchdog import deadline

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
    _write_json(record, out)


def capture_paths(meta: str | Path) -> tuple[Path, Path]:
    """The report and SQLite export a capture record stands for: <impl>.nsys-rep and <impl>.sqlite
    beside <impl>.json."""
    meta = Path(meta)
    return meta.with_suffix(".nsys-rep"), meta.with_suffix(".sqlite")


def capture(cfg: dict[str, Any], op: str, shape: str, impl: str, meta: str, log: str,
            check_json: str | None = None) -> None:
    """Capture (op, shape, impl) with Nsight Systems and write its record `meta` last (the report
    and the export beside it are complete before it exists). If its check failed, nothing runs on
    the GPU: the record says 'not measured' with the check's error, and no capture exists."""
    import platform

    from harness import nsys
    from harness.capture import capture as run_capture
    from harness.check import read_check
    from harness.gpu_watch import Sampler, wait_until_quiet
    from harness.provenance import versions

    rep, sqlite = capture_paths(meta)
    if check_json:
        record = read_check(check_json)
        if not record["passed"]:
            for stale in (rep, sqlite):  # a capture from an earlier run of a kernel that now fails
                stale.unlink(missing_ok=True)
            reason = record.get("error") or "its check failed"
            print(f"not captured: {reason}")
            _write_json({"op": op, "shape": shape, "impl": impl, "measured": False, "reason": reason}, meta)
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
    _write_json(info, meta)


def measured(meta: str | Path) -> bool:
    """Whether a capture record stands for a capture (False: its check failed, nothing was timed)."""
    from harness.tables import measured as record_measured

    return record_measured(json.loads(Path(meta).read_text()))


def span(cfg: dict[str, Any], op: str, shape: str, impls: list[str], samples_out: str, summary_out: str,
         graph_out: str | None = None, checks: list[str] | None = None) -> None:
    """Event spans (and the graph-replay cross-check) of the implementations of (op, shape) whose
    check passed; `checks` are their check records (all implementations, in `impls` order)."""
    from harness import tables
    from harness import graph_replay, spans

    from harness.check import passed
    from harness.watchdog import deadline

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
    tables.write_csv(rows, ["op", "shape", "impl", "round", "sample", "span_us"], samples_out)
    for g in graph_rows:
        print(f"graph replay: {op} {shape} {g['impl']}: " + (f"median {g['graph_median_us']:.2f} us per call"
                                                              if g["status"] == "ok" else f"{g['status']} ({g['reason']})"))
    if graph_out:
        tables.write_csv(graph_rows, graph_replay.GRAPH_COLUMNS, graph_out)
    summary = spans.summarise(rows)
    for row in summary:
        row.update({"namespace": cfg["namespace"], "cache_mode": cfg["cache_mode"], "rounds": cfg["span"]["rounds"]})
        print(f"span: {op} {shape} {row['impl']}: median {row['span_median_us']:.2f} us over {row['samples']} samples")
    tables.write_csv(summary, tables.SPAN_COLUMNS, summary_out)


def counters(cfg: dict[str, Any], op: str, shape: str, impl: str, raw_out: str, table_out: str, log: str,
             check_json: str | None = None) -> None:
    """Nsight Compute counters of every kernel of (op, shape, impl): the .ncu-rep beside `raw_out`,
    its raw CSV export in `raw_out`, and the counters table in `table_out`. Where counters cannot be
    read here (no ncu, or the driver refuses counter access) the table holds one row saying why,
    and the job succeeds: the rest of the pipeline does not depend on counters."""
    from harness import tables
    from harness import counters as ctr
    from harness.capture import minimal_env, run_command
    from harness.errors import ToolMissing

    c, metrics = cfg["counters"], cfg["counters"]["metrics"]
    ident = (cfg["namespace"], op, shape, impl)

    def without_counters(reason: str, status: str = "unavailable") -> None:
        print(f"counters {status}: {reason}")
        tables.write_csv(ctr.unavailable_rows(reason, metrics, *ident, status=status), ctr.columns(metrics), table_out)
        _write_text("", raw_out)

    if check_json:
        from harness.check import read_check

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
        ncu = ctr.find_ncu(c["ncu"])
    except ToolMissing as exc:
        without_counters(str(exc))
        return
    target_cfg = json.loads(json.dumps(cfg))
    target_cfg["capture"].update(warmup=c["warmup"], iterations=c["iterations"])
    cfg_path = raw.with_name(f"{impl}.config.json")
    cfg_path.write_text(json.dumps(target_cfg, indent=1))
    import sys

    argv = ctr.profile_command(ncu, metrics, cfg["capture"]["range"], tmp_base,
                               [sys.executable, "-m", "harness", "target", "--config", str(cfg_path),
                                "--op", op, "--shape", shape, "--impl", impl])
    with _lock(cfg, f"counters {op} {shape} {impl}", raw.parents[3], op, shape):
        rc, output = run_command(argv, log, env=minimal_env(), timeout=float(c["timeout_s"]),
                                 what=f"ncu profile of {op} {shape} {impl}")
    reason = ctr.unavailable_reason(output)
    if reason:
        without_counters(reason)
        return
    if rc != 0 or not tmp_rep.is_file():
        raise EvidenceError(f"ncu profile of {op} {shape} {impl} failed (exit status {rc}, report "
                            f"{'written' if tmp_rep.is_file() else 'not written'}); see the log.")
    rc, export = run_command(ctr.export_command(ncu, tmp_rep), None, timeout=float(c["timeout_s"]),
                             what=f"ncu export of {op} {shape} {impl}")
    if rc != 0:
        raise EvidenceError(f"ncu --import of {tmp_rep.name} failed with exit status {rc}.")
    _write_text(export, raw)
    kernels = ctr.read_raw_csv(raw)
    if not kernels:
        raise EvidenceError(f"ncu profiled no kernel inside the NVTX range '{cfg['capture']['range']}' of "
                            f"{op} {shape} {impl}; see the log.")
    os.replace(tmp_rep, rep)
    rows = ctr.counter_rows(kernels, metrics, *ident)
    for row in rows:
        print(f"counters: {row['kernel'][:60]}: {row.get('duration_ns')} ns (ncu replay)")
    tables.write_csv(rows, ctr.columns(metrics), table)


def counters_table(cfg: dict[str, Any], parts: list[str], out: str) -> None:
    import pandas as pd
    from harness import tables
    from harness import counters as ctr

    metrics = cfg["counters"]["metrics"]
    frame = tables.read_csvs(parts) if parts else pd.DataFrame(columns=ctr.columns(metrics))
    tables.write_csv(frame.to_dict("records"), ctr.columns(metrics), out)


def kernel_time(meta: str, range_name: str, iterations: int, op: str, shape: str, impl: str, out: str) -> None:
    """Per-kernel times of one capture, from the export beside its record; an empty table (header
    only) for an implementation that failed its check and was never captured."""
    from harness import tables

    if not measured(meta):
        print(f"{op} {shape} {impl} was not measured (its check failed): no kernel time")
        tables.write_csv([], tables.KERNEL_TIME_DETAIL_COLUMNS, out)
        return
    _, sqlite = capture_paths(meta)
    if not sqlite.is_file():
        raise EvidenceError(f"the capture record {meta} has no export {sqlite.name} beside it; delete the record "
                            "and rerun, so the capture runs again.")
    rows = tables.kernel_time_detail(str(sqlite), range_name, iterations, op, shape, impl)
    tables.write_csv(rows, tables.KERNEL_TIME_DETAIL_COLUMNS, out)


def shape_table(cfg: dict[str, Any], details: list[str], span_csv: str, out: str) -> None:
    import pandas as pd
    from harness import tables
    detail = tables.read_csvs(details)
    kt = pd.DataFrame(tables.kernel_time_summary(detail, cfg["capture"]["iterations"], cfg["namespace"], cfg["cache_mode"]))
    sp = pd.read_csv(span_csv)[["op", "shape", "impl", "samples", "span_median_us", "span_mean_us", "span_std_us"]]
    merged = kt.merge(sp, on=["op", "shape", "impl"], how="left")
    tables.write_csv(merged.to_dict("records"), list(merged.columns), out)


def sweep(cfg: dict[str, Any], details: list[str], out: str, kernel_time_out: str, variants_out: str) -> None:
    """One operation's sweep: the sweep table (cuda, triton, torch and external side by side), and
    beside it every implementation's kernel time with its launch spread, variants included, and
    each variant against its base (so a variant measured by a sweep alone is retained with its
    numbers, not only in the raw per-capture tables)."""
    import pandas as pd
    from harness import tables, variants
    detail = tables.read_csvs(details)
    kt = pd.DataFrame(tables.kernel_time_summary(detail, cfg["capture"]["iterations"], cfg["namespace"], cfg["cache_mode"]))
    tables.write_csv(tables.sweep_rows(kt, cfg["namespace"], cfg["cache_mode"]), tables.SWEEP_COLUMNS, out)
    tables.write_csv(kt.to_dict("records"), tables.KERNEL_TIME_COLUMNS, kernel_time_out)
    tables.write_csv(variants.variant_rows(kt.to_dict("records"), cfg), variants.VARIANT_COLUMNS, variants_out)


def ceilings(cfg: dict[str, Any], out: str) -> None:
    from harness import tables
    from harness import ceilings as ceil

    with _lock(cfg, "ceilings", Path(out).parents[1]):
        rows = ceil.measure()
    for row in rows:
        print(f"ceiling: {row['ceiling']} = {row['value']:.1f} {row['unit']}")
    tables.write_csv(rows, tables.CEILING_COLUMNS, out)


def all_tables(cfg: dict[str, Any], details: list[str], spans: list[str], checks: list[str], ceilings_csv: str,
               outputs: dict[str, str], metas: list[str] | None = None, graphs: list[str] | None = None) -> None:
    import pandas as pd
    from harness import tables
    ns, mode, iters = cfg["namespace"], cfg["cache_mode"], cfg["capture"]["iterations"]
    detail = tables.read_csvs(details)
    tables.write_csv(detail.to_dict("records"), tables.KERNEL_TIME_DETAIL_COLUMNS, outputs["kernel_time_detail"])
    kt = pd.DataFrame(tables.kernel_time_summary(detail, iters, ns, mode, pd.read_csv(ceilings_csv),
                                                 tables.gpus_of_captures(metas or [])))
    tables.write_csv(kt.to_dict("records"), tables.KERNEL_TIME_COLUMNS, outputs["kernel_time"])
    tables.write_csv(tables.read_csvs(spans).to_dict("records"), tables.SPAN_COLUMNS, outputs["span"])
    tables.write_csv(tables.check_rows(checks, ns), tables.CHECK_COLUMNS, outputs["check"])
    tables.write_csv(tables.sweep_rows(kt, ns, mode), tables.SWEEP_COLUMNS, outputs["sweep"])
    if "variants" in outputs:
        from harness import variants

        tables.write_csv(variants.variant_rows(kt.to_dict("records"), cfg), variants.VARIANT_COLUMNS, outputs["variants"])
    if "cross_check" in outputs:
        from harness import graph_replay

        cc = cfg["cross_check"]
        replay = tables.read_csvs(graphs) if graphs else pd.DataFrame(columns=graph_replay.GRAPH_COLUMNS)
        by_key = {(r["op"], r["shape"], r["impl"]): r for r in replay.to_dict("records")}
        rows = [graph_replay.compare(k, by_key.get((k["op"], k["shape"], k["impl"])), cc["rtol"], cc["atol_us_per_kernel"], ns, mode)
                for k in kt.to_dict("records")]
        tables.write_csv(rows, graph_replay.CROSS_CHECK_COLUMNS, outputs["cross_check"])
    if "gpu_state" in outputs:
        rows = [tables.gpu_state_row(json.loads(Path(m).read_text()), ns) for m in metas or [] if measured(m)]
        tables.write_csv(rows, tables.GPU_STATE_COLUMNS, outputs["gpu_state"])


def census_table(cfg: dict[str, Any], census_files: list[str], out: str) -> None:
    from harness import tables
    rows: list[dict[str, Any]] = []
    for path in census_files:
        rows.extend({"namespace": cfg["namespace"], **r} for r in json.loads(Path(path).read_text()))
    columns = ["namespace", *[k for k in rows[0] if k != "namespace"]] if rows else ["namespace"]
    tables.write_csv(rows, columns, out)


def provenance(cfg: dict[str, Any], capture_metas: list[str], commands_file: str, out: str) -> None:
    from harness.provenance import collect

    _write_json(collect(cfg, [json.loads(Path(p).read_text()) for p in capture_metas if measured(p)], commands_file), out)


def render(cfg: dict[str, Any], inputs: dict[str, str], field_note: str, issue_comment: str, figures: list[str]) -> None:
    from harness.report import render_reports

    render_reports(cfg, inputs, field_note, issue_comment, figures)


def trust(cfg: dict[str, Any], controls_out: str, drift_out: str) -> None:
    from harness import trust as tr

    artifacts = Path(controls_out).parents[2]
    t = cfg["trust"]
    out = tr.trust_tables(artifacts, cfg["namespace"], controls_out, drift_out, t["control"], t["margin"], t["earlier"])
    for note in out["controls"]["note"]:
        print(f"control: {note}")
    print(f"drift: {out['bound']['summary']}" if out["earlier"] else "drift: no earlier namespace shares a shape on this GPU model.")
