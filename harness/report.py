"""Render the field note and the issue comment from the namespace's tables.

Every figure in a report comes from a table the pipeline wrote; this module only selects and
formats them, and the templates in report/templates/ only lay them out. Nothing is typed in.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from harness import ROOT, trust

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


def build_context(cfg: Mapping[str, Any], tables: Mapping[str, pd.DataFrame], provenance: Mapping[str, Any],
                  figures: Mapping[str, str] | None = None) -> dict[str, Any]:
    from harness.config import implementations

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
        })
    gpus = provenance.get("gpus", [])
    return {
        "namespace": cfg["namespace"], "cache_mode": cfg["cache_mode"], "capture": cfg["capture"],
        "span_cfg": cfg["span"], "operations": operations, "provenance": provenance,
        "gpu_name": ", ".join(g["name"] for g in gpus) or "unknown GPU",
        "impl_label": IMPL_LABEL, "ceilings": _records(ceilings),
        "gpu_quiet": gpu_quiet(tables.get("gpu_state")),
        "trust": trust.report_context(tables.get("controls"), tables.get("drift")),
    }


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
    disturbed = state[state["disturbed"].astype(str).str.lower() == "true"]
    return {
        "captures": len(state), "utilization": span_of("before_utilization_pct"), "power": span_of("before_power_w"),
        "sm_clock": span_of("before_sm_clock_mhz"), "processes": span_of("before_compute_processes"),
        "waited_max_s": float(pd.to_numeric(state["waited_s"], errors="coerce").fillna(0).max()),
        "disturbed": _records(disturbed[["op", "shape", "impl", "flags"]]),
    }


def load_tables(inputs: Mapping[str, str]) -> dict[str, pd.DataFrame]:
    names = ("kernel_time", "kernel_time_detail", "span", "check", "sweep", "census", "ceilings", "controls", "drift",
             "gpu_state")
    return {n: pd.read_csv(inputs[n]) for n in names if n in inputs}


def _write(text: str, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)


def render_reports(cfg: Mapping[str, Any], inputs: Mapping[str, str], field_note: str | Path, issue_comment: str | Path,
                   figures: list[str] | None = None) -> None:
    """Render both reports; with `figures` (one SVG path per operation, named '<op>_sweep.svg'),
    draw each operation's sweep figure from the sweep table and link it from the field note."""
    provenance = json.loads(Path(inputs["provenance"]).read_text())
    loaded = load_tables(inputs)
    links: dict[str, str] = {}
    for path in figures or []:
        from harness.figures import sweep_figure

        op = Path(path).name.removesuffix("_sweep.svg")
        sweep_figure(loaded["sweep"][loaded["sweep"]["op"] == op], op, Path(path), cache_mode=str(cfg["cache_mode"]))
        links[op] = os.path.relpath(path, Path(field_note).parent)
    ctx = build_context(cfg, loaded, provenance, links)
    env = _env()
    _write(env.get_template("field_note.md.j2").render(**ctx), field_note)
    _write(env.get_template("issue_comment.md.j2").render(**ctx), issue_comment)
