"""The flags a report must not hide, and what a report may say where a check raised none.

Each check (`CHECKS`) reads one of a namespace's tables and holds both its flags (one-line
sentences, each starting with what it is) and its clean clause ("no control above its band"), so a
new kind of flag cannot be added without the words a report uses when it was not raised. `review`
runs them all: the flags, and the clean clauses of the checks that could have failed (their table
has rows) and did not. A check whose table is absent or empty said nothing, so a report says
nothing for it either (counters off, no earlier namespace to bound drift against, a table written
before the check's column existed).

The report adds its own checks beside these (the cross-check against graph replay, the known
answers of the resolution check: harness.report.render), the same way: a flag, or a clean clause.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import pandas as pd

from harness.io import row_dicts
from harness.tables import history
from harness.tables.bands import ABOVE
from harness.tables.drift import drift_bound
from harness.tables.phrases import _and, _clause, _flag_text, _float, _number_word, _sentence, _span, _truthy, _us

Source: TypeAlias = str | Path | pd.DataFrame | None
"""A table as a path to its CSV, a DataFrame, or None where the namespace has none."""


def table(src: Source) -> pd.DataFrame | None:
    if isinstance(src, pd.DataFrame):
        return src
    return history.read_table(src) if src and Path(src).is_file() else None


def _captures(rows: list[tuple[str, str, str]]) -> str:
    """'layernorm 4096x768 cuda, triton and torch; softmax 4096x1024 cuda' (grouped by op and shape)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for op, shape, impl in rows:
        groups.setdefault((op, shape), []).append(impl)
    return "; ".join(f"{op} {shape} {_and(impls)}" for (op, shape), impls in groups.items())


def _controls_above(ctl: pd.DataFrame) -> list[str]:
    """'Control above its band: ...' for every control above its band or under load (controls.csv)."""
    out: list[str] = []
    for r in row_dicts(ctl):
        status = str(r.get("status") or "")
        legacy = status == "outside" and str(r.get("side") or "") == "above"
        if status not in ABOVE and not legacy:
            continue
        v, lo, hi = _float(r.get("kernel_time_us")), _float(r.get("band_lo_us")), _float(r.get("band_hi_us"))
        band = f"its band of {_span(lo, hi)}" if lo is not None and hi is not None else "its band"
        if status == "under load":
            why = f"under load: {_clause(r.get('nvml_flags')) or 'NVML flagged the captures there'}"
        elif status == "above" and str(r.get("nvml") or "") == "quiet":
            why = "NVML saw nothing, so the capture is suspect"
        elif status == "above":
            why = "NVML recorded nothing, so the capture is suspect"
        else:
            why = "a verdict from before NVML was read beside the band"
        got = f" came back at {_us(v)}" if v is not None else " came back"
        out.append(_sentence(f"Control above its band: {r.get('control')} at {r['op']} {r['shape']}{got} against "
                             f"{band} ({why}); no ranking follows from its pairings there"))
    return out


def _counters_missing(cnt: pd.DataFrame) -> list[str]:
    """'Counters <status>: ...' for the counters.csv rows whose status is not ok, grouped by reason."""
    out: list[str] = []
    bad = cnt[cnt["status"].fillna("").astype(str) != "ok"]
    groups: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for r in row_dicts(bad):
        reason = _clause(r.get("reason")) or "no reason recorded"
        status = _clause(r.get("status")) or "missing"
        groups.setdefault((status, reason), []).append((str(r["op"]), str(r["shape"]), str(r["impl"])))
    for (status, reason), rows in groups.items():
        everything = len(rows) == len(cnt)
        which = f"all {len(rows)} captures" if everything and len(rows) > 1 else _captures(rows)
        out.append(_sentence(f"Counters {status}: {which} ({reason})"))
    return out


def _two_gpus(kt: pd.DataFrame) -> list[str]:
    """'Measured on two GPUs: ...' for an (op, shape) whose captures (kernel_time.csv) have more than one gpu_uuid."""
    out: list[str] = []
    known = kt[kt["gpu_uuid"].notna()]
    for (op, shape), grp in known.groupby(["op", "shape"], sort=False):
        uuids = list(dict.fromkeys(str(u) for u in grp["gpu_uuid"]))
        if len(uuids) < 2:
            continue
        ran = [f"{_and(grp[grp['gpu_uuid'].astype(str) == u]['impl'].astype(str).tolist())} on {u}" for u in uuids]
        out.append(_sentence(f"Measured on {_number_word(len(uuids))} GPUs: {op} {shape} ran {_and(ran)}, so a ratio "
                             f"between captures on different GPUs compares {_number_word(len(uuids))} devices"))
    return out


def _failed_checks(chk: pd.DataFrame) -> list[str]:
    """'Check failed: ...' for every check.csv row that did not pass, with its error or its errors against the tolerance."""
    out: list[str] = []
    for r in row_dicts(chk[~chk["passed"].map(_truthy)]):
        detail = _clause(r.get("error"))
        if not detail:
            bits = [f"{label} {_float(r.get(col)):.3g}" for col, label in
                    (("max_abs_err", "max abs error"), ("max_rel_err", "max rel error"), ("atol", "atol"), ("rtol", "rtol"))
                    if _float(r.get(col)) is not None]
            detail = ", ".join(bits) or "no detail recorded"
        out.append(_sentence(f"Check failed: {r['op']} {r['shape']} {r['impl']} ({detail})"))
    return out


def _disturbed(state: pd.DataFrame) -> list[str]:
    """'Disturbed capture: ...' for every (op, shape) whose captures NVML flagged (gpu_state.csv)."""
    out: list[str] = []
    hit = state[state["disturbed"].map(_truthy)]
    for (op, shape), grp in hit.groupby(["op", "shape"], sort=False):
        impls = grp["impl"].astype(str).tolist()
        text = _flag_text(grp["flags"].tolist() if "flags" in grp else [])
        out.append(_sentence(f"Disturbed capture: {op} {shape} {_and(impls)}: {text}"))
    return out


def _drift_unbounded(dft: pd.DataFrame) -> list[str]:
    """'Drift not bounded: ...' where drift.csv has rows but none that bounds drift."""
    bound = drift_bound(dft)
    return [_sentence(f"Drift not bounded: {bound['summary']}")] if bound["count"] == 0 else []


@dataclass(frozen=True)
class Check:
    """One check of a namespace's tables: the table it reads, the flags it raises from it, and the
    clause a report says where it ran (its table has rows and the column) and raised none."""

    table: str
    column: str | None
    """The column it reads (a table without it is not checked); None where it reads the table whole."""
    raise_flags: Callable[[pd.DataFrame], list[str]]
    clean: str


CHECKS = (
    Check("controls", "status", _controls_above, "no control above its band"),
    Check("counters", "status", _counters_missing, "no counters missing"),
    Check("kernel_time", "gpu_uuid", _two_gpus, "no group measured on two GPUs"),
    Check("check", "passed", _failed_checks, "no failed check"),
    Check("gpu_state", "disturbed", _disturbed, "no disturbed capture"),
    Check("drift", None, _drift_unbounded, "drift bounded by our unchanged kernels"),
)
"""Every check of the trust tables, in the order a report lists its flags and clean clauses."""


@dataclass(frozen=True)
class Review:
    flags: list[str]
    """The flags of every check, in the order of CHECKS."""
    clean: list[str]
    """The clean clause of every check that ran and raised no flag, in the order of CHECKS."""


def review(controls: Source = None, drift: Source = None, counters: Source = None, check: Source = None,
           kernel_time: Source = None, gpu_state: Source = None) -> Review:
    """Every check of CHECKS on the namespace's tables (paths or DataFrames; any may be absent)."""
    tables = {"controls": controls, "drift": drift, "counters": counters, "check": check,
              "kernel_time": kernel_time, "gpu_state": gpu_state}
    flags_out: list[str] = []
    clean: list[str] = []
    for c in CHECKS:
        frame = table(tables[c.table])
        if frame is None or frame.empty or (c.column is not None and c.column not in frame):
            continue
        raised = c.raise_flags(frame)
        flags_out += raised
        if not raised:
            clean.append(c.clean)
    return Review(flags_out, clean)


def flags(controls: Source = None, drift: Source = None, counters: Source = None, check: Source = None,
          kernel_time: Source = None, gpu_state: Source = None) -> list[str]:
    """One-line sentences a report must print rather than hide, from the namespace's tables (paths
    or DataFrames; any may be absent), in this order, each starting with what it is:
    'Control above its band: ...' (controls.csv), 'Counters unavailable: ...' (counters.csv rows
    whose status is not ok, with their reason), 'Measured on two GPUs: ...' (kernel_time.csv: an
    (op, shape) whose captures have more than one gpu_uuid), 'Check failed: ...' (check.csv),
    'Disturbed capture: ...' (gpu_state.csv), 'Drift not bounded: ...' (drift.csv with rows but
    none that bounds drift)."""
    return review(controls, drift, counters, check, kernel_time, gpu_state).flags
