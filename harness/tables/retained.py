"""A retained namespace as the trust rules see it (`Retained`: its kernel time, census, GPU model,
NVML record and date), loaded from its folder or the history index, and a kernel's identity from
the census (what makes two captures "the same kernel": the same inputs, or the same machine code)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import sqlite_utils

from harness.errors import EvidenceError
from harness.gpu.watch import POWER_CAP_FLAG
from harness.io import row_dicts
from harness.tables import history
from harness.tables.phrases import _missing, _truthy, _float

LIBRARY_IMPLS = ("torch",)
"""Library baselines: never compared across namespaces."""

IDENTITY_COLUMNS = ["kernel", "specialization", "source_sha256", "compiler", "options"]
"""What a kernel was built from: a census row's inputs."""

CODE_COLUMN = "sass_sha256"
"""What a kernel was built to: its machine code. An identity tuple carries it after the inputs."""

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
    _own_windows: dict[tuple[str, str, str], bool] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        state = self.gpu_state
        if state is None or state.empty or not {"op", "shape", "impl"} <= set(state.columns):
            return
        for rec in row_dicts(state):
            key = (str(rec["op"]), str(rec["shape"]), str(rec["impl"]))
            flagged = _truthy(rec.get("disturbed"))
            samples = _float(rec.get("during_samples")) if "during_samples" in rec else 1.0
            if not flagged and not samples:
                continue  # NVML could not be read during this capture: unknown, never quiet
            text = "" if _missing(rec.get("flags")) else str(rec.get("flags"))
            old = self._state.get(key, (False, ""))
            self._state[key] = (old[0] or flagged, "; ".join(t for t in (old[1], text) if t))
            own = str(rec.get("during_extent") or "") == "group"
            self._own_windows[key] = self._own_windows.get(key, True) and own

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

    def own_power_cap(self, op: str, shape: str) -> bool:
        """NVML flagged every capture at (op, shape), each for nothing but the software power cap and
        read in the group's own windows (`during_extent` "group"): the cap came in the group's time
        (its own work, or its neighbour's still in NVML's power average), no other process ran, no
        other group's readings count, and the readings span the group, so the cap held the clock
        down under every implementation of its interleaved rounds. False where a capture there was
        not flagged or not read so, or nothing was."""
        at_shape = {impl: own for (o, s, impl), own in self._own_windows.items() if o == op and s == shape}
        flagged = self.group_flags(op, shape)
        return (bool(at_shape) and all(at_shape.values()) and set(flagged) == set(at_shape)
                and all(set(text.split("; ")) == {POWER_CAP_FLAG} for text in flagged.values()))

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


def cache_mode(ns: Retained) -> str | None:
    kt = ns.kernel_time
    if kt is None or kt.empty or "cache_mode" not in kt:
        return None
    modes = kt["cache_mode"].dropna().astype(str).unique()
    return modes[0] if len(modes) == 1 else None


# --------------------------------------------------------------------------------------------
# Kernel identity from the census


def kernel_identity(census: pd.DataFrame | None, op: str, impl: str, shape: str) -> frozenset[tuple[str, ...]]:
    """The census rows of (op, impl) that serve `shape`, as a set of (kernel, specialization,
    source_sha256, compiler, options, sass_sha256): IDENTITY_COLUMNS, then CODE_COLUMN ('' where the
    census has none); empty where the census has no such row. The census names shapes by their
    dimensions, so a shape with a tag ('65536x1048576x64-powerlaw', another graph through the same
    kernels) is served by the rows of its dimensions ('65536x1048576x64'). A census is read once per
    frame (`_identities`): the trust rules ask it once per namespace, shape and implementation, and
    the history grows with every retained namespace."""
    if census is None or census.empty or not {"op", "impl", "shapes"} <= set(census.columns):
        return frozenset()
    dims = shape.split("-", 1)[0]
    return frozenset(identity for served, identity in _identities(census).get((op, impl), ())
                     if shape in served or dims in served)


_IDENTITY_INDEX: dict[int, tuple[tuple[int, Any], dict[tuple[str, str], list[tuple[frozenset[str], tuple[str, ...]]]]]] = {}
"""id(census) -> (its length and its columns' Index object when read, {(op, impl): [(shapes
served, identity)]}); an entry leaves with its frame (weakref.finalize), and a frame whose length
changed, or whose columns were replaced (an Index is immutable: any change of the columns is a new
one), since is read again."""


def _identities(census: pd.DataFrame) -> dict[tuple[str, str], list[tuple[frozenset[str], tuple[str, ...]]]]:
    key, length, columns = id(census), len(census), census.columns
    got = _IDENTITY_INDEX.get(key)
    if got is not None and got[0][0] == length and got[0][1] is columns:
        return got[1]
    index: dict[tuple[str, str], list[tuple[frozenset[str], tuple[str, ...]]]] = {}
    for rec in row_dicts(census):
        shapes = rec.get("shapes")
        served = frozenset(s.strip() for s in str(shapes if shapes is not None else "").split(";"))
        identity = tuple("" if _missing(rec.get(c)) else str(rec.get(c)) for c in (*IDENTITY_COLUMNS, CODE_COLUMN))
        index.setdefault((str(rec["op"]), str(rec["impl"])), []).append((served, identity))
    if got is None:
        weakref.finalize(census, _IDENTITY_INDEX.pop, key, None)
    _IDENTITY_INDEX[key] = ((length, columns), index)
    return index


def identity_change(before: frozenset, after: frozenset) -> str | None:
    """None when the two identities are the same kernel; else the first difference, in the order
    'missing', 'changed source', 'changed compiler', 'changed options', 'changed specialization'.

    The same kernel: built from the same inputs (every IDENTITY_COLUMNS value; the machine code may
    still differ, where the compiler writes another for the same source), or built to the same
    machine code (the same kernels and specializations with the same SASS hash, every row having
    one), whatever the source: an edit elsewhere in the file, or a comment, leaves the kernel as it was."""
    if not before or not after:
        return "missing"
    inputs = len(IDENTITY_COLUMNS)
    if {r[:inputs] for r in before} == {r[:inputs] for r in after}:
        return None
    code = {(r[0], r[1], r[inputs]) for r in before}
    if all(r[inputs] for r in before | after) and code == {(r[0], r[1], r[inputs]) for r in after}:
        return None
    for i, reason in ((2, "changed source"), (3, "changed compiler"), (4, "changed options")):
        if {r[i] for r in before} != {r[i] for r in after}:
            return reason
    return "changed specialization"


