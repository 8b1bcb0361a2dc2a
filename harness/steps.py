"""One function per workflow step, with explicit arguments; workflow/scripts/ only call these."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from harness import tables
from harness.config import parse_shape


def _write_json(obj: Any, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def build(op: str, impl: str, shapes: list[str], arch: str, census_out: str, external_cfg: dict[str, Any] | None = None) -> None:
    from harness.build import build_census

    outdir = Path(census_out).parent
    outdir.mkdir(parents=True, exist_ok=True)
    if impl == "external":
        from harness import external

        rows = external.census_rows(op, external_cfg or {}, arch, outdir, shapes=[parse_shape(s) for s in shapes])
    else:
        rows = build_census(op, impl, [parse_shape(s) for s in shapes], arch=arch, outdir=outdir)
    for row in rows:
        print(f"census: {row['kernel']} [{row['specialization']}] registers={row['registers']} "
              f"spills={row['spill_stores']}/{row['spill_loads']} ld128={row['ld_global_128']} ld32={row['ld_global_32']}")
    _write_json(rows, census_out)


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
    from harness.check import require_pass, run_check

    with _lock(cfg, f"check {op} {shape} {impl}", Path(out).parents[3], op, shape) as uuid:
        record = run_check(op, shape, impl, cfg["operations"][op], cfg["seed"])
    record["gpu_uuid"] = uuid
    print(json.dumps(record, indent=1))
    require_pass(record)  # raises before the output exists: a failed check leaves no file
    _write_json(record, out)


def capture(cfg: dict[str, Any], op: str, shape: str, impl: str, rep: str, sqlite: str, meta: str, log: str) -> None:
    from harness import nsys
    from harness.capture import capture as run_capture

    from harness.gpu_watch import Sampler, wait_until_quiet

    policy = cfg["gpu_state"]
    with _lock(cfg, f"capture {op} {shape} {impl}", Path(meta).parents[3], op, shape) as uuid:
        gpu_state = _gpu_reader(uuid)
        before, waited = wait_until_quiet(gpu_state, policy)
        with Sampler(gpu_state, float(policy["sample_interval_s"])) as sampler:
            info = run_capture(cfg, op, shape, impl, Path(rep), Path(sqlite), Path(log))
        after = gpu_state()
    for flag in sampler.flags():
        print(f"capture disturbed: {flag}")
    export = nsys.export_info(sqlite)
    info.update({"op": op, "shape": shape, "impl": impl, "export": export, "nsys_version": export.get("nsys_version"),
                 "gpu": {"before": before, "waited_s": waited, "during": sampler.summary(), "after": after},
                 "gpu_uuid": uuid})
    _write_json(info, meta)


def span(cfg: dict[str, Any], op: str, shape: str, impls: list[str], samples_out: str, summary_out: str) -> None:
    from harness import spans

    with _lock(cfg, f"span {op} {shape}", Path(summary_out).parents[2], op, shape):
        rows = spans.measure(cfg, op, shape, impls)
    tables.write_csv(rows, ["op", "shape", "impl", "round", "sample", "span_us"], samples_out)
    summary = spans.summarise(rows)
    for row in summary:
        row.update({"namespace": cfg["namespace"], "cache_mode": cfg["cache_mode"], "rounds": cfg["span"]["rounds"]})
        print(f"span: {op} {shape} {row['impl']}: median {row['span_median_us']:.2f} us over {row['samples']} samples")
    tables.write_csv(summary, tables.SPAN_COLUMNS, summary_out)


def kernel_time(sqlite: str, range_name: str, iterations: int, op: str, shape: str, impl: str, out: str) -> None:
    rows = tables.kernel_time_detail(sqlite, range_name, iterations, op, shape, impl)
    tables.write_csv(rows, tables.KERNEL_TIME_DETAIL_COLUMNS, out)


def shape_table(cfg: dict[str, Any], details: list[str], span_csv: str, out: str) -> None:
    detail = tables.read_csvs(details)
    kt = pd.DataFrame(tables.kernel_time_summary(detail, cfg["capture"]["iterations"], cfg["namespace"], cfg["cache_mode"]))
    sp = pd.read_csv(span_csv)[["op", "shape", "impl", "samples", "span_median_us", "span_mean_us", "span_std_us"]]
    merged = kt.merge(sp, on=["op", "shape", "impl"], how="left")
    tables.write_csv(merged.to_dict("records"), list(merged.columns), out)


def sweep(cfg: dict[str, Any], details: list[str], out: str) -> None:
    detail = tables.read_csvs(details)
    kt = pd.DataFrame(tables.kernel_time_summary(detail, cfg["capture"]["iterations"], cfg["namespace"], cfg["cache_mode"]))
    tables.write_csv(tables.sweep_rows(kt, cfg["namespace"], cfg["cache_mode"]), tables.SWEEP_COLUMNS, out)


def ceilings(cfg: dict[str, Any], out: str) -> None:
    from harness import ceilings as ceil

    with _lock(cfg, "ceilings", Path(out).parents[1]):
        rows = ceil.measure()
    for row in rows:
        print(f"ceiling: {row['ceiling']} = {row['value']:.1f} {row['unit']}")
    tables.write_csv(rows, tables.CEILING_COLUMNS, out)


def all_tables(cfg: dict[str, Any], details: list[str], spans: list[str], checks: list[str], ceilings_csv: str,
               outputs: dict[str, str], metas: list[str] | None = None) -> None:
    ns, mode, iters = cfg["namespace"], cfg["cache_mode"], cfg["capture"]["iterations"]
    detail = tables.read_csvs(details)
    tables.write_csv(detail.to_dict("records"), tables.KERNEL_TIME_DETAIL_COLUMNS, outputs["kernel_time_detail"])
    kt = pd.DataFrame(tables.kernel_time_summary(detail, iters, ns, mode, pd.read_csv(ceilings_csv)))
    tables.write_csv(kt.to_dict("records"), tables.KERNEL_TIME_COLUMNS, outputs["kernel_time"])
    tables.write_csv(tables.read_csvs(spans).to_dict("records"), tables.SPAN_COLUMNS, outputs["span"])
    tables.write_csv(tables.check_rows(checks, ns), tables.CHECK_COLUMNS, outputs["check"])
    tables.write_csv(tables.sweep_rows(kt, ns, mode), tables.SWEEP_COLUMNS, outputs["sweep"])
    if "gpu_state" in outputs:
        rows = [tables.gpu_state_row(json.loads(Path(m).read_text()), ns) for m in metas or []]
        tables.write_csv(rows, tables.GPU_STATE_COLUMNS, outputs["gpu_state"])


def census_table(cfg: dict[str, Any], census_files: list[str], out: str) -> None:
    rows: list[dict[str, Any]] = []
    for path in census_files:
        rows.extend({"namespace": cfg["namespace"], **r} for r in json.loads(Path(path).read_text()))
    columns = ["namespace", *[k for k in rows[0] if k != "namespace"]] if rows else ["namespace"]
    tables.write_csv(rows, columns, out)


def provenance(cfg: dict[str, Any], capture_metas: list[str], commands_file: str, out: str) -> None:
    from harness.provenance import collect

    _write_json(collect(cfg, [json.loads(Path(p).read_text()) for p in capture_metas], commands_file), out)


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
