"""Figures of the report: one SVG per operation's shape sweep.

`sweep_figure` draws, side by side, each implementation's kernel time per shape (grouped bars, log
axis) and each implementation's time relative to a control implementation (a line at 1.0). The
SVG is reproducible byte for byte for the same table: fixed hash salt, no date, text as text.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.errors import EvidenceError

IMPLS = ("cuda", "triton", "torch", "external")
"""Implementations in drawing order; each is a column '<impl>_us' of the sweep table."""

COLORS = {"cuda": "#1f77b4", "triton": "#ff7f0e", "torch": "#2ca02c", "external": "#9467bd"}

HASH_SALT = "kernel-evidence"
"""Fixed salt for the SVG element ids, so that the same figure gives the same bytes."""


def implementations(table: Any) -> list[str]:
    """Implementations with at least one finite time in the table, in IMPLS order."""
    import pandas as pd

    found = []
    for impl in IMPLS:
        column = f"{impl}_us"
        if column in table and pd.to_numeric(table[column], errors="coerce").notna().any():
            found.append(impl)
    return found


def _times(table: Any, impl: str) -> list[float]:
    """An implementation's kernel times (µs) per row, NaN where absent."""
    import pandas as pd

    if f"{impl}_us" not in table:
        return [math.nan] * len(table)
    return [float(v) for v in pd.to_numeric(table[f"{impl}_us"], errors="coerce")]


def sweep_figure(sweep: Any, op: str, out_svg: Path | str, control: str = "triton",
                 cache_mode: str = "hot") -> None:
    """One SVG for one operation: left, kernel time per implementation per shape (log µs);
    right, each implementation's kernel time over the control's, per shape, with a line at 1.0.
    Shapes are in table order; implementations without any time are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = sweep[sweep["op"] == op].reset_index(drop=True)
    if table.empty:
        raise EvidenceError(f"The sweep table has no rows for operation {op!r}.")
    impls = implementations(table)
    if not impls:
        raise EvidenceError(f"The sweep table has no kernel times for operation {op!r}.")
    shapes = [str(s) for s in table["shape"]]
    with plt.rc_context({"svg.hashsalt": HASH_SALT, "svg.fonttype": "none",
                         "font.family": "DejaVu Sans"}):
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
        try:
            _time_panel(left, table, shapes, impls, op, cache_mode)
            _ratio_panel(right, table, shapes, impls, control, op, cache_mode)
            fig.tight_layout()
            out = Path(out_svg)
            out.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(out, format="svg", metadata={"Date": None})
        finally:
            plt.close(fig)


def _bar_offsets(count: int, width: float) -> list[float]:
    return [(i - (count - 1) / 2) * width for i in range(count)]


def _time_panel(ax: Any, table: Any, shapes: list[str], impls: list[str], op: str,
                cache_mode: str) -> None:
    width = 0.8 / len(impls)
    for impl, offset in zip(impls, _bar_offsets(len(impls), width), strict=True):
        times = _times(table, impl)
        xs = [i + offset for i, t in enumerate(times) if math.isfinite(t) and t > 0]
        ys = [t for t in times if math.isfinite(t) and t > 0]
        ax.bar(xs, ys, width=width, label=impl, color=COLORS[impl])
    ax.set_yscale("log")
    ax.set_xticks(range(len(shapes)), shapes, rotation=30, ha="right")
    ax.set_ylabel("kernel time (µs, log scale)")
    ax.set_xlabel("shape")
    ax.set_title(f"{op}: kernel time (Nsight Systems), {cache_mode} cache")
    ax.legend(title="implementation")
    ax.grid(axis="y", which="both", alpha=0.3)


def _ratio_panel(ax: Any, table: Any, shapes: list[str], impls: list[str], control: str, op: str,
                 cache_mode: str) -> None:
    base = _times(table, control)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label=f"{control} (= 1.0)")
    others = [i for i in impls if i != control]
    width = 0.8 / max(len(others), 1)
    for impl, offset in zip(others, _bar_offsets(len(others), width), strict=True):
        ratios = [t / b if math.isfinite(t) and math.isfinite(b) and b > 0 else math.nan
                  for t, b in zip(_times(table, impl), base, strict=True)]
        xs = [i + offset for i, r in enumerate(ratios) if math.isfinite(r)]
        ax.bar(xs, [r for r in ratios if math.isfinite(r)], width=width, label=impl,
               color=COLORS[impl])
    if not any(math.isfinite(b) and b > 0 for b in base):
        ax.text(0.5, 0.5, f"no {control} times to compare against", transform=ax.transAxes,
                ha="center", va="center")
    ax.set_xticks(range(len(shapes)), shapes, rotation=30, ha="right")
    ax.set_xlim(-0.6, len(shapes) - 0.4)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(f"kernel time / {control} kernel time (< 1: faster)")
    ax.set_xlabel("shape")
    ax.set_title(f"{op}: time / {control} time (Nsight Systems), {cache_mode} cache")
    ax.legend(title="implementation")
    ax.grid(axis="y", alpha=0.3)
