"""Render the field note and the issue comment from the namespace's tables.

Every figure in a report comes from a table the pipeline wrote; this module only selects and
formats them, and the templates in report/templates/ only lay them out. Nothing is typed in.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from harness import ROOT
from harness.config import implementations
from harness.io import write_text
from harness.report.figures import sweep_figure
from harness.tables import counters as ctr
from harness.tables import history, trust, variants

TEMPLATES = ROOT / "report" / "templates"
IMPL_ORDER = ["cuda", "triton", "torch", "external"]
IMPL_LABEL = {"cuda": "cuda (ours, CUDA C++)", "triton": "triton (ours, Triton)", "torch": "torch (library)",
              "external": "external (PTX/cubin from another toolchain)"}


def md(value: Any) -> str:
    """Text safe inside a markdown table cell: no pipe, backtick, HTML or line break survives."""
    text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")
    text = text.replace("<", "&lt;").replace(">", "&gt;").replace("\r", " ").replace("\n", " ")
    return text


def num(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{float(value):,.{digits}f}"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["md"] = md
    env.filters["num"] = num
    return env


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if (isinstance(v, float) and math.isnan(v)) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]


def _impl_sorted(frame: pd.DataFrame) -> pd.DataFrame:
    order = {impl: i for i, impl in enumerate(IMPL_ORDER)}
    return frame.assign(_o=frame["impl"].map(order)).sort_values(["_o"], kind="stable").drop(columns="_o")


def gpu_label(gpus: list[Mapping[str, Any]]) -> str:
    """'NVIDIA H200', or 'NVIDIA H200 (2 GPUs)' for a namespace whose jobs ran on two of them."""
    model = history.gpu_model(gpus)
    if model is None:
        return "unknown GPU"
    uuids = {str(g.get("uuid")) for g in gpus}
    return f"{model} ({len(uuids)} GPUs)" if len(uuids) > 1 else model


def build_context(cfg: Mapping[str, Any], tables: Mapping[str, pd.DataFrame], provenance: Mapping[str, Any],
                  figures: Mapping[str, str] | None = None) -> dict[str, Any]:

    kt, span, check, sweep, census, detail = (tables[k] for k in ("kernel_time", "span", "check", "sweep", "census", "kernel_time_detail"))
    ceilings = tables.get("ceilings", pd.DataFrame())
    operations = []
    for op, spec in cfg["operations"].items():
        impls = [i for i in IMPL_ORDER if i in implementations(cfg, op)]
        shapes = [s for s in [spec["default"], *spec["sweep"]]]
        shapes = list(dict.fromkeys(shapes))
        op_kt = kt[kt["op"] == op]
        op_sweep = sweep[sweep["op"] == op].set_index("shape").reindex(shapes).reset_index()
        default = spec["default"]
        d_kt = op_kt[op_kt["shape"] == default].set_index("impl")
        d_span = span[(span["op"] == op) & (span["shape"] == default)].set_index("impl")
        headline = []
        for impl in [i for i in IMPL_ORDER if i in d_kt.index]:
            headline.append({"impl": impl, "label": IMPL_LABEL[impl],
                             "kernel_us": d_kt.loc[impl, "kernel_time_us"],
                             "span_median_us": d_span.loc[impl, "span_median_us"] if impl in d_span.index else None,
                             "span_std_us": d_span.loc[impl, "span_std_us"] if impl in d_span.index else None,
                             "samples": d_span.loc[impl, "samples"] if impl in d_span.index else None})
        ratios = op_sweep.dropna(subset=["cuda_over_triton"]) if "cuda_over_triton" in op_sweep else op_sweep.iloc[0:0]
        claim = None
        if not ratios.empty:
            d = ratios[ratios["shape"] == default]
            best = ratios.loc[ratios["cuda_over_triton"].idxmin()]
            worst = ratios.loc[ratios["cuda_over_triton"].idxmax()]
            claim = {
                "default": d.iloc[0].to_dict() if not d.empty else None,
                "best": best.to_dict(), "worst": worst.to_dict(),
                "faster_everywhere": bool((ratios["cuda_over_triton"] < 1).all()),
                "slower_everywhere": bool((ratios["cuda_over_triton"] > 1).all()),
                "shapes": len(ratios),
                "verdicts": ({v: int((ratios["cuda_vs_triton"] == v).sum()) for v in ("faster", "slower", "no difference")}
                             if "cuda_vs_triton" in ratios else None),
            }
        op_detail = _impl_sorted(detail[detail["op"] == op])
        op_detail = op_detail.assign(_s=op_detail["shape"].map({s: i for i, s in enumerate(shapes)})).sort_values(["_s"], kind="stable")
        op_span = _impl_sorted(span[span["op"] == op])
        op_span = op_span.assign(_s=op_span["shape"].map({s: i for i, s in enumerate(shapes)})).sort_values(["_s"], kind="stable")
        op_check = _impl_sorted(check[check["op"] == op])
        op_check = op_check.assign(_s=op_check["shape"].map({s: i for i, s in enumerate(shapes)})).sort_values(["_s"], kind="stable")
        op_kt = _impl_sorted(op_kt)
        op_kt = op_kt.assign(_s=op_kt["shape"].map({s: i for i, s in enumerate(shapes)})).sort_values(["_s"], kind="stable")
        operations.append({
            "name": op, "default": default, "shapes": shapes, "headline": headline, "claim": claim,
            "impls": impls, "rates": _records(op_kt), "figure": (figures or {}).get(op),
            "memory_bound": bool((op_sweep["flops"].fillna(0) == 0).all()) if "flops" in op_sweep else False,
            "sweep": _records(op_sweep), "kernel_detail": _records(op_detail), "span": _records(op_span),
            "check": _records(op_check), "census": _records(census[census["op"] == op]) if "op" in census else [],
            "all_checks_passed": bool(op_check["passed"].all()) if len(op_check) else False,
            "counters": counters_context(tables.get("counters"), op, default,
                                         impls + [i for i in implementations(cfg, op) if i not in impls],
                                         cfg.get("trust", {}).get("control", "triton"), cfg.get("counters", {})),
        })
        operations[-1]["load"] = load_flags(tables.get("gpu_state"), tables.get("controls"), op)
        _attach_measured(operations[-1])
        d_gpus = d_kt["gpu_uuid"].dropna().unique() if "gpu_uuid" in d_kt else []
        operations[-1]["default_split"] = len(d_gpus) > 1  # its figures are not put side by side
        operations[-1]["default_gpus"] = sorted(str(u) for u in d_gpus)
    gpus = provenance.get("gpus", [])
    return {
        "namespace": cfg["namespace"], "cache_mode": cfg["cache_mode"], "capture": cfg["capture"],
        "span_cfg": cfg["span"], "operations": operations, "provenance": provenance,
        "gpu_name": gpu_label(gpus),
        "impl_label": IMPL_LABEL, "ceilings": _records(ceilings),
        "gpu_quiet": gpu_quiet(tables.get("gpu_state")),
        "cross_check": cross_check_context(tables.get("cross_check"), cfg.get("cross_check", {})),
        "variants": variants_context(tables.get("variants")),
        "gpu_groups": gpu_groups(kt),
        "trust": trust.report_context(tables.get("controls"), tables.get("drift")),
        "spans_shared": spans_shared_cpu(cfg, provenance),
    }


def counters_context(frame: pd.DataFrame | None, op: str, shape: str, impls: list[str], control: str,
                     counters_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The counters of one operation at its default shape for the report: one summary per
    implementation (harness.counters.summarise), and ours (cuda) compared with the control on each
    counter. `state` says why there are none: 'off' (config), 'unavailable' (with the reason),
    'missing' (no table)."""

    if not counters_cfg.get("enabled"):
        return {"state": "off"}
    if frame is None or frame.empty:
        return {"state": "missing"}
    here = frame[(frame["op"] == op) & (frame["shape"] == shape)]
    if here.empty:
        return {"state": "missing"}
    calls = int(counters_cfg.get("iterations", 1))
    summaries = []
    for impl in impls:
        rows = here[here["impl"] == impl].to_dict("records")
        if rows:
            summaries.append({"impl": impl, **ctr.summarise(rows, calls)})
    by_impl = {r["impl"]: r for r in summaries}
    unavailable = [r for r in summaries if r["status"] == "unavailable"]
    if unavailable and len(unavailable) == len(summaries):
        return {"state": "unavailable", "reason": unavailable[0]["reason"]}
    against = control if control != "cuda" else "triton"
    comparison = None
    if by_impl.get("cuda", {}).get("status") == "ok" and by_impl.get(against, {}).get("status") == "ok":
        rows = ctr.compare(by_impl["cuda"], by_impl[against])
        comparison = {"against": against, "rows": rows, "differ": [r for r in rows if r["differs"]],
                      "same": [r for r in rows if not r["differs"]]}
    return {"state": "ok", "shape": shape, "impls": summaries, "comparison": comparison,
            "differ_points": ctr.DIFFER_POINTS, "differ_ratio": ctr.DIFFER_RATIO}


def _attach_measured(op: dict[str, Any]) -> None:
    """Give each census row serving the default shape the counters measured there (achieved
    occupancy, DRAM throughput, L2 hit rate), so compiler and measured columns sit side by side."""
    counters = op.get("counters", {})
    measured = {r["impl"]: r for r in counters.get("impls", []) if r.get("status") == "ok"}
    for row in op["census"]:
        served = [s.strip() for s in str(row.get("shapes", "")).replace(",", ";").split(";")]
        m = measured.get(row.get("impl")) if op["default"] in served else None
        row["measured"] = ({"achieved_occupancy_pct": m.get("achieved_occupancy_pct"),
                            "dram_gbps": (m["dram_bytes_per_s"] / 1e9) if m.get("dram_bytes_per_s") is not None else None,
                            "l2_hit_rate_pct": m.get("l2_hit_rate_pct")} if m else None)


def gpu_groups(kt: pd.DataFrame) -> dict[str, Any] | None:
    """Which GPUs measured the namespace, and every (op, shape) group whose captures came from more
    than one (their ratios are left out of every table); None where the table records no GPU."""
    if "gpu_uuid" not in kt or kt["gpu_uuid"].dropna().empty:
        return None
    known = kt.dropna(subset=["gpu_uuid"])
    split = [{"op": op, "shape": shape, "gpus": sorted(str(u) for u in grp["gpu_uuid"].unique())}
             for (op, shape), grp in known.groupby(["op", "shape"], sort=False) if grp["gpu_uuid"].nunique() > 1]
    return {"uuids": sorted(str(u) for u in known["gpu_uuid"].unique()), "split": split}


def variants_context(frame: pd.DataFrame | None) -> dict[str, Any] | None:
    """The variants measured in this run against their bases (tables/variants.csv), and which were
    not kept (harness.variants.outcomes)."""

    if frame is None or frame.empty:
        return None
    rows = _records(frame)
    outcomes = variants.outcomes(rows)
    return {"rows": rows, "outcomes": outcomes, "not_kept": [o for o in outcomes if o["outcome"] == "not kept"],
            "candidates": [o for o in outcomes if o["outcome"] == "candidate"]}


def cross_check_context(frame: pd.DataFrame | None, cc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The cross-check rows, those that disagree and those not compared (with the reason)."""
    if frame is None:
        return None
    rows = _records(frame)
    compared = [r for r in rows if r.get("status") == "ok"]
    return {"rows": rows if cc.get("enabled", True) else [], "compared": len(compared),
            "disagree": [r for r in compared if str(r.get("agree")).lower() != "true"],
            "skipped": [r for r in rows if r.get("status") != "ok"],
            "replays": cc.get("replays"), "max_seconds": cc.get("max_seconds", 1.0), "rtol": cc.get("rtol", 0.1), "atol_us_per_kernel": cc.get("atol_us_per_kernel", 0)}


def _flagged(frame: pd.DataFrame, column: str) -> pd.Series:
    """Rows whose boolean column is true (the CSVs hold it as True/False or true/false)."""
    return frame[column].astype(str).str.lower() == "true"


def gpu_quiet(state: pd.DataFrame | None) -> dict[str, Any] | None:
    """The GPU's state before the captures, in ranges ('quiet GPU at 0% / 76-110 W'), and the
    captures marked as disturbed, from gpu_state.csv; None where the table is absent or empty."""
    if state is None or state.empty:
        return None
    def span_of(col: str) -> str:
        vals = pd.to_numeric(state[col], errors="coerce").dropna()
        if vals.empty:
            return "n/a"
        lo, hi = vals.min(), vals.max()
        return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"
    disturbed = state[_flagged(state, "disturbed")]
    return {
        "captures": len(state), "utilization": span_of("before_utilization_pct"), "power": span_of("before_power_w"),
        "sm_clock": span_of("before_sm_clock_mhz"), "processes": span_of("before_compute_processes"),
        "waited_max_s": float(pd.to_numeric(state["waited_s"], errors="coerce").fillna(0).max()),
        "disturbed": _records(disturbed[["op", "shape", "impl", "flags"]]),
    }


def load_flags(state: pd.DataFrame | None, controls: pd.DataFrame | None, op: str) -> dict[str, Any]:
    """What says an operation's captures were not taken on a quiet GPU: its captures that NVML saw
    disturbed (gpu_state.csv: another compute process or a slowing throttle reason during the
    capture) and the shapes whose control came back above its band (controls.csv). Both are put at
    the operation's claim and in the issue comment, not only in the method section."""
    disturbed: list[dict[str, Any]] = []
    if state is not None and not state.empty and "disturbed" in state:
        rows = state[(state["op"] == op) & _flagged(state, "disturbed")]
        disturbed = _records(rows[["shape", "impl", "flags"]])
    under_load: list[dict[str, Any]] = []
    if controls is not None and not controls.empty and "under_load" in controls:
        rows = controls[(controls["op"] == op) & _flagged(controls, "under_load")]
        under_load = _records(rows[["shape", "control", "kernel_time_us", "band_lo_us", "band_hi_us"]])
    captures = int((state["op"] == op).sum()) if state is not None and not state.empty else 0
    return {"disturbed": disturbed, "under_load": under_load, "captures": captures,
            "any": bool(disturbed or under_load)}


def spans_shared_cpu(cfg: Mapping[str, Any], provenance: Mapping[str, Any]) -> dict[str, int] | None:
    """Whether the run's event spans may have shared the CPU with other jobs: the spans were not
    exclusive (`span.exclusive` false, or a configuration from before the key existed) and a
    command of the run allowed more than one job at once (`--cores N`, `--resources gpu=K`).
    Returns the largest N and K seen, or None. A span times the launch path on the CPU: on the
    H200 such spans came out up to 1.56x longer (h200-ops-1 against h200-ops-solo-1)."""

    if (cfg.get("span") or {}).get("exclusive", False):
        return None
    cores = gpus = 1
    for command in provenance.get("commands") or []:
        text = str(command)
        for m in re.finditer(r"(?:--cores|-c|-j|--jobs)[ =](\d+)", text):
            cores = max(cores, int(m.group(1)))
        for m in re.finditer(r"\bgpu=(\d+)", text):
            gpus = max(gpus, int(m.group(1)))
    return {"cores": cores, "gpu_jobs": gpus} if cores > 1 or gpus > 1 else None


TABLES = ("kernel_time", "kernel_time_detail", "span", "check", "sweep", "census", "ceilings", "controls", "drift",
          "gpu_state", "counters", "cross_check", "variants")
"""Every table a report is rendered from (tables/<name>.csv)."""


def table_inputs(ns_dir: str | Path) -> dict[str, str]:
    """The render's inputs from a namespace folder: each of TABLES it has, and its provenance."""
    tdir = Path(ns_dir) / "tables"
    inputs = {t: str(tdir / f"{t}.csv") for t in TABLES if (tdir / f"{t}.csv").is_file()}
    inputs["provenance"] = str(Path(ns_dir) / "provenance.json")
    return inputs


def load_tables(inputs: Mapping[str, str]) -> dict[str, pd.DataFrame]:
    return {n: pd.read_csv(inputs[n]) for n in TABLES if n in inputs}


def _write(text: str, path: str | Path) -> None:

    write_text(text, path)


def render_reports(cfg: Mapping[str, Any], inputs: Mapping[str, str], field_note: str | Path, issue_comment: str | Path,
                   figures: list[str] | None = None) -> None:
    """Render both reports; with `figures` (one SVG path per operation, named '<op>_sweep.svg'),
    draw each operation's sweep figure from the sweep table and link it from the field note."""
    provenance = json.loads(Path(inputs["provenance"]).read_text())
    loaded = load_tables(inputs)
    links: dict[str, str] = {}
    for path in figures or []:

        op = Path(path).name.removesuffix("_sweep.svg")
        sweep_figure(loaded["sweep"][loaded["sweep"]["op"] == op], op, Path(path), cache_mode=str(cfg["cache_mode"]))
        links[op] = os.path.relpath(path, Path(field_note).parent)
    ctx = build_context(cfg, loaded, provenance, links)
    env = _env()
    _write(env.get_template("field_note.md.j2").render(**ctx), field_note)
    _write(env.get_template("issue_comment.md.j2").render(**ctx), issue_comment)
