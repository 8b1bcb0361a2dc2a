"""An nsys SQLite export as the reader's queries see it (harness.tables.nsys opens it, under the
read limits, and runs the reports; this module opens no file).

`_Export` holds an open export and what the queries need to know of its schema: the tables and
views it has (SQLite resolves names case-insensitively, so a view cannot hide behind another
spelling), each table validated on first read (a real, stored table; the columns the reader
computes with stored, not generated, and declared with the type nsys writes; the integer columns
holding only integers or NULL), and the SQL pieces every kernel query shares: the kernel columns,
the join of a kernel to its CUDA runtime launch call, and the NVTX range tables of the
containment join (an R*Tree where SQLite has the module). Every statement runs through the
export's limits (`Limits`: the deadline checked between statements, an SQLite failure turned into
one sentence, NsysExportError).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from harness.errors import EvidenceError

if TYPE_CHECKING:
    import sqlite_utils


class NsysExportError(EvidenceError):
    """An nsys SQLite export is missing, unreadable, refused under the reader's limits, or lacks
    the data asked for (one sentence)."""


KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # newer name first, 2022-era name second
EVENT_TYPE_ENUM = "ENUM_NSYS_EVENT_TYPE"
GPU_TABLE = "TARGET_INFO_GPU"

# The declared type (as sqlite-utils reads its affinity: int for INTEGER, str for TEXT) that nsys
# writes for each column the reader computes with; a table that declares another is refused.
# Columns only displayed (metadata, GPU descriptions) are not constrained.
_DECLARED: dict[str, dict[str, type]] = {
    KERNEL_TABLE: {c: int for c in (
        "start", "end", "correlationId", "globalPid", "demangledName", "shortName",
        "registersPerThread", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
        "staticSharedMemory", "dynamicSharedMemory")},
    RUNTIME_TABLE: {c: int for c in ("start", "end", "correlationId", "globalTid")},
    NVTX_TABLE: {**{c: int for c in ("start", "end", "eventType", "globalTid", "endGlobalTid",
                                     "textId", "domainId")}, "text": str},
    "StringIds": {"id": int, "value": str},
    EVENT_TYPE_ENUM: {"id": int, "name": str},
}

# The columns whose every value must be an integer (or NULL): times, and the ids the reader joins
# on or unpacks. Checked per read, for the columns that read uses.
_KERNEL_TIMES = ("start", "end")
_KERNEL_LINKS = ("correlationId", "globalPid")
_RUNTIME_INTEGERS = ("start", "end", "correlationId", "globalTid")
_NVTX_INTEGERS = ("start", "end", "eventType", "globalTid", "endGlobalTid", "textId", "domainId")

# NVTX event type ids, looked up by name in ENUM_NSYS_EVENT_TYPE when the export has it; these are
# the ids of every export checked (2022.4 .. 2025.3) and the fallback when the enum table is absent.
_EVENT_TYPE_DEFAULTS = {
    "NvtxPushPopRange": 59,
    "NvtxStartEndRange": 60,
    "NvtxtPushPopRange": 70,
    "NvtxtStartEndRange": 71,
    "NvtxDomainCreate": 75,
}
_PUSHPOP_TYPES = ("NvtxPushPopRange", "NvtxtPushPopRange")
_STARTEND_TYPES = ("NvtxStartEndRange", "NvtxtStartEndRange")

# A serialized globalTid is (vm id, pid, tid) packed as [.. | pid: 24 bits | tid: 24 bits];
# globalPid is the same with the tid bits zero. Kept as SQL text: SQLite reads a hex literal as a
# 64-bit two's complement integer (a decimal literal this large would become a REAL).
_PROCESS_MASK = "0xFFFFFFFFFF000000"


class Limits(Protocol):
    """The limits one export read runs under (harness.tables.nsys._Guard)."""

    def check(self) -> None:
        """Raise NsysExportError when the read is past its deadline."""

    def refusal(self, exc: sqlite3.Error) -> NsysExportError:
        """The one-sentence error for an SQLite failure while reading the export."""


@contextmanager
def _reading(guard: Limits) -> Iterator[None]:
    """Turn SQLite failures while reading an export into one-sentence errors."""
    try:
        yield
    except NsysExportError:
        raise
    except sqlite3.Error as exc:
        raise guard.refusal(exc) from None


class _Export:
    """An open export plus what the queries need to know about its schema."""

    def __init__(self, db: sqlite_utils.Database, guard: Limits, label: str) -> None:
        """Take over an open export (harness.tables.nsys opens it, under `guard`'s limits); the
        export is closed here when its catalogue cannot be read, and by `close` otherwise."""
        self.label = label
        self.db, self.guard = db, guard
        try:
            with self.reading():
                # lower-cased name -> (name as stored, "table" or "view"): SQLite resolves names
                # case-insensitively, so a view cannot hide behind another spelling
                self.catalogue = {n.lower(): (n, "view") for n in self.db.view_names()}
                self.catalogue.update({n.lower(): (n, "table") for n in self.db.table_names()})
        except NsysExportError:
            self.db.close()
            raise
        self._columns: dict[str, set[str]] = {}
        self._integers_checked: set[tuple[str, str]] = set()
        self.range_base: int | None = None  # set by prepare_ranges

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> _Export:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reading(self) -> AbstractContextManager[None]:
        return _reading(self.guard)

    def present(self, table: str) -> bool:
        """Whether the export has a table or view of that name (validated on first read)."""
        return table.lower() in self.catalogue

    def columns(self, table: str) -> set[str]:
        """The columns of `table` (empty when the export has none of that name), after checking
        that it is a real table whose columns that the reader computes with are stored (not
        generated) and declared with the type nsys writes; NsysExportError otherwise."""
        if table not in self._columns:
            self._columns[table] = self._validated_columns(table)
        return self._columns[table]

    def _validated_columns(self, table: str) -> set[str]:
        entry = self.catalogue.get(table.lower())
        if entry is None:
            return set()
        name, kind = entry
        label = self.label
        if kind == "view":
            raise NsysExportError(
                f"{label} has {table} as a view, not a table, and the reader reads only tables, so "
                "it is refused.")
        with self.reading():
            t = self.db.table(name)
            rootpage = self.db.execute(
                "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", [name]).fetchone()
            if t.virtual_table_using is not None or not rootpage or not rootpage[0]:
                raise NsysExportError(
                    f"{label} has {table} as a virtual table, not a stored table, so it is refused.")
            declared = t.columns_dict  # {name: python type of the declared type's affinity}
            from sqlite_utils.db import quote_identifier

            hidden = {row[1] for row in self.db.execute(
                f"PRAGMA main.table_xinfo({quote_identifier(name)})") if row[6]}
        want = _DECLARED.get(table, {})
        for col in want:
            if col in hidden:
                raise NsysExportError(
                    f"{label} has {table}.{col} as a generated column, not stored data, so it is "
                    "refused.")
        for col, kind_ in declared.items():
            if col in want and kind_ is not want[col]:
                decl = next(c.type for c in t.columns if c.name == col)
                raise NsysExportError(
                    f"{label} declares {table}.{col} as {decl!r}, where nsys writes "
                    f"{'INTEGER' if want[col] is int else 'TEXT'}, so it is refused.")
        return set(declared)

    def has(self, table: str, *cols: str) -> bool:
        have = self.columns(table)
        return self.present(table) and all(c in have for c in cols)

    def col(self, alias: str, table: str, name: str, default: str = "NULL") -> str:
        """`alias."name"` when the table has that column, else `default` (optional columns)."""
        return f'{alias}."{name}"' if name in self.columns(table) else default

    def require_integers(self, table: str, cols: Sequence[str]) -> None:
        """Refuse the export when one of these columns (those the table has) holds a value that
        is not an integer or NULL: text, a real number or a blob."""
        todo = [c for c in cols if c in self.columns(table) and (table, c) not in self._integers_checked]
        if not todo:
            return

        def bad(c: str) -> str:
            return f"typeof(\"{c}\") NOT IN ('integer', 'null')"

        sql = "SELECT EXISTS (SELECT 1 FROM main.{} WHERE {})"
        if self.execute(sql.format(table, " OR ".join(bad(c) for c in todo))).fetchone()[0]:
            col = next(c for c in todo if self.execute(sql.format(table, bad(c))).fetchone()[0])
            raise NsysExportError(
                f"{self.label} has values in {table}.{col} that are not integers (text, real numbers "
                "or blobs where nsys writes integers), so it is refused.")
        self._integers_checked.update((table, c) for c in todo)

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> sqlite3.Cursor:
        self.guard.check()
        with self.reading():
            return self.db.execute(sql, params)

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        self.guard.check()
        with self.reading():
            return list(self.db.query(sql, params))

    # -- pieces shared by every kernel query --------------------------------------------------

    def require_kernels(self) -> None:
        """Check the kernel and string tables a kernel summary reads (kernel times integers)."""
        if not self.present(KERNEL_TABLE):
            raise NsysExportError(
                f"{self.label} has no CUDA kernel records (no {KERNEL_TABLE} table); the capture "
                "probably lacked `-t cuda` or ran no kernel.")
        if not self.has(KERNEL_TABLE, "start", "end") or not (
                self.has(KERNEL_TABLE, "demangledName") or self.has(KERNEL_TABLE, "shortName")):
            raise NsysExportError(
                f"{self.label} has a {KERNEL_TABLE} table without start, end and kernel name columns.")
        if not self.has("StringIds", "id", "value"):
            raise NsysExportError(f"{self.label} has no StringIds table, so kernels cannot be named.")
        self.require_integers(KERNEL_TABLE, _KERNEL_TIMES)

    def event_types(self) -> dict[str, int]:
        ids = dict(_EVENT_TYPE_DEFAULTS)
        if self.has(EVENT_TYPE_ENUM, "id", "name"):
            self.require_integers(EVENT_TYPE_ENUM, ["id"])
            rows = self.execute(
                f"SELECT name, id FROM main.{EVENT_TYPE_ENUM} "
                f"WHERE name IN ({','.join('?' * len(ids))}) AND id IS NOT NULL",
                list(ids)).fetchall()
            ids.update({name: int(i) for name, i in rows})
        return ids

    def name_columns(self) -> tuple[str, str]:
        """The kernel's name and short name string ids, from CUPTI_ACTIVITY_KIND_KERNEL AS k."""
        t = KERNEL_TABLE
        name = 'k."demangledName"' if self.has(t, "demangledName") else 'k."shortName"'
        short = 'k."shortName"' if self.has(t, "shortName") else name
        return name, short

    def geometry(self, sep: str) -> tuple[str, str]:
        """SQL for the kernel's grid and block as "X<sep>Y<sep>Z" (NULL without those columns)."""
        t = KERNEL_TABLE
        out = []
        for dims in ("grid", "block"):
            cols = [f"{dims}{axis}" for axis in "XYZ"]
            out.append(f" || '{sep}' || ".join(f"k.{c}" for c in cols) if self.has(t, *cols) else "NULL")
        return out[0], out[1]

    def kernel_select(self) -> str:
        """The kernel columns every summary reads, from CUPTI_ACTIVITY_KIND_KERNEL AS k."""
        t = KERNEL_TABLE
        name, short = self.name_columns()
        grid, block = self.geometry("x")
        return f"""
            k.rowid AS kern_id,
            k."end" - k.start AS dur,
            {name} AS name_id,
            {short} AS short_id,
            {grid} AS grid,
            {block} AS block,
            {self.col('k', t, 'registersPerThread')} AS registers,
            {self.col('k', t, 'staticSharedMemory')} AS static_smem,
            {self.col('k', t, 'dynamicSharedMemory')} AS dynamic_smem"""

    def runtime_join(self) -> str:
        """The ON condition joining temp.nsys_rt AS r to the kernel k ('0' when impossible)."""
        t = KERNEL_TABLE
        if self.has(t, "correlationId") and self.has(t, "globalPid"):
            return "r.corr = k.correlationId AND r.gpid = k.globalPid"
        if self.has(t, "correlationId"):
            return "r.corr = k.correlationId"
        return "0"

    def prepare_runtime(self) -> None:
        """temp.nsys_rt: the runtime API calls (the kernels' launch calls), indexed by correlation id
        and process. Empty when the export has no usable CUPTI_ACTIVITY_KIND_RUNTIME table."""
        self.require_integers(KERNEL_TABLE, _KERNEL_LINKS)
        self.execute("DROP TABLE IF EXISTS temp.nsys_rt")
        self.execute(
            'CREATE TEMP TABLE nsys_rt (corr INTEGER, gpid INTEGER, gtid INTEGER, start INTEGER, "end" INTEGER)')
        if self.has(RUNTIME_TABLE, "correlationId", "globalTid", "start", "end"):
            self.require_integers(RUNTIME_TABLE, _RUNTIME_INTEGERS)
            self.execute(f"""
                INSERT INTO temp.nsys_rt
                SELECT correlationId, globalTid & {_PROCESS_MASK}, globalTid, start, "end"
                FROM main.{RUNTIME_TABLE}
                WHERE correlationId IS NOT NULL""")
        self.execute("CREATE INDEX temp.nsys_rt_corr ON nsys_rt (corr, gpid)")

    def _rtree_available(self) -> bool:
        try:
            self.db.execute("CREATE VIRTUAL TABLE temp.nsys_rtree_probe USING rtree(id, lo, hi)")
            self.db.execute("DROP TABLE temp.nsys_rtree_probe")
            return True
        except sqlite3.OperationalError:
            return False

    def prepare_ranges(self, text: str | None = None, prefix: str | None = None) -> None:
        """Build the NVTX range tables of the containment join, in the TEMP schema:

        nsys_ranges: one row per NVTX push/pop or start/end range (id = NVTX_EVENTS rowid, name
        "<domain>:<text>", text, style, thread, start, end);
        nsys_range_names: one row per distinct (name, style), its integer `key` the group key;
        nsys_range_idx: the ranges as [start, end] boxes with thread and name key, an R*Tree when
        SQLite has the module, else a table indexed by thread and start.
        With `text`, only the ranges whose text (without the domain prefix) equals it; with
        `prefix`, only those whose text starts with it."""
        for table in ("nsys_range_idx", "nsys_range_names", "nsys_ranges"):
            self.execute(f"DROP TABLE IF EXISTS temp.{table}")
        self.execute("""
            CREATE TEMP TABLE nsys_ranges (
                id INTEGER PRIMARY KEY, name TEXT, text TEXT, style TEXT,
                gtid INTEGER, start INTEGER, "end" INTEGER)""")
        self.execute("""
            CREATE TEMP TABLE nsys_range_names (
                key INTEGER PRIMARY KEY, name TEXT, style TEXT, UNIQUE (name, style))""")
        ne = NVTX_TABLE
        if self.has(ne, "start", "eventType", "globalTid"):
            self.require_integers(ne, _NVTX_INTEGERS)
            ids = self.event_types()
            types = [ids[n] for n in _PUSHPOP_TYPES + _STARTEND_TYPES]
            pushpop = ", ".join(str(ids[n]) for n in _PUSHPOP_TYPES)
            startend = ", ".join(str(ids[n]) for n in _STARTEND_TYPES)
            in_types = ", ".join(str(i) for i in types)
            end = self.col("ne", ne, "end")
            text_id = self.col("ne", ne, "textId")
            inline = self.col("ne", ne, "text")
            domain_id = self.col("ne", ne, "domainId")
            label = f"coalesce(sid.value, {inline}, '')"
            single_thread = (f'{self.col("ne", ne, "endGlobalTid")} IS NULL'
                             if self.has(ne, "endGlobalTid") else "1")
            # A range with no end lasts until the last range timestamp of the export (as in nsys).
            last = f"""(SELECT max(max(start), coalesce(max("end"), max(start)))
                        FROM main.{ne} WHERE eventType IN ({in_types}))""" if self.has(ne, "end") else \
                f"(SELECT max(start) FROM main.{ne} WHERE eventType IN ({in_types}))"
            params: dict[str, Any] = {}
            where_text = ""
            if text is not None:
                where_text += f" AND {label} = :text"
                params["text"] = text
            if prefix is not None:
                where_text += f" AND substr({label}, 1, length(:prefix)) = :prefix"
                params["prefix"] = prefix
            self.execute(f"""
                INSERT INTO temp.nsys_ranges
                WITH domains AS (
                    SELECT dom.domainId AS id, (dom.globalTid >> 24) & 0xFFFFFF AS pid,
                           coalesce(dsid.value, dom.text) AS name, min(dom.start)
                    FROM (SELECT {domain_id} AS domainId, ne.globalTid AS globalTid, ne.start AS start,
                                 {text_id} AS textId, {inline} AS text
                          FROM main.{ne} AS ne
                          WHERE ne.eventType = {ids['NvtxDomainCreate']}) AS dom
                    LEFT JOIN main.StringIds AS dsid ON dsid.id = dom.textId
                    GROUP BY 1, 2
                )
                SELECT
                    ne.rowid,
                    coalesce(d.name, '') || ':' || {label},
                    {label},
                    CASE WHEN ne.eventType IN ({pushpop}) THEN 'PushPop'
                         WHEN ne.eventType IN ({startend}) THEN 'StartEnd' END,
                    ne.globalTid,
                    ne.start,
                    coalesce({end}, {last})
                FROM main.{ne} AS ne
                LEFT JOIN domains AS d
                    ON d.id = {domain_id} AND d.pid = (ne.globalTid >> 24) & 0xFFFFFF
                LEFT JOIN main.StringIds AS sid ON sid.id = {text_id}
                WHERE ne.eventType IN ({in_types}) AND {single_thread}{where_text}
                """, params)
        self.execute("""
            INSERT INTO temp.nsys_range_names (name, style)
            SELECT DISTINCT name, style FROM temp.nsys_ranges ORDER BY name, style""")
        base = self.execute("SELECT coalesce(min(start), 0) FROM temp.nsys_ranges").fetchone()[0]
        if self._rtree_available():
            # R*Tree coordinates are 32-bit floats rounded outwards (lower bounds down, upper bounds
            # up), so the box test can only over-select; the exact test runs on the + columns.
            self.execute("""CREATE VIRTUAL TABLE temp.nsys_range_idx USING rtree(
                id, lo, hi, +gtid INTEGER, +start INTEGER, +stop INTEGER, +name_key INTEGER)""")
        else:
            self.execute("""CREATE TEMP TABLE nsys_range_idx (
                id INTEGER PRIMARY KEY, lo INTEGER, hi INTEGER, gtid INTEGER, start INTEGER,
                stop INTEGER, name_key INTEGER)""")
            self.execute("CREATE INDEX temp.nsys_range_idx_thread ON nsys_range_idx (gtid, start)")
        # Ranges whose end precedes their start can contain nothing (and would upset the R*Tree).
        self.execute(f"""
            INSERT INTO temp.nsys_range_idx
            SELECT r.id, r.start - {int(base)}, r."end" - {int(base)}, r.gtid, r.start, r."end", n.key
            FROM temp.nsys_ranges AS r
            JOIN temp.nsys_range_names AS n ON n.name IS r.name AND n.style IS r.style
            WHERE r.start IS NOT NULL AND r."end" >= r.start""")
        self.range_base = int(base)

    def containment(self) -> str:
        """The ON condition: range ri (temp.nsys_range_idx) is open on the thread of launch call r
        over the whole call."""
        b = self.range_base
        return f"""ri.lo <= r.start - {b} AND ri.hi >= r."end" - {b}
                AND ri.start <= r.start AND ri.stop >= r."end" AND ri.gtid = r.gtid"""

    def combo_sql(self) -> str:
        """One row per (NVTX range instance, kernel) pair, plus one row with NULL range columns per
        kernel that no range contains: the relation nvtx_kern_sum aggregates."""
        return f"""
            SELECT
                ri.name_key AS range_key,
                ri.id AS nvtx_id,
                (r.gtid >> 24) & 0xFFFFFF AS pid,
                r.gtid & 0xFFFFFF AS tid,
                {self.kernel_select()}
            FROM main.{KERNEL_TABLE} AS k
            LEFT JOIN temp.nsys_rt AS r
                ON {self.runtime_join()}
            LEFT JOIN temp.nsys_range_idx AS ri
                ON {self.containment()}
            WHERE k.start IS NOT NULL AND k."end" IS NOT NULL"""

    def kernels_sql(self) -> str:
        """One row per kernel: the relation cuda_gpu_kern_sum aggregates."""
        return f"""
            SELECT NULL AS nvtx_id, {self.kernel_select()}
            FROM main.{KERNEL_TABLE} AS k
            WHERE k.start IS NOT NULL AND k."end" IS NOT NULL"""
