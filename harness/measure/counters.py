"""Nsight Compute hardware counters per kernel: the commands that collect and export them (the
reader of the export is harness.tables.counters).

Counter values come from ncu's kernel replay: each kernel is serialised and replayed once per
metric pass, with caches flushed between passes, so `duration_ns` here is not the nsys kernel
time of the captured iterations. The tables keep the two apart.

The counters of one (operation, shape, implementation) are collected by
`ncu --clock-control none --nvtx --nvtx-include <range>/ --metrics ...` around the same harness
target the capture runs (`python -m harness target`), with the config's `counters.warmup` and
`counters.iterations`, so only the kernels of the measured calls are profiled. The report is
exported with `ncu --import R --csv --page raw`: one header row of metric names, one row of
units, then one row per profiled kernel.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.tools import find_tool

# Metrics ncu derives from the launch configuration: `ncu --query-metrics` does not list them, and
# every raw export holds them without being asked (seen on the H200 with ncu 2025.3.1), so they are
# read from the export but never passed to --metrics.
_LAUNCH_DERIVED = re.compile(r"^(launch__|sm__maximum_warps_)")

# ncu's message when the driver forbids counter access to this user.
PERMISSION_MARKERS = ("ERR_NVGPUCTRPERM", "does not have permission", "LibraryNotLoaded")



def metric_names(metrics: Mapping[str, str]) -> list[str]:
    """The distinct ncu metric names of the config's `counters.metrics`, in config order."""
    return list(dict.fromkeys(metrics.values()))


def requested_metrics(metrics: Mapping[str, str]) -> list[str]:
    """The names to pass to `ncu --metrics`: every configured metric but those ncu derives from the
    launch itself (they are in every export)."""
    return [m for m in metric_names(metrics) if not _LAUNCH_DERIVED.match(m)]


def find_ncu(configured: str | None) -> str:
    """The ncu to use: the config's `counters.ncu`, else $NCU, else ncu on PATH, else the newest
    /opt/nvidia/nsight-compute/*/ncu. ToolMissing names every place looked at."""

    return find_tool("ncu", "Nsight Compute", configured, "counters.ncu", "NCU", ("/opt/nvidia/nsight-compute/*/ncu",))


def profile_command(ncu: str, metrics: Mapping[str, str], range_name: str, report_base: str | Path,
                    target: Sequence[str]) -> list[str]:
    """The argument list (no shell) that profiles the kernels launched inside the NVTX push/pop
    range `range_name` of the `target` process. --clock-control none: the GPU's clocks are left as
    they are, never locked to base."""
    return [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", f"{range_name}/",
            "--metrics", ",".join(requested_metrics(metrics)), "--force-overwrite", "--export", str(report_base),
            *target]


def export_command(ncu: str, report: str | Path) -> list[str]:
    """The argument list that prints a report's raw page as CSV (one row per profiled kernel)."""
    return [ncu, "--import", str(report), "--csv", "--page", "raw"]


def unavailable_reason(output: str) -> str | None:
    """The one-line reason in ncu's output when counters cannot be read on this host, else None."""
    for line in output.splitlines():
        if any(marker in line for marker in PERMISSION_MARKERS):
            return line.strip().removeprefix("==ERROR==").strip()[:300]
    return None
