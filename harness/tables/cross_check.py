"""The cross-check of the nsys kernel time against the graph-replay timing of the same calls
(harness.measure.graph_replay): they agree within rtol x kernel time + atol per kernel of a call;
a disagreement is flagged in the report."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

CROSS_CHECK_COLUMNS = ["namespace", "op", "shape", "impl", "cache_mode", "kernel_time_us", "kernels_per_call",
                       "graph_median_us", "graph_min_us", "graph_max_us", "replays", "difference_us", "allowed_us",
                       "agree", "status", "reason", "idle_median_us"]

IDLE_COLUMNS = ["idle_status", "idle_median_us", "idle_slots"]
"""What the idle-start timing (harness.measure.idle_start, with cross_check.idle_starts) adds to an
implementation's row of a group's graph.csv; cross_check.csv carries its median (empty where it
was not timed)."""


def compare(kernel: Mapping[str, Any], graph: Mapping[str, Any] | None, rtol: float, atol_us_per_kernel: float,
            namespace: str, cache_mode: str) -> dict[str, Any]:
    """The cross-check of one (op, shape, impl): nsys kernel time per call against the graph
    replay's median per call. They agree when |graph - kernel| <= rtol * kernel + atol_us_per_kernel
    * kernels per call (the gaps between kernels in a replay). `agree` is None where there is no
    replay timing to compare."""
    kt = float(kernel["kernel_time_us"])
    per_call = float(kernel.get("launches_per_iteration") or kernel.get("kernels_per_call") or 1.0)
    allowed = rtol * kt + atol_us_per_kernel * per_call
    row: dict[str, Any] = {"namespace": namespace, "op": kernel["op"], "shape": kernel["shape"],
                           "impl": kernel["impl"], "cache_mode": cache_mode, "kernel_time_us": kt,
                           "kernels_per_call": per_call, "allowed_us": allowed}
    if not graph or graph.get("status") != "ok":
        row.update(graph_median_us=None, graph_min_us=None, graph_max_us=None, replays=None, difference_us=None, agree=None,
                   idle_median_us=None,
                   status=(graph or {}).get("status", "missing"), reason=(graph or {}).get("reason", "no replay timing"))
        return row
    g = float(graph["graph_median_us"])
    row.update(graph_median_us=g, graph_min_us=graph["graph_min_us"], graph_max_us=graph["graph_max_us"],
               replays=graph.get("replays"), idle_median_us=_timed(graph.get("idle_median_us")),
               difference_us=g - kt, agree=abs(g - kt) <= allowed, status="ok", reason="")
    return row


def _timed(value: Any) -> float | None:
    """A graph row's idle-start median as a number; None where it was not timed (None, or the NaN
    of an empty cell)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
