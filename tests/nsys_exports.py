"""Build small synthetic nsys SQLite exports for the reader's tests.

The tables follow the schema of a real `nsys export --type sqlite` (Nsight Systems 2025.3, see
tests/fixtures/nsys/h200-torch-layer-norm.sqlite.gz), with switches for the differences between
export versions that the reader has to tolerate:

* the metadata table's name (META_DATA_EXPORT in newer exports, EXPORT_META_DATA in older ones);
* kernel table columns added or missing (greenContextId, ...) and their order;
* NVTX text inline in `text` or registered in StringIds (`textId`);
* optional tables left out (NVTX_EVENTS, CUPTI_ACTIVITY_KIND_RUNTIME, the kernel table,
  ENUM_NSYS_EVENT_TYPE, TARGET_INFO_GPU), and event type ids other than the usual ones;
* text that is not valid UTF-8 (pass bytes: they are stored as TEXT without validation).

Timestamps are plain integers (ns). Thread and process ids are packed the way nsys packs them:
globalTid = vm << 48 | pid << 24 | tid and globalPid = vm << 48 | pid << 24.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VM = 1

# Event type ids as in ENUM_NSYS_EVENT_TYPE of the real export.
EVENT_TYPES = {
    "NvtxMark": 34,
    "NvtxPushPopRange": 59,
    "NvtxStartEndRange": 60,
    "NvtxtPushPopRange": 70,
    "NvtxtStartEndRange": 71,
    "NvtxDomainCreate": 75,
}

KERNEL_COLUMNS = [
    ("start", "INTEGER NOT NULL"), ("end", "INTEGER NOT NULL"), ("deviceId", "INTEGER NOT NULL"),
    ("contextId", "INTEGER NOT NULL"), ("greenContextId", "INTEGER"), ("streamId", "INTEGER NOT NULL"),
    ("correlationId", "INTEGER"), ("globalPid", "INTEGER"), ("demangledName", "INTEGER NOT NULL"),
    ("shortName", "INTEGER NOT NULL"), ("mangledName", "INTEGER"), ("launchType", "INTEGER"),
    ("cacheConfig", "INTEGER"), ("registersPerThread", "INTEGER NOT NULL"), ("gridX", "INTEGER NOT NULL"),
    ("gridY", "INTEGER NOT NULL"), ("gridZ", "INTEGER NOT NULL"), ("blockX", "INTEGER NOT NULL"),
    ("blockY", "INTEGER NOT NULL"), ("blockZ", "INTEGER NOT NULL"),
    ("staticSharedMemory", "INTEGER NOT NULL"), ("dynamicSharedMemory", "INTEGER NOT NULL"),
    ("localMemoryPerThread", "INTEGER NOT NULL"), ("localMemoryTotal", "INTEGER NOT NULL"),
    ("gridId", "INTEGER NOT NULL"), ("sharedMemoryExecuted", "INTEGER"), ("graphNodeId", "INTEGER"),
    ("sharedMemoryLimitConfig", "INTEGER"),
]
RUNTIME_COLUMNS = [
    ("start", "INTEGER NOT NULL"), ("end", "INTEGER NOT NULL"), ("eventClass", "INTEGER NOT NULL"),
    ("globalTid", "INTEGER"), ("correlationId", "INTEGER"), ("nameId", "INTEGER NOT NULL"),
    ("returnValue", "INTEGER NOT NULL"), ("callchainId", "INTEGER"),
]
NVTX_COLUMNS = [
    ("start", "INTEGER NOT NULL"), ("end", "INTEGER"), ("eventType", "INTEGER NOT NULL"),
    ("rangeId", "INTEGER"), ("category", "INTEGER"), ("color", "INTEGER"), ("text", "TEXT"),
    ("globalTid", "INTEGER"), ("endGlobalTid", "INTEGER"), ("textId", "INTEGER"),
    ("domainId", "INTEGER"), ("uint64Value", "INTEGER"), ("int64Value", "INTEGER"),
    ("doubleValue", "REAL"), ("uint32Value", "INTEGER"), ("int32Value", "INTEGER"),
    ("floatValue", "REAL"), ("jsonTextId", "INTEGER"), ("jsonText", "TEXT"), ("binaryData", "TEXT"),
]
GPU_COLUMNS = [
    ("vmId", "INTEGER NOT NULL"), ("id", "INTEGER NOT NULL"), ("name", "TEXT"), ("busLocation", "TEXT"),
    ("uuid", "TEXT"), ("chipName", "TEXT"), ("smCount", "INTEGER"), ("totalMemory", "INTEGER"),
]


def global_tid(pid: int, tid: int, vm: int = VM) -> int:
    return (vm << 48) | (pid << 24) | tid


def global_pid(pid: int, vm: int = VM) -> int:
    return (vm << 48) | (pid << 24)


Text = str | bytes


@dataclass
class Kernel:
    start: int
    end: int
    name: Text
    pid: int
    corr: int | None
    short: Text | None = None
    device: int = 0
    stream: int = 7
    grid: tuple[int, int, int] = (128, 1, 1)
    block: tuple[int, int, int] = (256, 1, 1)
    registers: int = 32
    static_smem: int = 0
    dynamic_smem: int = 0
    graph_node: int | None = None

    @property
    def dur(self) -> int:
        return self.end - self.start


@dataclass
class Call:
    """A CUDA runtime API call (CUPTI_ACTIVITY_KIND_RUNTIME row)."""
    start: int
    end: int
    pid: int
    tid: int
    corr: int
    name: str = "cudaLaunchKernel_v7000"


@dataclass
class Range:
    """An NVTX push/pop ("pushpop") or start/end ("startend") range; end None = never closed."""
    start: int
    end: int | None
    text: Text
    pid: int
    tid: int
    kind: str = "pushpop"
    domain: int | None = None  # domainId; None = default domain
    end_tid: int | None = None  # thread that ended it, when another one (endGlobalTid)


@dataclass
class Domain:
    domain: int
    name: Text
    pid: int
    tid: int
    start: int = 0


@dataclass
class ExportBuilder:
    """Collects rows, then `write(path)` creates the SQLite file.

    Switches: meta_table ("META_DATA_EXPORT", "EXPORT_META_DATA" or None), version,
    nvtx_text ("inline" or "textid"), omit_kernel_columns / omit_nvtx_columns (column names to
    leave out), reverse_kernel_columns (create the kernel table with its columns in reverse order),
    with_kernels / with_runtime / with_nvtx / with_enum / with_gpus (tables present), and
    event_types (the ids written to NVTX_EVENTS and ENUM_NSYS_EVENT_TYPE)."""

    meta_table: str | None = "META_DATA_EXPORT"
    version: str = "2025.3.2.0"
    nvtx_text: str = "inline"
    omit_kernel_columns: tuple[str, ...] = ()
    omit_nvtx_columns: tuple[str, ...] = ()
    reverse_kernel_columns: bool = False
    with_kernels: bool = True
    with_runtime: bool = True
    with_nvtx: bool = True
    with_enum: bool = True
    with_gpus: bool = True
    event_types: dict[str, int] = field(default_factory=lambda: dict(EVENT_TYPES))
    gpus: list[dict[str, Any]] = field(default_factory=lambda: [
        {"id": 0, "name": "NVIDIA H200", "uuid": "00000000-1111-2222-3333-444444444444"}])
    kernels: list[Kernel] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    ranges: list[Range] = field(default_factory=list)
    domains: list[Domain] = field(default_factory=list)
    _next_corr: dict[int, int] = field(default_factory=dict)

    # -- adding rows ---------------------------------------------------------------------------

    def launch(self, pid: int, tid: int, call_start: int, kernel_start: int, dur: int, name: Text,
               call_dur: int = 1000, **kernel_args: Any) -> Kernel:
        """A runtime launch call on (pid, tid) and the kernel it launched (same correlation id)."""
        corr = self._next_corr.get(pid, 1)
        self._next_corr[pid] = corr + 1
        self.calls.append(Call(call_start, call_start + call_dur, pid, tid, corr))
        k = Kernel(kernel_start, kernel_start + dur, name, pid, corr, **kernel_args)
        self.kernels.append(k)
        return k

    def graph_launch(self, pid: int, tid: int, call_start: int, kernels: list[tuple[int, int, Text]],
                     **kernel_args: Any) -> list[Kernel]:
        """A cudaGraphLaunch call and the graph's kernels (start, dur, name): one correlation id."""
        corr = self._next_corr.get(pid, 1)
        self._next_corr[pid] = corr + 1
        self.calls.append(Call(call_start, call_start + 2000, pid, tid, corr, "cudaGraphLaunch_v10000"))
        out = []
        for node, (start, dur, name) in enumerate(kernels, start=1):
            k = Kernel(start, start + dur, name, pid, corr, graph_node=node, **kernel_args)
            self.kernels.append(k)
            out.append(k)
        return out

    def add_range(self, start: int, end: int | None, text: Text, pid: int, tid: int, **kw: Any) -> Range:
        r = Range(start, end, text, pid, tid, **kw)
        self.ranges.append(r)
        return r

    def add_domain(self, domain: int, name: Text, pid: int, tid: int, start: int = 0) -> Domain:
        d = Domain(domain, name, pid, tid, start)
        self.domains.append(d)
        return d

    # -- writing -------------------------------------------------------------------------------

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.unlink(missing_ok=True)
        conn = sqlite3.connect(path)
        strings: dict[Text, int] = {}

        def sid(value: Text) -> int:
            if value not in strings:
                strings[value] = len(strings) + 1
            return strings[value]

        def create(table: str, columns: list[tuple[str, str]]) -> list[str]:
            conn.execute(f"CREATE TABLE {table} ({', '.join(f'[{n}] {t}' for n, t in columns)})")
            return [n for n, _ in columns]

        def insert(table: str, names: list[str], row: dict[str, Any]) -> None:
            # bytes are stored as TEXT as they are (SQLite does not validate UTF-8)
            marks = ", ".join("CAST(? AS TEXT)" if isinstance(row.get(n), bytes) else "?" for n in names)
            conn.execute(f"INSERT INTO {table} ({', '.join(f'[{n}]' for n in names)}) VALUES ({marks})",
                         [row.get(n) for n in names])

        if self.meta_table:
            conn.execute(f"CREATE TABLE {self.meta_table} (name TEXT NOT NULL, value TEXT)")
            conn.executemany(f"INSERT INTO {self.meta_table} VALUES (?, ?)", [
                ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
                ("EXPORT_PRODUCT_VERSION", self.version),
                ("EXPORT_SCHEMA_VERSION", "3.20.3"),
            ])

        if self.with_enum:
            conn.execute("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)")
            conn.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)",
                             [(i, n, n) for n, i in self.event_types.items()])

        if self.with_gpus:
            names = create("TARGET_INFO_GPU", GPU_COLUMNS)
            for g in self.gpus:
                insert("TARGET_INFO_GPU", names, {"vmId": 1 << 48, "id": g["id"], "name": g.get("name"),
                                                  "uuid": g.get("uuid"), "chipName": "GH100"})

        if self.with_kernels:
            cols = [c for c in KERNEL_COLUMNS if c[0] not in self.omit_kernel_columns]
            if self.reverse_kernel_columns:
                cols = cols[::-1]
            names = create("CUPTI_ACTIVITY_KIND_KERNEL", cols)
            for grid_id, k in enumerate(self.kernels, start=1):
                insert("CUPTI_ACTIVITY_KIND_KERNEL", names, {
                    "start": k.start, "end": k.end, "deviceId": k.device, "contextId": 1,
                    "greenContextId": 0, "streamId": k.stream, "correlationId": k.corr,
                    "globalPid": global_pid(k.pid), "demangledName": sid(k.name),
                    "shortName": sid(k.short if k.short is not None else k.name),
                    "mangledName": None, "launchType": 1, "cacheConfig": 1,
                    "registersPerThread": k.registers, "gridX": k.grid[0], "gridY": k.grid[1],
                    "gridZ": k.grid[2], "blockX": k.block[0], "blockY": k.block[1], "blockZ": k.block[2],
                    "staticSharedMemory": k.static_smem, "dynamicSharedMemory": k.dynamic_smem,
                    "localMemoryPerThread": 0, "localMemoryTotal": 0, "gridId": grid_id,
                    "sharedMemoryExecuted": 0, "graphNodeId": k.graph_node, "sharedMemoryLimitConfig": 0,
                })

        if self.with_runtime:
            names = create("CUPTI_ACTIVITY_KIND_RUNTIME", RUNTIME_COLUMNS)
            for c in self.calls:
                insert("CUPTI_ACTIVITY_KIND_RUNTIME", names, {
                    "start": c.start, "end": c.end, "eventClass": 1, "globalTid": global_tid(c.pid, c.tid),
                    "correlationId": c.corr, "nameId": sid(c.name), "returnValue": 0,
                })

        if self.with_nvtx:
            cols = [c for c in NVTX_COLUMNS if c[0] not in self.omit_nvtx_columns]
            names = create("NVTX_EVENTS", cols)
            ids = self.event_types

            def text_fields(value: Text) -> dict[str, Any]:
                if self.nvtx_text == "textid":
                    return {"text": None, "textId": sid(value)}
                return {"text": value, "textId": None}

            for d in self.domains:
                insert("NVTX_EVENTS", names, {
                    "start": d.start, "end": None, "eventType": ids["NvtxDomainCreate"],
                    "globalTid": global_tid(d.pid, d.tid), "domainId": d.domain, **text_fields(d.name)})
            for n, r in enumerate(self.ranges, start=1):
                kind = ids["NvtxPushPopRange"] if r.kind == "pushpop" else ids["NvtxStartEndRange"]
                insert("NVTX_EVENTS", names, {
                    "start": r.start, "end": r.end, "eventType": kind,
                    "rangeId": n if r.kind == "startend" else None,
                    "globalTid": global_tid(r.pid, r.tid),
                    "endGlobalTid": None if r.end_tid is None else global_tid(r.pid, r.end_tid),
                    "domainId": r.domain if r.domain is not None else 0, **text_fields(r.text)})

        conn.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
        for value, i in strings.items():
            insert("StringIds", ["id", "value"], {"id": i, "value": value})
        conn.commit()
        conn.close()
        return path


# -- hand-made (hostile) exports -------------------------------------------------------------------
# An export can come from someone else, written byte by byte rather than by nsys. These helpers edit
# a written export the way such a file could look; the reader must refuse each one in one sentence.


def run_sql(path: str | Path, *statements: str) -> None:
    """Run statements on the export and commit."""
    conn = sqlite3.connect(path)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()


def set_schema_sql(path: str | Path, name: str, sql: str) -> None:
    """Replace the CREATE statement that sqlite_master holds for `name` (PRAGMA writable_schema):
    the stored rows stay as they are, only what SQLite believes about them changes."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", [sql, name])
        conn.commit()
    finally:
        conn.close()


def add_schema_row(path: str | Path, kind: str, name: str, rootpage: int, sql: str) -> None:
    """Add an entry to sqlite_master directly (a virtual table of a module SQLite lacks, say)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("INSERT INTO sqlite_master VALUES (?, ?, ?, ?, ?)", [kind, name, name, rootpage, sql])
        conn.commit()
    finally:
        conn.close()


def store_as_text(path: str | Path, table: str, column: str, where: str = "rowid = 1") -> None:
    """Store the value of `column` in the rows matched by `where` as text ('12000' where nsys wrote
    the integer 12000), keeping the column declared INTEGER: the declaration is dropped while the
    value is rewritten (no type affinity converts it back), then restored."""
    conn = sqlite3.connect(path)
    try:
        declared = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", [table]).fetchone()[0]
    finally:
        conn.close()
    typed = f"[{column}] INTEGER NOT NULL" if f"[{column}] INTEGER NOT NULL" in declared else f"[{column}] INTEGER"
    assert typed in declared, declared
    set_schema_sql(path, table, declared.replace(typed, f"[{column}]"))
    run_sql(path, f"UPDATE {table} SET [{column}] = CAST([{column}] AS TEXT) WHERE {where}")
    set_schema_sql(path, table, declared)
