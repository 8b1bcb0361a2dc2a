"""How far a namespace's numbers can be trusted: control bands, drift between namespaces, and the
flags a report must not hide. The rules, and why they are these, are in docs/trust.md.

* **Same-session controls with a known band.** One implementation (the control, `triton` by default)
  is captured in every session. Its band per (op, shape) is the min-max of its kernel time over
  every earlier namespace whose captures there NVML did not flag (same GPU model, cache mode and
  control kernel), widened by a margin. A namespace without an NVML record there is unknown, not
  quiet: it enters the band, which names it (`unrecorded`), unless it lies so far above the
  median of the band's sessions that it reads as load. The band is a function of that set only: the order in
  which namespaces were captured or listed never changes it, and no namespace is left out for where
  its control fell against another band. Every namespace left out is listed with its reason.
* **A control is judged by its band and by NVML.** Above its band while NVML saw nothing: `above`
  (a suspect capture). Above its band while NVML flagged the captures at that shape: `under load`.
  Either way no ranking follows from its pairings there; ours (`cuda`) is compared with its own
  earlier range to say whether the slowdown hit the control's capture or the whole operation.
* **Drift bounded by our kernels that did not change.** Between two namespaces, only our kernels
  (neither the control nor a library baseline) whose census (source hash, compiler, options,
  kernel and specialization serving that shape) is the same in both, and whose captures are clean,
  bound the drift. The control's own move is reported beside it, judged against its band.
* **Library baselines are never compared across sessions.** `torch` is not ours and may change with
  the driver and library version between sessions; its rows are listed, never used as a bound.

Inputs are the retained tables (`artifacts/<ns>/tables/*.csv`, `provenance.json`) or the history
index (harness.tables.history); outputs are DataFrames, and `trust_tables` writes them as
`tables/controls.csv` and `tables/drift.csv` of the current namespace, so a report quotes a table.
Every sentence produced here is complete and ends with exactly one period.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import sqlite_utils
import yaml

from harness import ROOT
from harness.errors import ConfigError, EvidenceError
from harness.io import write_csv
from harness.tables import history

def _schema_margin() -> float:
    with open(ROOT / "workflow" / "schemas" / "config.schema.yaml") as fh:
        return float(yaml.safe_load(fh)["properties"]["trust"]["properties"]["margin"]["default"])


MARGIN = _schema_margin()
"""The control band's margin where none is given: the config schema's `trust.margin` default, the
one place it is written."""

OUTLIER_MADS = 3.0
"""How far above the median of a band's sessions (in scaled median absolute deviations, and at least
twice the margin) a session without an NVML record may lie before it is taken for load and set
aside; sessions NVML saw quiet are never set aside for where they fell."""

LIBRARY_IMPLS = ("torch",)
"""Library baselines: never compared across namespaces."""

OURS = "cuda"
"""Our implementation whose own earlier range says whether a slowdown hit the whole operation."""

LIBRARY_REASON = "the library is not ours and may change with the driver and library version between sessions"
LIBRARY_NOTE = f"{LIBRARY_REASON}, so library baselines are never compared across namespaces"

BAND_COLUMNS = ["op", "shape", "control", "observed_min_us", "observed_max_us", "band_lo_us", "band_hi_us", "margin",
                "n_namespaces", "namespaces", "unrecorded", "min_namespace", "max_namespace", "set_aside"]
CONTROL_COLUMNS = ["op", "shape", "control", "kernel_time_us", "band_lo_us", "band_hi_us", "observed_min_us",
                   "observed_max_us", "margin", "n_namespaces", "namespaces", "unrecorded", "set_aside", "status", "under_load",
                   "rankable", "suspect", "nvml", "nvml_flags", "ours", "ours_us", "ours_lo_us", "ours_hi_us",
                   "ours_namespaces", "ours_position", "split_gpus", "note", "claim_note"]
DRIFT_COLUMNS = ["earlier", "current", "op", "shape", "impl", "before_us", "after_us", "change_pct",
                 "unchanged_kernel", "role", "reason", "band_status", "note"]
IDENTITY_COLUMNS = ["kernel", "specialization", "source_sha256", "compiler", "options"]

STATUSES = ("inside", "below", "above", "under load", "establishing", "missing")
"""Control statuses. `above`: above its band while NVML saw nothing (or recorded nothing) at that
shape, a suspect capture; `under load`: above its band while NVML flagged the captures there."""
ABOVE = ("above", "under load")
ROLES = ("bound", "control", "library", "changed", "excluded")
"""Drift row roles: `bound` (ours, same census, clean captures: these bound the drift), `control`
(judged against its band, never a bound), `library` (never compared), `changed` (our kernel's census
changed), `excluded` (ours, but a capture is not clean, or a figure or census is missing)."""


# --------------------------------------------------------------------------------------------
# Sentences and small helpers


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value) and not _missing(value)


def _clause(text: Any) -> str:
    """Text from a table (an ncu reason, an error, an NVML flag) made fit to sit inside a
    sentence: one line, no trailing period."""
    out = re.sub(r"\s+", " ", "" if _missing(text) else str(text)).strip()
    return out.rstrip(". ").strip()


def _sentence(text: str) -> str:
    """One sentence: one line, exactly one final period (a sentence may open with an
    implementation's name, which keeps its case: `cuda's layernorm ...`)."""
    out = re.sub(r"\s+", " ", text).strip().rstrip(". ").strip()
    out = re.sub(r"\.{2,}", ".", out)
    return out + "." if out else ""


def _us(value: float) -> str:
    return f"{value:.2f} µs"


def _span(lo: float, hi: float) -> str:
    return f"{lo:.2f}-{hi:.2f} µs"


def _pct(value: float) -> str:
    return f"{value:+.1f}%"


def _and(items: Iterable[str]) -> str:
    items = [i for i in items if i]
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _count(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def _number_word(n: int) -> str:
    return {2: "two", 3: "three", 4: "four"}.get(n, str(n))


_PIDS = re.compile(r"\s*\([^()]*pids seen[^()]*\)")


def _flag_text(flags: Iterable[Any]) -> str:
    """NVML flags of several captures, each said once (the pid detail differs from capture to capture)."""
    seen: list[str] = []
    for text in flags:
        if _missing(text):
            continue
        for part in _PIDS.sub("", str(text)).split("; "):
            part = _clause(part)
            if part and part not in seen:
                seen.append(part)
    return "; ".join(seen) or "flagged disturbed"


def and_(items: Iterable[str]) -> str:
    """'a', 'a and b', 'a, b and c' (empty items dropped)."""
    return _and(items)


def flag_clause(text: Any) -> str:
    """NVML's flags of a table cell made fit to sit inside a sentence ('' where there are none)."""
    return "" if _missing(text) or not str(text).strip() else _flag_text([text])


def _float(value: Any) -> float | None:
    if _missing(value):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


# --------------------------------------------------------------------------------------------
# Loading retained namespaces


@dataclass
class Retained:
    """One retained namespace as the trust rules see it."""

    namespace: str
    kernel_time: pd.DataFrame
    census: pd.DataFrame | None = None
    gpu: str | None = None
    gpu_state: pd.DataFrame | None = None
    """Its gpu_state.csv (NVML around each capture: `disturbed`, `flags`); None where it has none."""
    date: str | None = None
    """Provenance date (ISO), only to list namespaces in a fixed order."""
    _state: dict[tuple[str, str, str], tuple[bool, str]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        state = self.gpu_state
        if state is None or state.empty or not {"op", "shape", "impl"} <= set(state.columns):
            return
        for rec in state.to_dict("records"):
            key = (str(rec["op"]), str(rec["shape"]), str(rec["impl"]))
            flagged = _truthy(rec.get("disturbed"))
            samples = _float(rec.get("during_samples")) if "during_samples" in rec else 1.0
            if not flagged and not samples:
                continue  # NVML could not be read during this capture: unknown, never quiet
            text = "" if _missing(rec.get("flags")) else str(rec.get("flags"))
            old = self._state.get(key, (False, ""))
            self._state[key] = (old[0] or flagged, "; ".join(t for t in (old[1], text) if t))

    @property
    def disturbed(self) -> bool:
        """True where NVML saw another process or a slowing throttle reason during any capture
        (gpu_state.csv); such a namespace is never the one drift is bounded against."""
        return any(flagged for flagged, _ in self._state.values())

    def watched(self, op: str, shape: str, impl: str) -> bool:
        """NVML recorded this capture (gpu_state.csv has its row, with NVML samples during it or a
        flag); a row with no samples is no record: what NVML would have seen is unknown."""
        return (op, shape, impl) in self._state

    def capture_flagged(self, op: str, shape: str, impl: str) -> bool:
        return self._state.get((op, shape, impl), (False, ""))[0]

    def capture_flags(self, op: str, shape: str, impl: str) -> str:
        return self._state.get((op, shape, impl), (False, ""))[1]

    def group_flags(self, op: str, shape: str) -> dict[str, str]:
        """{impl: NVML flags} of the captures NVML flagged disturbed at (op, shape)."""
        return {k[2]: v[1] for k, v in self._state.items() if k[0] == op and k[1] == shape and v[0]}

    def order_key(self) -> tuple[str, str]:
        return (self.date or "", self.namespace)


def _read(path: Path) -> pd.DataFrame | None:
    return history.read_table(path) if path.is_file() else None


def _empty_kt() -> pd.DataFrame:
    return pd.DataFrame(columns=["op", "shape", "impl", "kernel_time_us"])


def load_namespace(ns_dir: str | Path) -> Retained:
    """A namespace folder's kernel time, census, GPU model, NVML record (gpu_state.csv) and date."""
    ns_dir = Path(ns_dir)
    tables = ns_dir / "tables"
    kt = _read(tables / "kernel_time.csv")
    prov = history.read_provenance(ns_dir)
    when = history.provenance_date(prov)
    return Retained(namespace=ns_dir.name, kernel_time=kt if kt is not None else _empty_kt(),
                    census=_read(tables / "census.csv"), gpu=history.gpu_model(prov.get("gpus") or []),
                    gpu_state=_read(tables / "gpu_state.csv"), date=when.isoformat() if when else None)


def _from_index(db: sqlite_utils.Database) -> list[Retained]:
    nss = history.table_frame(db, "namespaces")
    kt, census, state = (history.table_frame(db, t) for t in ("kernel_time", "census", "gpu_state"))
    out = []
    for row in nss.sort_values("position").itertuples() if not nss.empty else []:
        name = row.name

        def part(frame: pd.DataFrame, name: str = name) -> pd.DataFrame | None:
            if "namespace" not in frame:
                return None
            got = frame[frame["namespace"] == name].reset_index(drop=True)
            return got if len(got) else None

        k = part(kt)
        out.append(Retained(namespace=name, kernel_time=k if k is not None else _empty_kt(), census=part(census),
                            gpu=row.gpu_name if isinstance(row.gpu_name, str) else None, gpu_state=part(state),
                            date=row.date_utc if isinstance(row.date_utc, str) else None))
    return out


def retained(history_like: Any) -> list[Retained]:
    """Normalise a history: an artifacts folder, a history index (path to the .sqlite or an open
    Database), or an iterable of Retained or tuples (namespace, kernel_time[, census[, gpu[,
    gpu_state[, date]]]])."""
    if isinstance(history_like, sqlite_utils.Database):
        return _from_index(history_like)
    if isinstance(history_like, (str, Path)):
        path = Path(history_like)
        if path.is_dir():
            return [load_namespace(path / name) for name in history.namespaces_in_order(path)]
        if path.is_file():
            return _from_index(history.open_index(path))
        raise EvidenceError(f"trust: {path} is neither an artifacts folder nor a history index.")
    return [item if isinstance(item, Retained) else Retained(*item) for item in history_like]


def _cache_mode(ns: Retained) -> str | None:
    kt = ns.kernel_time
    if kt is None or kt.empty or "cache_mode" not in kt:
        return None
    modes = kt["cache_mode"].dropna().astype(str).unique()
    return modes[0] if len(modes) == 1 else None


# --------------------------------------------------------------------------------------------
# Kernel identity from the census


def kernel_identity(census: pd.DataFrame | None, op: str, impl: str, shape: str) -> frozenset[tuple[str, ...]]:
    """The census rows of (op, impl) that serve `shape`, as a set of (kernel, specialization,
    source_sha256, compiler, options); empty where the census has none. The census names shapes by
    their dimensions, so a shape with a tag ('65536x1048576x64-powerlaw', another graph through the
    same kernels) is served by the rows of its dimensions ('65536x1048576x64')."""
    if census is None or census.empty or not {"op", "impl", "shapes"} <= set(census.columns):
        return frozenset()
    rows = census[(census["op"].astype(str) == op) & (census["impl"].astype(str) == impl)]
    out = set()
    for rec in rows.to_dict("records"):
        served = [s.strip() for s in str(rec.get("shapes") if rec.get("shapes") is not None else "").split(";")]
        if shape in served or shape.split("-", 1)[0] in served:
            out.add(tuple("" if _missing(rec.get(c)) else str(rec.get(c)) for c in IDENTITY_COLUMNS))
    return frozenset(out)


def identity_change(before: frozenset, after: frozenset) -> str | None:
    """None when the two identities are the same; else the first difference, in the order
    'missing', 'changed source', 'changed compiler', 'changed options', 'changed specialization'."""
    if not before or not after:
        return "missing"
    for i, reason in ((2, "changed source"), (3, "changed compiler"), (4, "changed options")):
        if {r[i] for r in before} != {r[i] for r in after}:
            return reason
    return None if before == after else "changed specialization"


# --------------------------------------------------------------------------------------------
# Control bands


def _as_set(exclude: str | Iterable[str] | None) -> set[str]:
    if exclude is None:
        return set()
    return {exclude} if isinstance(exclude, str) else set(exclude)


def _set_aside_reason(ns: Retained, rec: Mapping[str, Any], impl: str, current_census: pd.DataFrame | None,
                      gpu: str | None, cache_mode: str | None) -> str | None:
    """Why this namespace's capture of `impl` at (op, shape) is left out of a band; None when it
    enters it (same GPU model, cache mode and kernel, and NVML flagged none of its captures there;
    a capture NVML did not record is unknown, not loaded, and enters: `_far_above` guards it)."""
    op, shape = str(rec["op"]), str(rec["shape"])
    mode = rec.get("cache_mode")
    if gpu is not None and ns.gpu is not None and ns.gpu != gpu:
        return f"another GPU model: {ns.gpu}"
    if cache_mode is not None and not _missing(mode) and str(mode) != cache_mode:
        return f"{mode} cache mode"
    if current_census is not None:
        mine = kernel_identity(ns.census, op, impl, shape)
        change = identity_change(mine, kernel_identity(current_census, op, impl, shape))
        if change == "missing" and not mine:
            return "no census row for the kernel"
        if change is not None and change != "missing":
            return f"{impl} kernel {change.replace('changed ', 'changed its ')}"
    flagged = ns.group_flags(op, shape)
    if flagged:
        return f"NVML flagged its captures there: {_flag_text(flagged.values())}"
    return None


def _far_above(points: list[tuple[float, tuple[str, str], str, bool]], margin: float) -> set[str]:
    """The sessions without an NVML record that lie so far above the median of all the band's
    sessions that they are taken for load: more than OUTLIER_MADS scaled median absolute deviations
    and more than twice the margin above it (with fewer than three sessions no centre is robust, so
    none is). Load only slows a kernel, so only the upper side is tested; the median and the MAD are
    symmetric in the sessions, so the band still depends on their set only."""
    if len(points) < 3 or all(not unrecorded for *_, unrecorded in points):
        return set()
    values = sorted(p[0] for p in points)
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    devs = sorted(abs(v - median) for v in values)
    mad = devs[mid] if len(devs) % 2 else (devs[mid - 1] + devs[mid]) / 2
    allowed = max(OUTLIER_MADS * 1.4826 * mad, 2 * margin * median)
    return {name for value, _, name, unrecorded in points if unrecorded and value > median + allowed}


def control_bands(history_like: Any, control: str = "triton", margin: float = MARGIN,
                  exclude: str | Iterable[str] | None = None, *, current_census: pd.DataFrame | None = None,
                  gpu: str | None = None, cache_mode: str | None = None) -> pd.DataFrame:
    """Per (op, shape): the min and max of `control`'s kernel_time_us over the namespaces of the
    history (other than `exclude`) whose captures there NVML did not flag, and the band widened by
    the margin: lo·(1−margin), hi·(1+margin). `unrecorded` names the band's namespaces without an
    NVML record of the control's capture there (what NVML would have seen is unknown).

    A namespace that measured the control at an (op, shape) is set aside there, with its reason in
    `set_aside` ('name (why); name2 (why)'), when it ran on another GPU model than `gpu`, in another
    cache mode than `cache_mode`, with another control kernel serving that shape than
    `current_census` names (kernel_identity; or without a census row for it), with any of its
    captures there flagged by NVML, or, without an NVML record, far above the median of the band's
    sessions (`_far_above`: one loaded session without a record cannot widen the band). Nothing else
    sets a namespace aside (never where its control fell against some other band), so the band
    depends on the set of namespaces only: permuting the history gives the same rows. Namespaces are listed by date, then name; rows are sorted by (op, shape). An (op, shape)
    where every namespace was set aside keeps a row with n_namespaces 0 and no band."""
    if not 0 <= margin < 1:
        raise EvidenceError(f"trust: the control band margin must be at least 0 and below 1, not {margin}.")
    skip = _as_set(exclude)
    points: dict[tuple[str, str], list[tuple[float, tuple[str, str], str, bool]]] = {}
    aside: dict[tuple[str, str], dict[str, tuple[tuple[str, str], str]]] = {}
    for ns in retained(history_like):
        if ns.namespace in skip:
            continue
        kt = ns.kernel_time
        if kt is None or kt.empty or "impl" not in kt:
            continue
        for rec in kt[kt["impl"].astype(str) == control].to_dict("records"):
            value = _float(rec.get("kernel_time_us"))
            if value is None:
                continue
            key = (str(rec["op"]), str(rec["shape"]))
            why = _set_aside_reason(ns, rec, control, current_census, gpu, cache_mode)
            if why is None:
                points.setdefault(key, []).append((value, ns.order_key(), ns.namespace,
                                                   not ns.watched(key[0], key[1], control)))
            else:
                aside.setdefault(key, {}).setdefault(ns.namespace, (ns.order_key(), why))
    out = []
    for key in sorted({*points, *aside}):
        pts = points.get(key, [])
        far = _far_above(pts, margin)
        for value, order, name, _ in pts:
            if name in far:
                aside.setdefault(key, {})[name] = (order, f"no NVML record, and at {_us(value)} far above the other "
                                                          f"sessions, as load would put it")
        pts = [p for p in pts if p[2] not in far]
        used = {n for _, _, n, _ in pts}
        left = sorted((k, n, why) for n, (k, why) in aside.get(key, {}).items() if n not in used)
        names = [n for _, n in sorted({(k, n) for _, k, n, _ in pts})]
        unrecorded = [n for _, n in sorted({(k, n) for _, k, n, u in pts if u})]
        row: dict[str, Any] = {"op": key[0], "shape": key[1], "control": control, "margin": margin,
                               "n_namespaces": len(names), "namespaces": ";".join(names),
                               "unrecorded": ";".join(unrecorded),
                               "set_aside": "; ".join(f"{n} ({why})" for _, n, why in left)}
        if pts:
            lo = min(pts, key=lambda p: (p[0], p[1]))
            hi = min(pts, key=lambda p: (-p[0], p[1]))
            row.update({"observed_min_us": lo[0], "observed_max_us": hi[0], "min_namespace": lo[2],
                        "max_namespace": hi[2], "band_lo_us": lo[0] * (1 - margin), "band_hi_us": hi[0] * (1 + margin)})
        else:
            row.update({"observed_min_us": None, "observed_max_us": None, "min_namespace": None,
                        "max_namespace": None, "band_lo_us": None, "band_hi_us": None})
        out.append(row)
    return pd.DataFrame(out, columns=BAND_COLUMNS)


# --------------------------------------------------------------------------------------------
# Classifying the current namespace's control


def _unrecorded(row: Mapping[str, Any], column: str = "unrecorded") -> list[str]:
    return [n for n in str(row.get(column) or "").split(";") if n and not _missing(row.get(column))]


def _in_namespaces(n: int, names: str, unrecorded: Sequence[str] = ()) -> str:
    """Which sessions a band rests on: quiet ones (NVML saw them), or sessions NVML did not flag of
    which some (or all) it did not record, which the sentence says."""
    k = len(unrecorded)
    if not k:
        return f"across {n} quiet namespaces" if n != 1 else f"in the quiet namespace {names}"
    if k == n:
        return (f"across {n} namespaces without an NVML record" if n != 1
                else f"in the namespace {names}, which has no NVML record")
    return f"across {n} namespaces NVML did not flag, {k} of them without an NVML record"


def _band_text(row: Mapping[str, Any]) -> str:
    lo, hi, n = float(row["band_lo_us"]), float(row["band_hi_us"]), int(row["n_namespaces"])
    omin, omax = float(row["observed_min_us"]), float(row["observed_max_us"])
    where = _in_namespaces(n, row["namespaces"], _unrecorded(row))
    observed = f"observed {_span(omin, omax)} {where}" if omin != omax else f"observed at {_us(omin)} {where}"
    return f"its band of {_span(lo, hi)} ({observed}, widened by {float(row['margin']) * 100:g}%)"


def _value(kt: pd.DataFrame, impl: str) -> tuple[float | None, str | None]:
    rows = kt[kt["impl"].astype(str) == impl]
    if rows.empty:
        return None, None
    rec = rows.iloc[0]
    uuid = rec.get("gpu_uuid") if "gpu_uuid" in rows else None
    return _float(rec.get("kernel_time_us")), (None if _missing(uuid) else str(uuid))


def _ours_sentence(ours: str, value: float | None, position: str, row: Mapping[str, Any], under_load: bool,
                   ours_flagged: bool) -> str:
    """What ours did while the control came back above its band: stayed in its own earlier range
    (the slowdown hit the control's capture) or moved too (the whole operation's captures)."""
    if value is None:
        return f"Ours ({ours}) was not measured at this shape, so whether the slowdown hit it too is unknown."
    if position == "no range":
        return (f"Ours ({ours}) came back at {_us(value)}, but no earlier quiet namespace captured the same kernel "
                f"at this shape, so whether the slowdown hit it too is unknown.")
    span = _span(float(row["ours_lo_us"]), float(row["ours_hi_us"]))
    n, k = int(row["_ours_n"]), len(row["_ours_unrecorded"])
    sessions = (_count(n, "quiet namespace") if not k else _count(n, "namespace") + " without an NVML record" if k == n
                else f"{_count(n, 'namespace')} NVML did not flag, {k} without an NVML record")
    where = f"its own earlier range of {span} (the same kernel in {sessions}, widened by the margin)"
    if position == "above":
        return (f"Ours ({ours}) came back at {_us(value)}, above {where} too: ours moved with the control, so the "
                f"whole operation's captures at this shape are suspect.")
    side = "inside" if position == "inside" else "below"
    lead = f"Ours ({ours}) came back at {_us(value)}, {side} {where}"
    if side == "below":
        lead += ", which load cannot cause"
    if ours_flagged:
        return f"{lead}, though NVML flagged its capture too, so the load reached the whole operation's captures."
    if under_load:
        return f"{lead}: the load hit the control's capture, not the whole operation."
    return f"{lead}: whatever slowed the control's capture did not slow ours, so it hit the control's capture, not the whole operation."


def classify_controls(current_kernel_time: pd.DataFrame, bands: pd.DataFrame, control: str = "triton", *,
                      gpu_state: pd.DataFrame | None = None, ours: str = OURS, ours_bands: pd.DataFrame | None = None,
                      margin: float | None = None) -> pd.DataFrame:
    """Per (op, shape) of the current namespace: the control's kernel time against its band, what
    NVML saw (`gpu_state`, the namespace's gpu_state.csv), and a verdict.

    status: `inside`; `below` (faster than every earlier quiet capture, which load cannot cause);
    `above` (above its band while NVML saw nothing there: a suspect capture); `under load` (above
    its band while NVML flagged the captures there); `establishing` (no band: no earlier quiet
    namespace measured it); `missing` (this run did not measure the control there).
    rankable: a pairing with the control at this shape can be ranked: the control is inside or
    below its band (or establishing with NVML seeing its capture quiet), NVML flagged no capture at
    this shape, and ours ran on the same GPU as the control. suspect: which capture is suspect,
    `control` or `group` (the whole operation's captures: ours moved out of its own earlier range
    too, `ours_bands`, or NVML flagged ours or another capture there), or empty. note: the verdict
    in sentences; claim_note: what a claim prints instead of a ratio where the row is not rankable."""
    kt = current_kernel_time
    now = Retained("current", kt, gpu_state=gpu_state)
    out = []
    band_by_key = {(str(r["op"]), str(r["shape"])): r for r in bands.to_dict("records")} if not bands.empty else {}
    ours_by_key = ({(str(r["op"]), str(r["shape"])): r for r in ours_bands.to_dict("records")}
                   if ours_bands is not None and not ours_bands.empty else {})
    for (op, shape), grp in kt.groupby(["op", "shape"], sort=False):
        op, shape = str(op), str(shape)
        who = f"{control}'s {op} {shape}"
        value, ctl_gpu = _value(grp, control)
        ours_value, ours_gpu = _value(grp, ours) if ours != control else (None, None)
        band = band_by_key.get((op, shape))
        has_band = band is not None and not _missing(band.get("band_lo_us"))
        flagged = now.group_flags(op, shape)
        nvml = "disturbed" if flagged else ("quiet" if now.watched(op, shape, control) else "unknown")
        row: dict[str, Any] = {"op": op, "shape": shape, "control": control, "kernel_time_us": value,
                               "band_lo_us": None, "band_hi_us": None, "observed_min_us": None, "observed_max_us": None,
                               "margin": margin, "n_namespaces": 0, "namespaces": "",
                               "set_aside": (band or {}).get("set_aside") or "", "nvml": nvml,
                               "nvml_flags": _flag_text(flagged.values()) if flagged else "",
                               "ours": ours if ours != control else "", "ours_us": ours_value, "ours_lo_us": None,
                               "ours_hi_us": None, "ours_namespaces": "", "ours_position": "",
                               "split_gpus": bool(ctl_gpu and ours_gpu and ctl_gpu != ours_gpu), "_ours_n": 0,
                               "_ours_unrecorded": []}
        if has_band:
            assert band is not None  # has_band implies it
            row.update({k: band.get(k) for k in ("band_lo_us", "band_hi_us", "observed_min_us", "observed_max_us",
                                                 "margin", "n_namespaces", "namespaces", "unrecorded")})
        obands = ours_by_key.get((op, shape))
        if ours != control:
            if ours_value is None:
                row["ours_position"] = "not measured"
            elif obands is None or _missing(obands.get("band_lo_us")):
                row["ours_position"] = "no range"
            else:
                olo, ohi = float(obands["band_lo_us"]), float(obands["band_hi_us"])
                row.update({"ours_lo_us": olo, "ours_hi_us": ohi, "ours_namespaces": obands["namespaces"],
                            "_ours_n": int(obands["n_namespaces"]), "_ours_unrecorded": _unrecorded(obands),
                            "ours_position": "above" if ours_value > ohi else ("below" if ours_value < olo else "inside")})

        # status
        if value is None:
            status = "missing"
        elif not has_band:
            status = "establishing"
        elif value > float(row["band_hi_us"]):
            status = "under load" if flagged else "above"
        elif value < float(row["band_lo_us"]):
            status = "below"
        else:
            status = "inside"
        row["status"] = status
        row["under_load"] = status == "under load"

        # suspect and rankable
        ours_flagged = ours in flagged
        if status in ABOVE:
            row["suspect"] = "group" if (row["ours_position"] == "above" or ours_flagged) else "control"
        elif flagged and status != "missing":
            row["suspect"] = "control" if set(flagged) == {control} else "group"
        else:
            row["suspect"] = ""
        clean = status in ("inside", "below") or (status == "establishing" and nvml == "quiet")
        row["rankable"] = bool(clean and not flagged and not row["split_gpus"])

        # sentences
        flagged_captures = f"the {_and(sorted(flagged))} {'capture' if len(flagged) == 1 else 'captures'} at this shape"
        flag_clause = f"NVML flagged {flagged_captures} ({row['nvml_flags']})" if flagged else ""
        parts: list[str] = []
        if status == "missing":
            parts.append(f"This run did not measure {control} at {op} {shape}, so no control judges the captures there.")
            if flagged:
                parts.append(f"{flag_clause}.")
        elif status == "establishing":
            assert value is not None  # only status "missing" has no value
            sa = f" (set aside: {row['set_aside']})" if row["set_aside"] else ""
            nvml_said = {"quiet": "which saw no other process and no throttling during the captures at this shape",
                         "unknown": "which recorded nothing for its capture",
                         "disturbed": f"which flagged {flagged_captures} ({row['nvml_flags']})"}[nvml]
            parts.append(f"No earlier quiet namespace measured {who}{sa}: its band is being established with this "
                         f"run, at {_us(value)}, and until then it is judged by NVML alone, {nvml_said}.")
        else:
            assert value is not None  # only status "missing" has no value
            text = _band_text(row)
            head = f"{who} came back at {_us(value)}"
            if status == "inside":
                if flagged:
                    parts.append(f"{head}, inside {text}, but {flag_clause}: not a clean capture.")
                elif nvml == "unknown":
                    parts.append(f"{head}, inside {text}: a clean capture by its band (NVML recorded nothing for it).")
                else:
                    parts.append(f"{head}, inside {text}: a clean capture.")
            elif status == "below":
                parts.append(f"{head}, below {text}: faster than any earlier quiet capture, which load cannot cause "
                             f"(the GPU ran faster this session, or the band is too narrow).")
                if flagged:
                    parts.append(f"{flag_clause}.")
            elif status == "above":
                nvml_saw = ("while NVML saw no other process and no throttling during the captures at this shape"
                            if nvml == "quiet" else "while NVML recorded nothing for its capture")
                parts.append(f"{head}, above {text}, {nvml_saw}: the control's capture is suspect (above its band, "
                             f"not shown to be under load).")
                parts.append(_ours_sentence(ours, ours_value, row["ours_position"], row, False, ours_flagged))
            else:  # under load
                parts.append(f"{head}, above {text}, and {flag_clause}: it ran under load.")
                parts.append(_ours_sentence(ours, ours_value, row["ours_position"], row, True, ours_flagged))
        if row["split_gpus"]:
            parts.append(f"Ours ({ours}) ran on {ours_gpu} and {control} on {ctl_gpu}, so this pairing compares two devices.")
        if row["rankable"]:
            parts.append(f"Ours can be ranked against {control} at this shape.")
        elif status == "missing":
            parts.append(f"No ranking against {control} follows there.")
        else:
            parts.append(f"No ranking follows from {control}'s pairings at this shape.")
        row["note"] = " ".join(_sentence(p) for p in parts if p)

        # claim note: what a claim prints instead of a ratio
        row["claim_note"] = ""
        if not row["rankable"]:
            reasons = []
            if status == "missing":
                reasons.append(f"this run did not measure {control} at this shape")
            elif status in ABOVE:
                assert value is not None  # only status "missing" has no value
                reasons.append(f"{control}'s capture ({_us(value)}) came back above its band"
                               + (" under load" if status == "under load" else ", a suspect capture"))
            elif status == "establishing" and nvml == "unknown":
                reasons.append(f"{control} has no band yet at this shape and NVML recorded nothing for its capture")
            if flagged and status != "under load":
                reasons.append(flag_clause)
            if row["split_gpus"]:
                reasons.append(f"ours ran on {ours_gpu} and {control} on {ctl_gpu}")
            because = _and(reasons)
            if ours_value is not None and has_band and status in ABOVE:
                claim = (f"Ours ({ours}) at {_us(ours_value)} against the control's band of "
                         f"{_span(float(row['band_lo_us']), float(row['band_hi_us']))}; no ranking follows from this "
                         f"pairing, because {because}.")
            elif ours_value is not None and value is not None:
                # the band is not what stops the ranking here, so ours is not set against it
                claim = (f"Ours ({ours}) at {_us(ours_value)} and {control} at {_us(value)}"
                         f"{'' if has_band else ' (no band yet)'}; no ranking follows from this pairing, because {because}.")
            else:
                claim = f"No ranking against {control} follows at {op} {shape}, because {because}."
            claims = [claim]
            if status in ABOVE:
                claims.append(_ours_sentence(ours, ours_value, row["ours_position"], row, status == "under load",
                                             ours_flagged))
            row["claim_note"] = " ".join(_sentence(c) for c in claims)
        row.pop("_ours_n")
        row.pop("_ours_unrecorded")
        out.append(row)
    return pd.DataFrame(out, columns=CONTROL_COLUMNS)


def rankable(controls_df: pd.DataFrame | None, op: str, shape: str) -> bool:
    """Whether a pairing with the control at (op, shape) can be ranked, from a controls table: its
    `rankable` column, or for a table written before that column existed, a status of inside,
    below or establishing without under_load. False where the table has no row for (op, shape)
    (no control judged the captures there) or there is no table."""
    if controls_df is None or controls_df.empty or not {"op", "shape"} <= set(controls_df.columns):
        return False
    rows = controls_df[(controls_df["op"].astype(str) == op) & (controls_df["shape"].astype(str) == shape)]
    if rows.empty:
        return False
    rec = rows.iloc[0]
    if "rankable" in rows and not _missing(rec.get("rankable")):
        return _truthy(rec.get("rankable"))
    return str(rec.get("status")) in ("inside", "below", "establishing") and not _truthy(rec.get("under_load"))


# --------------------------------------------------------------------------------------------
# Drift between two namespaces


_BAND_WORDS = {"inside": "inside its band", "below": "below its band", "above": "above its band, a suspect capture",
               "under load": "above its band, under load", "establishing": "with no band yet",
               "missing": "not measured"}


def _controls_by_key(controls: pd.DataFrame | None) -> dict[tuple[str, str], dict[str, Any]]:
    if controls is None or controls.empty or not {"op", "shape"} <= set(controls.columns):
        return {}
    return {(str(r["op"]), str(r["shape"])): r for r in controls.to_dict("records")}


def _group_suspect(row: Mapping[str, Any] | None) -> str | None:
    """Why a controls row makes every capture of ours at its (op, shape) unfit to bound drift; None
    when it does not: the whole operation's captures are suspect (`suspect` group), or the control
    came back above its band and ours' own range cannot say the slowdown missed it."""
    if not row:
        return None
    status = str(row.get("status") or "")
    if str(row.get("suspect") or "") == "group":
        return "the whole operation's captures at this shape are suspect"
    if status in ABOVE and str(row.get("ours_position") or "") not in ("inside", "below"):
        return "the control came back above its band there and ours has no earlier range to show the slowdown missed it"
    if status == "outside" and str(row.get("side") or "") == "above":  # a controls.csv written before these rules
        return "the control came back above its band there"
    return None


def drift(current_ns_dir: str | Path | Retained, earlier_ns_dir: str | Path | Retained, *, control: str = "triton",
          controls: pd.DataFrame | None = None, earlier_controls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (op, shape, impl) measured in both namespaces: before_us (earlier), after_us (current),
    change_pct = (after − before) / before · 100 (positive: slower now), unchanged_kernel (same
    census in both), and its role:

    * `bound`: ours (not the control, not a library baseline), the same kernel in both, neither
      capture flagged by NVML, and no verdict that the whole operation's captures at that shape are
      suspect (`controls`, `earlier_controls`: the two namespaces' controls tables). Only these
      bound the drift.
    * `control`: the control, its move judged against its band (band_status: its status in `controls`).
    * `library`: a library baseline (`torch`), listed, never compared.
    * `changed`: ours, with another census in the two ('changed source', 'changed compiler',
      'changed options', 'changed specialization').
    * `excluded`: ours, same census, but its capture was flagged ('disturbed') or its group is
      suspect ('suspect group'); or without a census row in one ('no census'), without a time in one
      ('missing'), or every row when the namespaces ran on different GPU models ('different gpu') or
      cache modes ('different cache mode')."""
    cur = current_ns_dir if isinstance(current_ns_dir, Retained) else load_namespace(current_ns_dir)
    old = earlier_ns_dir if isinstance(earlier_ns_dir, Retained) else load_namespace(earlier_ns_dir)
    key = ["op", "shape", "impl"]
    verdict_now, verdict_then = _controls_by_key(controls), _controls_by_key(earlier_controls)
    out = []

    def frame(ns: Retained) -> pd.DataFrame:
        kt = ns.kernel_time
        if kt is None or kt.empty:
            return pd.DataFrame(columns=[*key, "kernel_time_us", "cache_mode"])
        kt = kt.copy()
        for c in key:
            kt[c] = kt[c].astype(str)
        if "cache_mode" not in kt:
            kt["cache_mode"] = None
        return kt.drop_duplicates(key, keep="last")

    after, before = frame(cur), frame(old)
    merged = after[[*key, "kernel_time_us", "cache_mode"]].merge(
        before[[*key, "kernel_time_us", "cache_mode"]], on=key, how="inner", suffixes=("_after", "_before"))
    gpu_differs = cur.gpu is not None and old.gpu is not None and cur.gpu != old.gpu
    between = f"between {old.namespace} and {cur.namespace}"
    for rec in merged.to_dict("records"):
        op, shape, impl = rec["op"], rec["shape"], rec["impl"]
        b, a = _float(rec["kernel_time_us_before"]), _float(rec["kernel_time_us_after"])
        pct = (a - b) / b * 100.0 if a is not None and b else None
        who = f"{impl}'s {op} {shape}"
        modes = (rec["cache_mode_before"], rec["cache_mode_after"])
        change = identity_change(kernel_identity(old.census, op, impl, shape), kernel_identity(cur.census, op, impl, shape))
        band_status = ""
        if impl in LIBRARY_IMPLS:
            role, reason, note = "library", "library baseline", f"{who} is a library baseline: {LIBRARY_NOTE}."
            change = "library"
        elif gpu_differs:
            role, reason = "excluded", "different gpu"
            note = f"{who} ran on {old.gpu} in {old.namespace} and on {cur.gpu} in {cur.namespace}, so its move is not drift."
        elif not any(_missing(m) for m in modes) and modes[0] != modes[1]:
            role, reason = "excluded", "different cache mode"
            note = f"{who} ran in {modes[0]} cache mode in {old.namespace} and {modes[1]} in {cur.namespace}, so its move is not drift."
        elif impl == control:
            role = "control"
            band_status = str((verdict_now.get((op, shape)) or {}).get("status") or "")
            if a is None or b is None:
                reason, note = "missing", f"{who} is the control and has no kernel time in one of the two namespaces."
            elif change is not None:
                reason = "no census" if change == "missing" else change
                # arg-type: pct is None only where b == 0, and _pct then raises TypeError, as it always has
                note = (f"{who} is the control; its kernel cannot be shown the same {between} ({reason}), so its move "
                        f"({_pct(pct)}) is not compared and never bounds drift.")  # type: ignore[arg-type]
            else:
                reason = "control"
                verdict = _BAND_WORDS.get(band_status, "not judged against a band here")
                if band_status == "inside" and str((verdict_now.get((op, shape)) or {}).get("nvml")) == "disturbed":
                    verdict = "inside its band, though NVML flagged captures there"
                # arg-type: pct is None only where b == 0, and _pct then raises TypeError, as it always has
                note = (f"{who} is the control: it moved {_pct(pct)} ({b:.2f} -> {a:.2f} µs) and this run's capture is "  # type: ignore[arg-type]
                        f"{verdict}; the control is judged against its band and never bounds drift.")
        elif a is None or b is None:
            role, reason, note = "excluded", "missing", f"{who} has no kernel time in one of the two namespaces."
        elif change == "missing":
            lacking = [ns.namespace for ns in (old, cur) if not kernel_identity(ns.census, op, impl, shape)]
            role, reason = "excluded", "no census"
            note = f"{who} has no census row serving that shape in {' or '.join(lacking)}, so it cannot be shown unchanged."
        elif change is not None:
            role, reason = "changed", change
            note = f"{who} {change.replace('changed ', 'changed its ')} {between}, so its move is not drift."
        else:
            flagged_in = [ns for ns in (old, cur) if ns.capture_flagged(op, shape, impl)]
            suspect = [(ns, why) for ns, verdicts in ((old, verdict_then), (cur, verdict_now))
                       if (why := _group_suspect(verdicts.get((op, shape))))]
            if flagged_in:
                role, reason = "excluded", "disturbed"
                said = "; ".join(f"in {ns.namespace}: {_flag_text([ns.capture_flags(op, shape, impl)])}" for ns in flagged_in)
                note = f"{who} is the same kernel in both, but NVML flagged its capture ({said}), so its move does not bound drift."
            elif suspect:
                role, reason = "excluded", "suspect group"
                said = "; ".join(f"in {ns.namespace}, {why}" for ns, why in suspect)
                note = f"{who} is the same kernel in both, but {said}, so its move does not bound drift."
            else:
                role, reason = "bound", ""
                unwatched = [ns.namespace for ns in (old, cur) if not ns.watched(op, shape, impl)]
                seen = (f"NVML flagged neither capture (it recorded nothing in {_and(unwatched)})" if unwatched
                        else "NVML saw both captures quiet")
                note = (f"{who} is the same kernel in both (same census: source, compiler, options, specialization) and "
                        f"{seen}, so its move bounds the drift.")
                ctl = verdict_now.get((op, shape)) or {}
                if str(ctl.get("status") or "") in ABOVE:
                    note += (f" The control came back above its band at this shape in {cur.namespace}, but ours stayed "
                             f"in its own earlier range, so the slowdown hit the control's capture alone.")
        out.append({"earlier": old.namespace, "current": cur.namespace, "op": op, "shape": shape, "impl": impl,
                    "before_us": b, "after_us": a, "change_pct": pct, "unchanged_kernel": change is None,
                    "role": role, "reason": reason, "band_status": band_status, "note": note})
    return pd.DataFrame(out, columns=DRIFT_COLUMNS)


def _pair(r: Mapping[str, Any]) -> dict[str, Any]:
    return {"op": str(r["op"]), "shape": str(r["shape"]), "impl": str(r["impl"]), "before_us": float(r["before_us"]),
            "after_us": float(r["after_us"]), "change_pct": float(r["change_pct"]),
            "band_status": "" if _missing(r.get("band_status")) else str(r.get("band_status") or "")}


def _roles(df: pd.DataFrame) -> pd.Series:
    """Each row's role; a drift.csv written before roles existed: its unchanged non-library rows
    were its bound (the control among them, which those tables did not tell apart)."""
    if "role" in df:
        return df["role"].fillna("").astype(str)
    lib = df["impl"].astype(str).isin(LIBRARY_IMPLS)
    unchanged = df["unchanged_kernel"].map(_truthy)
    return pd.Series(["library" if l else ("bound" if u else "excluded") for l, u in zip(lib, unchanged)], index=df.index)


def _control_summary(name: str, pairs: list[dict[str, Any]], others: list[dict[str, Any]], max_pairs: int) -> str:
    """The control's move between the two namespaces, judged against its band, in one sentence."""
    def at(p: dict[str, Any]) -> str:
        return f"{p['op']} {p['shape']}: {p['before_us']:.2f} -> {p['after_us']:.2f} µs"

    inside = [p for p in pairs if p["band_status"] == "inside"]
    new = [p for p in pairs if p["band_status"] == "establishing"]
    rest = [p for p in pairs if p["band_status"] not in ("inside", "establishing")]
    clauses = []
    if inside:
        top = max(inside, key=lambda p: abs(p["change_pct"]))
        where = ("inside its band" if len(pairs) == 1 else "inside its band at every shape" if len(inside) == len(pairs)
                 else f"inside its band at {_count(len(inside), 'shape')}")
        clauses.append(f"moved by at most {abs(top['change_pct']):.1f}% ({at(top)}), {where}")
    if new:
        top = max(new, key=lambda p: abs(p["change_pct"]))
        where = ("with no band yet" if len(pairs) == 1 else "with no band yet at any shape" if len(new) == len(pairs)
                 else f"with no band yet at {_count(len(new), 'shape')}")
        clauses.append(f"moved by at most {abs(top['change_pct']):.1f}% ({at(top)}), {where}")
    for p in rest[:max_pairs]:
        verdict = _BAND_WORDS.get(p["band_status"], "not judged against a band here")
        if p["band_status"] in ABOVE:
            verdict += ", so that move is not drift"
        clauses.append(f"moved {_pct(p['change_pct'])} at {p['op']} {p['shape']} ({p['before_us']:.2f} -> "
                       f"{p['after_us']:.2f} µs), {verdict}")
    if len(rest) > max_pairs:
        clauses.append(f"was outside its band at {_count(len(rest) - max_pairs, 'more shape')}")
    if others:
        not_compared = [f"{o['op']} {o['shape']} ({o['reason']})" for o in others[:max_pairs]]
        if len(others) > max_pairs:
            not_compared.append(f"{len(others) - max_pairs} more")
        clauses.append(f"is not compared at {_and(not_compared)}")
    if not clauses:
        return ""
    return _sentence(f"The control ({name}) " + "; ".join(c if i == 0 else f"it {c}" for i, c in enumerate(clauses)))


def drift_bound(drift_df: pd.DataFrame | None, max_pairs: int = 8) -> dict[str, Any]:
    """The bound our unchanged, cleanly captured kernels put on drift (rows with role `bound`): the
    largest |change_pct|, the kernel that set it, how many kernels, the largest rise and fall, each
    pair and `summary` (one sentence); beside it `control`, the control's move judged against its
    band ({'name', 'count', 'max_abs_change_pct', 'at', 'inside_band', 'summary'}; None without
    control rows); `roles` (rows per role), `changed` and `excluded` (the rows of ours left out,
    with their reasons, and one sentence each: `changed_summary`, `excluded_summary`), and
    `sentence`, the bound and the control's move together."""
    df = drift_df if drift_df is not None else pd.DataFrame(columns=DRIFT_COLUMNS)
    earlier = str(df["earlier"].iloc[0]) if len(df) and "earlier" in df else None
    current = str(df["current"].iloc[0]) if len(df) and "current" in df else None
    roles = _roles(df) if len(df) else pd.Series(dtype=str)
    has_pct = df["change_pct"].notna() if len(df) else pd.Series(dtype=bool)
    bound_rows = df[(roles == "bound") & has_pct] if len(df) else df
    excluded = df[~df.index.isin(bound_rows.index)] if len(df) else df
    reasons = excluded["reason"].fillna("").astype(str).value_counts().to_dict() if len(excluded) else {}
    between = f"between {earlier} and {current}" if earlier and current else "between the two namespaces"
    pairs = [_pair(r) for r in bound_rows.to_dict("records")]
    result: dict[str, Any] = {"earlier": earlier, "current": current, "count": len(pairs), "pairs": pairs,
                              "excluded": len(excluded), "excluded_reasons": reasons,
                              "roles": roles.value_counts().to_dict() if len(df) else {},
                              "max_abs_change_pct": None, "max_change_pct": None, "min_change_pct": None, "kernel": None}
    if pairs:
        top = max(pairs, key=lambda p: abs(p["change_pct"]))
        changes = [p["change_pct"] for p in pairs]
        result.update({"max_abs_change_pct": abs(top["change_pct"]), "max_change_pct": max(changes),
                       "min_change_pct": min(changes), "kernel": top})
        result["summary"] = _sentence(
            f"Drift {between} is at most {abs(top['change_pct']):.1f}% ({top['impl']} at {top['op']} {top['shape']}: "
            f"{top['before_us']:.2f} -> {top['after_us']:.2f} µs), from {_count(len(pairs), 'kernel')} of ours that did "
            f"not change")
    else:
        both = f"in both {earlier} and {current}" if earlier and current else "in both namespaces"
        result["summary"] = _sentence(f"No kernel of ours that did not change was captured cleanly {both}, so drift "
                                      f"between them is not bounded by any kernel")

    # the control, beside the bound
    ctl_rows = df[roles == "control"] if len(df) else df
    control_name = str(ctl_rows["impl"].iloc[0]) if len(ctl_rows) else None
    same = ctl_rows[(ctl_rows["reason"].fillna("").astype(str) == "control") & ctl_rows["change_pct"].notna()] if len(ctl_rows) else ctl_rows
    others = [{"op": str(r["op"]), "shape": str(r["shape"]), "reason": str(r["reason"])}
              for r in ctl_rows.to_dict("records") if str(r.get("reason")) != "control"] if len(ctl_rows) else []
    if control_name is not None:
        cpairs = [_pair(r) for r in same.to_dict("records")]
        inside = [p for p in cpairs if p["band_status"] == "inside"]
        ctl_top = max(inside or cpairs, key=lambda p: abs(p["change_pct"])) if cpairs else None
        result["control"] = {
            "name": control_name, "count": len(cpairs), "pairs": cpairs,
            "max_abs_change_pct": abs(ctl_top["change_pct"]) if ctl_top else None, "at": ctl_top,
            "inside_band": bool(cpairs) and len(inside) == len(cpairs),
            "not_inside": [p for p in cpairs if p["band_status"] != "inside"], "not_compared": others,
            "summary": _control_summary(control_name, cpairs, others, max_pairs),
        }
    else:
        result["control"] = None

    # ours left out, and why
    ours_out = df[roles.isin(["changed", "excluded"])] if len(df) else df
    result["changed"] = [{"op": str(r["op"]), "shape": str(r["shape"]), "impl": str(r["impl"]), "reason": str(r["reason"])}
                         for r in ours_out.to_dict("records") if r["role"] == "changed"] if "role" in ours_out else []
    result["left_out"] = [{"op": str(r["op"]), "shape": str(r["shape"]), "impl": str(r["impl"]), "reason": str(r["reason"])}
                          for r in ours_out.to_dict("records") if r["role"] == "excluded"] if "role" in ours_out else []

    def listing(rows: list[dict[str, Any]]) -> str:
        shown = [f"{r['impl']} at {r['op']} {r['shape']} ({r['reason']})" for r in rows[:max_pairs]]
        if len(rows) > max_pairs:
            shown.append(f"{len(rows) - max_pairs} more")
        return _and(shown)

    n_changed, n_left = len(result["changed"]), len(result["left_out"])
    result["changed_summary"] = (_sentence(f"{_count(n_changed, 'kernel')} of ours changed {between} and "
                                           f"{'does' if n_changed == 1 else 'do'} not bound drift: "
                                           f"{listing(result['changed'])}") if n_changed else "")
    result["excluded_summary"] = (_sentence(f"{_count(n_left, 'capture')} of ours left out of the bound: {listing(result['left_out'])}")
                                  if n_left else "")
    result["sentence"] = " ".join(s for s in (result["summary"], (result["control"] or {}).get("summary")) if s)
    return result


# --------------------------------------------------------------------------------------------
# The namespace's controls, the earlier namespace, and the step that writes the tables


class _History:
    """The retained namespaces under an artifacts folder, each loaded once."""

    def __init__(self, artifacts: str | Path) -> None:
        self.artifacts = Path(artifacts)
        self.order = history.namespaces_in_order(self.artifacts)
        self._loaded: dict[str, Retained] = {}
        self._controls: dict[tuple[str, str, float, str], pd.DataFrame] = {}

    def get(self, name: str) -> Retained:
        if name not in self._loaded:
            self._loaded[name] = load_namespace(self.artifacts / name)
        return self._loaded[name]

    def before(self, name: str) -> list[str]:
        return self.order[: self.order.index(name)] if name in self.order else [n for n in self.order if n != name]

    def controls(self, name: str, control: str, margin: float, ours: str = OURS) -> pd.DataFrame:
        key = (name, control, margin, ours)
        if key not in self._controls:
            cur = self.get(name)
            before = [self.get(n) for n in self.before(name)]
            mode = _cache_mode(cur)
            bands = control_bands(before, control, margin, exclude=name, current_census=cur.census, gpu=cur.gpu,
                                  cache_mode=mode)
            ours_bands = (control_bands(before, ours, margin, exclude=name, current_census=cur.census, gpu=cur.gpu,
                                        cache_mode=mode) if ours != control else None)
            self._controls[key] = classify_controls(cur.kernel_time, bands, control, gpu_state=cur.gpu_state, ours=ours,
                                                    ours_bands=ours_bands, margin=margin)
        return self._controls[key]


def namespace_controls(artifacts: str | Path, name: str, control: str = "triton", margin: float = MARGIN,
                       ours: str = OURS) -> pd.DataFrame:
    """The controls table of namespace `name` under `artifacts`: its control against the band of
    the namespaces retained before it (by provenance date), with ours against its own earlier range."""
    return _History(artifacts).controls(name, control, margin, ours)


def _op_shapes(ns: Retained) -> set[tuple[str, str]]:
    kt = ns.kernel_time
    if kt is None or kt.empty:
        return set()
    return {(str(o), str(s)) for o, s in zip(kt["op"], kt["shape"])}


def _choose(hist: _History, current: str, configured: str | None, control: str, margin: float) -> str | None:
    order = hist.order
    if configured:
        if configured == current:
            raise EvidenceError(f"trust: the earlier namespace for drift cannot be {current} itself.")
        if configured not in order:
            raise EvidenceError(f"trust: the configured earlier namespace {configured} has no tables under {hist.artifacts}.")
        return configured
    cur = hist.get(current)
    mine = _op_shapes(cur)
    for name in reversed(hist.before(current)):
        other = hist.get(name)
        if cur.gpu is not None and other.gpu is not None and cur.gpu != other.gpu:
            continue
        if not (mine & _op_shapes(other)) or other.disturbed:
            continue
        if hist.controls(name, control, margin)["status"].isin(ABOVE).any():
            continue
        return name
    return None


def choose_earlier(artifacts: str | Path, current: str, configured: str | None = None, control: str = "triton",
                   margin: float = MARGIN) -> str | None:
    """The namespace to bound drift against: `configured` when given (it must exist under
    `artifacts` with tables); else the most recent namespace dated before `current` (by provenance
    date; all others when `current` is not retained yet) that shares at least one (op, shape) with
    it, ran on the same GPU model where both record one, and was taken clean: no capture flagged by
    NVML and no control above its band (its controls derived now, by these rules, from the
    namespaces before it, never read from its possibly older controls.csv). None when there is none."""
    return _choose(_History(artifacts), current, configured, control, margin)


def earlier_namespaces(artifacts: str | Path, current: str) -> list[str]:
    """The namespaces retained before `current` in date order (all others when it has no tables yet)."""
    order = history.namespaces_in_order(artifacts)
    return order[: order.index(current)] if current in order else [n for n in order if n != current]


def retained_inputs(artifacts: str | Path, current: str) -> list[str]:
    """The files of the namespaces retained before `current` that its trust tables read (a Snakemake
    rule's input; a namespace retained later never makes an older one's tables out of date)."""
    artifacts = Path(artifacts)
    out = []
    for name in earlier_namespaces(artifacts, current):
        for rel in ("tables/kernel_time.csv", "tables/census.csv", "tables/gpu_state.csv", "provenance.json"):
            if (artifacts / name / rel).is_file():
                out.append((artifacts / name / rel).as_posix())
    return out


def check_earlier(artifacts: Path, current: str, earlier: str | None) -> None:
    """ConfigError (one sentence) when `trust.earlier` names a namespace with no retained tables."""

    if earlier is None:
        return
    if not (Path(artifacts) / earlier / "tables" / "kernel_time.csv").is_file() or earlier == current:
        retained = sorted(p.parent.parent.name for p in Path(artifacts).glob("*/tables/kernel_time.csv")
                          if p.parent.parent.name != current)
        raise ConfigError(f"config: trust.earlier names {earlier!r}, which is not a retained namespace under "
                          f"{artifacts}/ other than this one (retained: {', '.join(retained) or 'none'}).")


def trust_tables(artifacts: str | Path, current: str, controls_out: str | Path, drift_out: str | Path,
                 control: str = "triton", margin: float = MARGIN, earlier: str | None = None,
                 ours: str = OURS) -> dict[str, Any]:
    """Write the current namespace's `controls.csv` (its control against the band of the quiet
    namespaces retained before it, same GPU model, cache mode and control kernel) and `drift.csv`
    (against `earlier`, or choose_earlier's pick; header only when there is none). Returns
    {'controls': DataFrame, 'drift': DataFrame, 'bound': drift_bound(...), 'earlier': name or None}."""

    hist = _History(artifacts)
    cur = hist.get(current)
    controls = hist.controls(current, control, margin, ours)
    write_csv(controls.to_dict("records"), CONTROL_COLUMNS, controls_out)
    chosen = _choose(hist, current, earlier, control, margin)
    if chosen:
        drifted = drift(cur, hist.get(chosen), control=control, controls=controls,
                        earlier_controls=hist.controls(chosen, control, margin, ours))
    else:
        drifted = pd.DataFrame(columns=DRIFT_COLUMNS)
    write_csv(drifted.to_dict("records"), DRIFT_COLUMNS, drift_out)
    return {"controls": controls, "drift": drifted, "bound": drift_bound(drifted), "earlier": chosen}


# --------------------------------------------------------------------------------------------
# Flags a report must not hide


def _table(src: str | Path | pd.DataFrame | None) -> pd.DataFrame | None:
    if isinstance(src, pd.DataFrame):
        return src
    return history.read_table(src) if src and Path(src).is_file() else None


def _captures(rows: list[tuple[str, str, str]]) -> str:
    """'layernorm 4096x768 cuda, triton and torch; softmax 4096x1024 cuda' (grouped by op and shape)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for op, shape, impl in rows:
        groups.setdefault((op, shape), []).append(impl)
    return "; ".join(f"{op} {shape} {_and(impls)}" for (op, shape), impls in groups.items())


def flags(controls: str | Path | pd.DataFrame | None = None, drift: str | Path | pd.DataFrame | None = None,
          counters: str | Path | pd.DataFrame | None = None, check: str | Path | pd.DataFrame | None = None,
          kernel_time: str | Path | pd.DataFrame | None = None,
          gpu_state: str | Path | pd.DataFrame | None = None) -> list[str]:
    """One-line sentences a report must print rather than hide, from the namespace's tables (paths
    or DataFrames; any may be absent), in this order, each starting with what it is:
    'Control above its band: ...' (controls.csv), 'Counters unavailable: ...' (counters.csv rows
    whose status is not ok, with their reason), 'Measured on two GPUs: ...' (kernel_time.csv: an
    (op, shape) whose captures have more than one gpu_uuid), 'Check failed: ...' (check.csv),
    'Disturbed capture: ...' (gpu_state.csv), 'Drift not bounded: ...' (drift.csv with rows but
    none that bounds drift)."""
    out: list[str] = []
    ctl, dft, cnt, chk, kt, state = (_table(t) for t in (controls, drift, counters, check, kernel_time, gpu_state))

    if ctl is not None and not ctl.empty and "status" in ctl:
        for r in ctl.to_dict("records"):
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

    if cnt is not None and not cnt.empty and "status" in cnt:
        bad = cnt[cnt["status"].fillna("").astype(str) != "ok"]
        groups: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
        for r in bad.to_dict("records"):
            reason = _clause(r.get("reason")) or "no reason recorded"
            status = _clause(r.get("status")) or "missing"
            groups.setdefault((status, reason), []).append((str(r["op"]), str(r["shape"]), str(r["impl"])))
        for (status, reason), rows in groups.items():
            everything = len(rows) == len(cnt)
            which = f"all {len(rows)} captures" if everything and len(rows) > 1 else _captures(rows)
            out.append(_sentence(f"Counters {status}: {which} ({reason})"))

    if kt is not None and not kt.empty and "gpu_uuid" in kt:
        known = kt[kt["gpu_uuid"].notna()]
        for (op, shape), grp in known.groupby(["op", "shape"], sort=False):
            uuids = list(dict.fromkeys(str(u) for u in grp["gpu_uuid"]))
            if len(uuids) < 2:
                continue
            ran = [f"{_and(grp[grp['gpu_uuid'].astype(str) == u]['impl'].astype(str).tolist())} on {u}" for u in uuids]
            out.append(_sentence(f"Measured on {_number_word(len(uuids))} GPUs: {op} {shape} ran {_and(ran)}, so a ratio "
                                 f"between captures on different GPUs compares {_number_word(len(uuids))} devices"))

    if chk is not None and not chk.empty and "passed" in chk:
        for r in chk[~chk["passed"].map(_truthy)].to_dict("records"):
            detail = _clause(r.get("error"))
            if not detail:
                bits = [f"{label} {_float(r.get(col)):.3g}" for col, label in
                        (("max_abs_err", "max abs error"), ("max_rel_err", "max rel error"), ("atol", "atol"), ("rtol", "rtol"))
                        if _float(r.get(col)) is not None]
                detail = ", ".join(bits) or "no detail recorded"
            out.append(_sentence(f"Check failed: {r['op']} {r['shape']} {r['impl']} ({detail})"))

    if state is not None and not state.empty and "disturbed" in state:
        hit = state[state["disturbed"].map(_truthy)]
        for (op, shape), grp in hit.groupby(["op", "shape"], sort=False):
            impls = grp["impl"].astype(str).tolist()
            text = _flag_text(grp["flags"].tolist() if "flags" in grp else [])
            out.append(_sentence(f"Disturbed capture: {op} {shape} {_and(impls)} ({text})"))

    if dft is not None and not dft.empty:
        bound = drift_bound(dft)
        if bound["count"] == 0:
            out.append(_sentence(f"Drift not bounded: {bound['summary']}"))
    return out


# --------------------------------------------------------------------------------------------
# What a report template needs


def report_context(controls: str | Path | pd.DataFrame | None, drifted: str | Path | pd.DataFrame | None, *,
                   counters: str | Path | pd.DataFrame | None = None, check: str | Path | pd.DataFrame | None = None,
                   kernel_time: str | Path | pd.DataFrame | None = None,
                   gpu_state: str | Path | pd.DataFrame | None = None) -> dict[str, Any]:
    """What a report template needs from the trust tables, given as paths or DataFrames (any may be
    absent: a namespace retained before these tables existed has neither controls nor drift).

    controls (rows, with rankable/under_load as booleans), by_key ('op shape' -> row), rankable
    ('op shape' -> bool), above (status above or under load), under_load, below, outside (above,
    under load or below), suspect (rows with a suspect capture), not_rankable, establishing,
    set_aside ([{op, shape, namespace, reason}] for every namespace left out of a band) and
    set_aside_summary (one sentence naming them, '' when none), any_band,
    drift (rows), bound (drift_bound: `summary`, `control`, `sentence`, ...), earlier, flags
    (flags(...) of the tables given), library_note, library_reason."""

    def records(frame: pd.DataFrame | None) -> list[dict[str, Any]]:
        return [] if frame is None else [{k: (None if _missing(v) else v) for k, v in r.items()}
                                         for r in frame.to_dict("records")]

    ctl, dft = _table(controls), _table(drifted)
    rows = records(ctl)
    for r in rows:
        r["under_load"] = _truthy(r.get("under_load"))
        r["rankable"] = rankable(ctl, str(r["op"]), str(r["shape"]))
    bound = drift_bound(dft) if dft is not None and len(dft) else None
    margins = [r["margin"] for r in rows if r.get("margin") is not None]
    set_aside = []
    for r in rows:
        for item in str(r.get("set_aside") or "").split("; "):
            m = re.match(r"^(\S+) \((.*)\)$", item.strip())
            if m:
                set_aside.append({"op": r["op"], "shape": r["shape"], "namespace": m.group(1), "reason": m.group(2)})
    above = [r for r in rows if r.get("status") in ABOVE or (r.get("status") == "outside" and r.get("side") == "above")]
    left: dict[tuple[str, str], list[str]] = {}
    for aside in set_aside:
        left.setdefault((aside["namespace"], aside["reason"]), []).append(f"{aside['op']} {aside['shape']}")
    set_aside_summary = _sentence("Left out of the control bands: " + "; ".join(
        f"{name} at {_and(where) if len(where) <= 3 else _count(len(where), 'shape')} ({reason})"
        for (name, reason), where in left.items())) if left else ""
    return {
        "controls": rows,
        "by_key": {f"{r['op']} {r['shape']}": r for r in rows},
        "rankable": {f"{r['op']} {r['shape']}": r["rankable"] for r in rows},
        "control": rows[0]["control"] if rows else None,
        "margin": margins[0] if margins else None,
        "above": above,
        "under_load": [r for r in rows if r["under_load"]],
        "below": [r for r in rows if r.get("status") == "below"],
        "outside": [r for r in rows if r.get("status") in ("above", "under load", "below", "outside")],
        "suspect": [r for r in rows if r.get("suspect")],
        "not_rankable": [r for r in rows if not r["rankable"]],
        "establishing": [r for r in rows if r.get("status") == "establishing"],
        "set_aside": set_aside,
        "set_aside_summary": set_aside_summary,
        "any_band": any(r.get("band_lo_us") is not None for r in rows),
        "drift": records(dft),
        "bound": bound,
        "earlier": bound["earlier"] if bound else None,
        "flags": flags(ctl, dft, counters, check, kernel_time, gpu_state),
        "library_note": LIBRARY_NOTE,
        "library_reason": LIBRARY_REASON,
    }


__all__ = [
    "ABOVE", "BAND_COLUMNS", "MARGIN", "and_", "flag_clause", "CONTROL_COLUMNS", "DRIFT_COLUMNS", "LIBRARY_IMPLS", "LIBRARY_NOTE", "LIBRARY_REASON", "OURS",
    "ROLES", "STATUSES", "Retained", "check_earlier", "choose_earlier", "classify_controls", "control_bands", "drift",
    "drift_bound", "earlier_namespaces", "flags", "identity_change", "kernel_identity", "load_namespace",
    "namespace_controls", "rankable", "report_context", "retained", "retained_inputs", "trust_tables",
]
