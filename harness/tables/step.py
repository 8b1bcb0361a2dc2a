"""The tables stage's workflow steps: per-capture kernel times, the shape and sweep tables, the
namespace tables, the counters table, and the controls and drift.

workflow/scripts/ call these, one function per rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from harness.errors import EvidenceError
from harness.io import read_csvs, write_csv
from harness.tables import counters, cross_check, derive, trust, variants
from harness.tables.derive import GRAPH_COLUMNS


def kernel_time(meta: str, range_name: str, iterations: int, op: str, shape: str, impl: str, out: str) -> None:
    """Per-kernel times of one capture, from the export beside its record; an empty table (header
    only) for an implementation that failed its check and was never captured."""

    if not derive.measured_file(meta):
        print(f"{op} {shape} {impl} was not measured (its check failed): no kernel time")
        write_csv([], derive.KERNEL_TIME_DETAIL_COLUMNS, out)
        return
    _, sqlite = derive.capture_paths(meta)
    if not sqlite.is_file():
        raise EvidenceError(f"the capture record {meta} has no export {sqlite.name} beside it; delete the record "
                            "and rerun, so the capture runs again.")
    rows = derive.kernel_time_detail(str(sqlite), range_name, iterations, op, shape, impl)
    write_csv(rows, derive.KERNEL_TIME_DETAIL_COLUMNS, out)


def shape_table(cfg: dict[str, Any], details: list[str], span_csv: str, out: str) -> None:
    detail = read_csvs(details)
    kt = pd.DataFrame(derive.kernel_time_summary(detail, cfg["capture"]["iterations"], cfg["namespace"], cfg["cache_mode"]))
    sp = pd.read_csv(span_csv)[["op", "shape", "impl", "samples", "span_median_us", "span_mean_us", "span_std_us"]]
    merged = kt.merge(sp, on=["op", "shape", "impl"], how="left")
    write_csv(merged.to_dict("records"), list(merged.columns), out)


def sweep(cfg: dict[str, Any], details: list[str], out: str, kernel_time_out: str, variants_out: str) -> None:
    """One operation's sweep: the sweep table (cuda, triton, torch and external side by side), and
    beside it every implementation's kernel time with its launch spread, variants included, and
    each variant against its base (so a variant measured by a sweep alone is retained with its
    numbers, not only in the raw per-capture tables)."""
    detail = read_csvs(details)
    kt = pd.DataFrame(derive.kernel_time_summary(detail, cfg["capture"]["iterations"], cfg["namespace"], cfg["cache_mode"]))
    write_csv(derive.sweep_rows(kt, cfg["namespace"], cfg["cache_mode"]), derive.SWEEP_COLUMNS, out)
    write_csv(kt.to_dict("records"), derive.KERNEL_TIME_COLUMNS, kernel_time_out)
    write_csv(variants.variant_rows(kt.to_dict("records"), cfg), variants.VARIANT_COLUMNS, variants_out)


def all_tables(cfg: dict[str, Any], details: list[str], spans: list[str], checks: list[str], ceilings_csv: str,
               outputs: dict[str, str], metas: list[str] | None = None, graphs: list[str] | None = None) -> None:
    ns, mode, iters = cfg["namespace"], cfg["cache_mode"], cfg["capture"]["iterations"]
    detail = read_csvs(details)
    write_csv(detail.to_dict("records"), derive.KERNEL_TIME_DETAIL_COLUMNS, outputs["kernel_time_detail"])
    kt = pd.DataFrame(derive.kernel_time_summary(detail, iters, ns, mode, pd.read_csv(ceilings_csv),
                                                 derive.gpus_of_captures(metas or [])))
    write_csv(kt.to_dict("records"), derive.KERNEL_TIME_COLUMNS, outputs["kernel_time"])
    write_csv(read_csvs(spans).to_dict("records"), derive.SPAN_COLUMNS, outputs["span"])
    write_csv(derive.check_rows(checks, ns), derive.CHECK_COLUMNS, outputs["check"])
    write_csv(derive.sweep_rows(kt, ns, mode), derive.SWEEP_COLUMNS, outputs["sweep"])
    if "variants" in outputs:
        write_csv(variants.variant_rows(kt.to_dict("records"), cfg), variants.VARIANT_COLUMNS, outputs["variants"])
    if "cross_check" in outputs:
        cc = cfg["cross_check"]
        replay = read_csvs(graphs) if graphs else pd.DataFrame(columns=GRAPH_COLUMNS)
        by_key = {(r["op"], r["shape"], r["impl"]): r for r in replay.to_dict("records")}
        rows = [cross_check.compare(k, by_key.get((k["op"], k["shape"], k["impl"])), cc["rtol"], cc["atol_us_per_kernel"], ns, mode)
                for k in kt.to_dict("records")]
        write_csv(rows, cross_check.CROSS_CHECK_COLUMNS, outputs["cross_check"])
    if "gpu_state" in outputs:
        rows = [derive.gpu_state_row(json.loads(Path(m).read_text()), ns) for m in metas or [] if derive.measured_file(m)]
        write_csv(rows, derive.GPU_STATE_COLUMNS, outputs["gpu_state"])


def counters_table(cfg: dict[str, Any], parts: list[str], out: str) -> None:
    metrics = cfg["counters"]["metrics"]
    frame = read_csvs(parts) if parts else pd.DataFrame(columns=counters.columns(metrics))
    write_csv(frame.to_dict("records"), counters.columns(metrics), out)


def controls_and_drift(cfg: dict[str, Any], controls_out: str, drift_out: str) -> None:
    artifacts = Path(controls_out).parents[2]
    t = cfg["trust"]
    out = trust.trust_tables(artifacts, cfg["namespace"], controls_out, drift_out, t["control"], t["margin"], t["earlier"])
    for note in out["controls"]["note"]:
        print(f"control: {note}")
    print(f"drift: {out['bound']['summary']}" if out["earlier"] else "drift: no earlier namespace shares a shape on this GPU model.")
