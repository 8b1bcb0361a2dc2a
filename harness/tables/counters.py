"""The counters table: ncu's raw CSV export (`ncu --import R --csv --page raw`: one header row of
metric names, one row of units, then one row per profiled kernel) read into rows of base units,
and the summaries and comparisons the report prints.

Counter values come from ncu's kernel replay (each kernel serialised and replayed once per metric
pass, caches flushed between passes), so `duration_ns` here is not the nsys kernel time; the
tables keep the two apart.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import EvidenceError
from harness.io import read_csvs, row_dicts, write_csv

COUNTER_COLUMNS_FIXED = ["namespace", "op", "shape", "impl", "status", "reason", "kernel_index", "kernel",
                         "grid", "block", "source"]
"""Columns of the counters table before the metric columns (config order). `source` is always
'ncu kernel replay' so no reader mistakes a counter duration for an nsys kernel time."""

SOURCE = "ncu kernel replay"

_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}


def to_base(value: str, unit: str) -> float | None:
    """A raw-page value in base units: bytes, nanoseconds, bytes per second; other units (%,
    inst, block, register/thread, ...) unchanged. '4,096' is 4096; '' and 'n/a' are None."""
    text = value.strip().replace(",", "")
    if text in ("", "n/a", "N/A", "nan"):
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    unit = unit.strip()
    m = re.fullmatch(r"([KMGTP]?)byte(?:/[a-z]+)?", unit)  # Mbyte, Tbyte/s, Kbyte/block
    if m:
        return number * _PREFIX[m.group(1)]
    return number * _TIME.get(unit, 1.0)


def read_raw_csv(path: str | Path) -> list[dict[str, Any]]:
    """The kernels of an `ncu --import R --csv --page raw` export: one dict per kernel with 'ID',
    'Kernel Name', 'Grid Size', 'Block Size' as text and every metric column in base units.
    EvidenceError (one sentence) for a file that is not such an export."""
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise EvidenceError(f"cannot read the ncu export {path}: {exc.strerror}.") from None
    return read_raw_text(text, str(path))


def read_raw_text(text: str, path: str) -> list[dict[str, Any]]:
    """`read_raw_csv` of the export's text; `path` names it in a sentence."""
    lines = [line for line in text.splitlines() if not line.startswith("==")]  # ncu's own messages
    rows = list(csv.reader(lines))
    if not rows or "Kernel Name" not in rows[0] or "ID" not in rows[0]:
        raise EvidenceError(f"{path} is not an ncu raw CSV export (no 'ID' and 'Kernel Name' header); "
                            "make it with `ncu --import REPORT --csv --page raw`.")
    header = rows[0]
    if len(rows) < 2 or len(rows[1]) != len(header):
        raise EvidenceError(f"{path} has no units row under its header; it is truncated or not an ncu raw export.")
    units = rows[1]
    text_columns = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                    "Block Size", "Grid Size", "Device", "CC"}
    kernels = []
    for number, row in enumerate(rows[2:], start=3):
        if len(row) != len(header):
            raise EvidenceError(f"{path} line {number} has {len(row)} fields where the header has {len(header)}; "
                                "the export is truncated or corrupt.")
        record: dict[str, Any] = {}
        for name, unit, value in zip(header, units, row):
            if name in text_columns or not re.fullmatch(r"[a-z0-9_]+__[a-z0-9_.]+", name):
                record[name] = value
            else:
                record[name] = to_base(value, unit)
        kernels.append(record)
    return kernels


PUSH_POP_COLUMN = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
"""The raw export's column holding the NVTX push/pop ranges open over each kernel's launch."""

ROUND_RANGE = re.compile(r"capture/(?:([^/:\"\s]+)/([^/:\"\s]+)/)?([^/:\"\s]+)/(\d+)")
"""A round range 'capture/<op>/<shape>/<impl>/<round>' (or, before sessions, 'capture/<impl>/<round>')."""


def split_raw(text: str, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """A session's raw export split by group: for each (op, shape) of `keys` that has kernels, the
    header and units rows and the rows of the kernels launched inside one of its round ranges (the
    innermost named in the push/pop column). A kernel of no group's range is left out of every
    part (its group's attribution then says so, as for a group alone)."""
    lines = [line for line in text.splitlines() if not line.startswith("==")]
    rows = list(csv.reader(lines))
    if len(rows) < 2 or PUSH_POP_COLUMN not in rows[0]:
        return {}
    at = rows[0].index(PUSH_POP_COLUMN)
    parts: dict[tuple[str, str], list[list[str]]] = {}
    for row in rows[2:]:
        found = ROUND_RANGE.findall(row[at]) if len(row) > at else []
        key = (found[-1][0], found[-1][1]) if found else None
        if key is not None and key in keys:
            parts.setdefault(key, []).append(row)
    out = {}
    for key, kept in parts.items():
        buffer = io.StringIO()
        csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows([rows[0], rows[1], *kept])
        out[key] = buffer.getvalue()
    return out


def by_implementation(kernels: list[dict[str, Any]], impls: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The profiled kernels of one group process split by implementation: each kernel belongs to
    the implementation whose range 'capture/<impl>/<round>' was open over its launch (the
    innermost, the last named in the push/pop column). EvidenceError (one sentence) where a kernel
    names no such range or an implementation that was not asked for."""
    out: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
    for kernel in kernels:
        found = ROUND_RANGE.findall(str(kernel.get(PUSH_POP_COLUMN, "")))
        if not found:
            raise EvidenceError(f"ncu's export names no range capture/<impl>/<round> for kernel {kernel.get('ID')} "
                                f"({str(kernel.get('Kernel Name', ''))[:60]}); it cannot be attributed to an implementation.")
        impl = found[-1][2]
        if impl not in out:
            raise EvidenceError(f"ncu's export attributes kernel {kernel.get('ID')} to {impl!r}, which this group did not profile.")
        out[impl].append(kernel)
    return out


def counter_rows(kernels: list[dict[str, Any]], metrics: Mapping[str, str], namespace: str, op: str, shape: str,
                 impl: str) -> list[dict[str, Any]]:
    """Rows of the counters table for one (op, shape, impl): one per profiled kernel, the metric
    columns named as in the config. A configured metric missing from the export is empty."""
    rows = []
    for index, k in enumerate(kernels):
        row: dict[str, Any] = {"namespace": namespace, "op": op, "shape": shape, "impl": impl, "status": "ok",
                               "reason": "", "kernel_index": index, "kernel": k.get("Kernel Name", ""),
                               "grid": k.get("Grid Size", ""), "block": k.get("Block Size", ""), "source": SOURCE}
        for column, metric in metrics.items():
            row[column] = k.get(metric)
        rows.append(row)
    return rows


def unavailable_rows(reason: str, metrics: Mapping[str, str], namespace: str, op: str, shape: str,
                     impl: str, status: str = "unavailable") -> list[dict[str, Any]]:
    """The one row that records counters were not read for (op, shape, impl), and why: `status`
    'unavailable' (not on this host) or 'not measured' (the check failed)."""
    row: dict[str, Any] = {"namespace": namespace, "op": op, "shape": shape, "impl": impl, "status": status,
                           "reason": reason, "kernel_index": None, "kernel": "", "grid": "", "block": "",
                           "source": SOURCE}
    row.update({column: None for column in metrics})
    return [row]


def columns(metrics: Mapping[str, str]) -> list[str]:
    return [*COUNTER_COLUMNS_FIXED, *metrics]


def write_table(parts: Sequence[str], metrics: Mapping[str, str], out: str | Path) -> None:
    """The counters_table rule's step: the groups' counters tables at `parts`, one after another,
    into `out` (the header alone for none)."""
    frame = read_csvs(parts)
    write_csv(row_dicts(frame) if parts else [], columns(metrics), out)


# ----------------------------------------------------------------------------- report summaries

_SUMMED = ("duration_ns", "dram_bytes", "instructions")
"""Columns that add up over the kernels of one call; the rest are averaged weighted by duration."""

_LIMITS = {"occupancy_limit_registers": "registers", "occupancy_limit_shared_mem": "shared memory",
           "occupancy_limit_blocks": "blocks per SM", "occupancy_limit_warps": "warps per SM"}

COMPARED = (
    # (column, label, kind): kind 'points' compares percentages by difference, 'ratio' by quotient
    ("duration_ns", "duration (ncu replay)", "ratio"),
    ("achieved_occupancy_pct", "achieved occupancy %", "points"),
    ("theoretical_occupancy_pct", "theoretical occupancy %", "points"),
    ("dram_bytes_per_s", "DRAM throughput", "ratio"),
    ("dram_bytes", "DRAM bytes", "ratio"),
    ("l1_hit_rate_pct", "L1 hit rate %", "points"),
    ("l2_hit_rate_pct", "L2 hit rate %", "points"),
    ("instructions", "instructions executed", "ratio"),
    ("registers_per_thread", "registers per thread", "ratio"),
)

DIFFER_POINTS = 5.0
"""Percentages that differ by more than this many points are called different."""
DIFFER_RATIO = 0.10
"""Other counters that differ by more than this fraction are called different."""


def limiter(row: Mapping[str, Any]) -> str:
    """What bounds theoretical occupancy: the occupancy_limit_* with the fewest blocks per SM
    (ties named together), or '' where the export has none."""
    limits: dict[str, Any] = {label: row.get(col) for col, label in _LIMITS.items() if _number(row.get(col)) is not None}
    if not limits:
        return ""
    low = min(float(v) for v in limits.values())
    return " = ".join(label for label, v in limits.items() if float(v) == low)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number  # NaN is no number


def summarise(rows: Sequence[Mapping[str, Any]], calls: int = 1) -> dict[str, Any]:
    """One call's counters from the kernels' rows of `calls` profiled calls (all of one op, shape,
    impl): durations, DRAM bytes and instructions summed and divided by `calls`; rates,
    percentages and per-kernel figures weighted by each kernel's duration; the stall columns
    (stall_*) likewise; the occupancy limiter of the longest kernel."""
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        return {"status": rows[0].get("status") if rows else "missing", "reason": rows[0].get("reason") if rows else ""}
    weights = [(_number(r.get("duration_ns")) or 0.0) for r in ok]
    if not sum(weights):
        weights = [1.0] * len(ok)
    out: dict[str, Any] = {"status": "ok", "reason": "", "kernels": len(ok) / calls}
    columns = [c for c in ok[0] if c not in COUNTER_COLUMNS_FIXED]
    for col in columns:
        values = [_number(r.get(col)) for r in ok]
        if all(v is None for v in values):
            out[col] = None
        elif col in _SUMMED:
            out[col] = sum(v or 0.0 for v in values) / calls
        else:
            pairs = [(v, w) for v, w in zip(values, weights) if v is not None]
            out[col] = sum(v * w for v, w in pairs) / (sum(w for _, w in pairs) or 1.0)
    if out.get("dram_bytes") is not None and out.get("duration_ns"):
        out["dram_bytes_per_s"] = out["dram_bytes"] / (out["duration_ns"] * 1e-9)
    longest = max(ok, key=lambda r: _number(r.get("duration_ns")) or 0.0)
    out["limiter"] = limiter(longest)
    out["kernel"] = longest.get("kernel", "")
    stalls = sorted(((c.removeprefix("stall_").replace("_", " "), out[c]) for c in columns
                     if c.startswith("stall_") and out.get(c) is not None), key=lambda p: -p[1])
    out["top_stalls"] = stalls[:3]
    return out


def compare(ours: Mapping[str, Any], control: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Counter by counter, ours against the control: both values, the difference (points for
    percentages, a ratio for the rest) and whether it is beyond DIFFER_POINTS / DIFFER_RATIO."""
    out = []
    for col, label, kind in COMPARED:
        a, b = _number(ours.get(col)), _number(control.get(col))
        if a is None or b is None:
            continue
        delta: float | None
        if kind == "points":
            delta = a - b
            differs = abs(delta) > DIFFER_POINTS
        else:
            delta = a / b if b else None
            differs = delta is None or abs(delta - 1.0) > DIFFER_RATIO
        out.append({"column": col, "label": label, "kind": kind, "ours": a, "control": b, "delta": delta,
                    "differs": differs, "ours_text": display(col, a), "control_text": display(col, b)})
    return out


def display(column: str, value: float) -> str:
    """A counter in the unit a reader expects: µs, GB/s, MB, millions of instructions, %."""
    if column == "duration_ns":
        return f"{value / 1e3:.2f} µs"
    if column == "dram_bytes_per_s":
        return f"{value / 1e9:.0f} GB/s"
    if column == "dram_bytes":
        return f"{value / 1e6:.1f} MB"
    if column == "instructions":
        return f"{value / 1e6:.2f} M"
    if column.endswith("_pct"):
        return f"{value:.1f}%"
    return f"{value:g}"
