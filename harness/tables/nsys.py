"""Read Nsight Systems SQLite exports (`nsys export --type sqlite`).

This module computes, from the export alone, the figures that `nsys stats` prints for the reports
`cuda_gpu_kern_sum` (`kern_sum`) and `nvtx_kern_sum` (`nvtx_kern_sum`): the same columns, the same
rounding, the same sort order. The pipeline's kernel-time table comes from `range_kernels`, which
runs the very same SQL as `nvtx_kern_sum`, only filtered to one NVTX range and grouped per kernel.

All aggregation happens in SQLite (GROUP BY, window functions for the median), so memory stays
bounded on exports of hundreds of MB: kernel rows are never loaded into Python. The export is
opened read-only; the helper tables this module builds live in the connection's TEMP schema.

Rules taken from nsys's own report scripts (and checked against a real export and the CSVs that
`nsys stats` printed for it, see tests/fixtures/nsys/):

* a kernel's duration is `end - start` of its CUPTI_ACTIVITY_KIND_KERNEL row; kernels are named by
  their demangled name (StringIds);
* Avg, Med and StdDev are rounded with Python's round(x, 1) (not SQLite's, which differs at ties); StdDev is the sample standard
  deviation (0.0 for a single instance); Time (%) is round(100 * total / sum of totals, 1);
* cuda_gpu_kern_sum is sorted by Total Time descending, then Instances, then Name;
* a kernel belongs to every NVTX push/pop or start/end range that is open, on the thread that made
  the kernel's CUDA runtime launch call, over the whole launch call (range start <= call start
  and call end <= range end); the kernel is joined to its runtime record by correlationId within
  its process (correlation ids repeat across processes);
* ranges are named "<domain>:<text>" (":text" for the default domain); ranges that end on
  another thread than they started (endGlobalTid set) are ignored, as nsys does; a range with no
  end lasts until the last NVTX range timestamp of the export;
* kernels in no range (or with no runtime record) form rows with an empty range name, NVTX Inst 0;
* nvtx_kern_sum groups by (PID, TID, range name, style, kernel name) and is sorted by range name,
  PID, TID, then Total Time descending. As in nsys, the duration figures run over (range
  instance, kernel) pairs while Kern Inst counts distinct kernels, so a kernel inside two nested
  ranges of the same name is counted once in Kern Inst but twice in Total Time.
"""

from __future__ import annotations

import csv
import decimal
import io
import sqlite3
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from harness.errors import EvidenceError

__all__ = [
    "NsysExportError", "KERN_SUM_COLUMNS", "NVTX_KERN_SUM_COLUMNS", "RANGE_KERNEL_KEYS",
    "open_export", "kern_sum", "nvtx_kern_sum", "range_kernels", "export_info",
    "format_csv", "format_table",
]


class NsysExportError(EvidenceError):
    """An nsys SQLite export is missing, unreadable or lacks the data asked for (one sentence)."""


KERN_SUM_COLUMNS = [
    "Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
    "StdDev (ns)", "Name",
]
"""The columns of `nsys stats -r cuda_gpu_kern_sum`, in order."""

NVTX_KERN_SUM_COLUMNS = [
    "NVTX Range", "Style", "PID", "TID", "NVTX Inst", "Kern Inst", "Total Time (ns)", "Avg (ns)",
    "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Kernel Name",
]
"""The columns of `nsys stats -r nvtx_kern_sum`, in order."""

RANGE_KERNEL_KEYS = [
    "kernel", "short_name", "instances", "total_ns", "mean_ns", "median_ns", "min_ns", "max_ns",
    "stddev_ns", "grid", "block", "registers", "static_smem", "dynamic_smem", "range_instances",
]
"""The keys of each dict that `range_kernels` returns."""

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # newer name first, 2022-era name second
EVENT_TYPE_ENUM = "ENUM_NSYS_EVENT_TYPE"

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

_SQLITE_MAGIC = b"SQLite format 3\x00"


# ----------------------------------------------------------------------------------------------
# Opening and validating


def _decode_text(raw: bytes) -> str:
    """text_factory: exports can hold NVTX text or names that are not valid UTF-8."""
    return raw.decode("utf-8", "replace")


def _check_file(path: Path, label: str) -> None:
    if not path.exists():
        raise NsysExportError(f"{label} does not exist.")
    if not path.is_file():
        raise NsysExportError(f"{label} is not a file.")
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
        size = path.stat().st_size
    except OSError as exc:
        raise NsysExportError(f"{label} cannot be read ({exc.strerror}).") from None
    if not header:
        raise NsysExportError(f"{label} is empty, not an nsys SQLite export.")
    if not header.startswith(_SQLITE_MAGIC):
        raise NsysExportError(
            f"{label} is not an SQLite file; export the report with `nsys export --type sqlite`.")
    if len(header) < 100:
        raise NsysExportError(f"{label} is truncated (shorter than an SQLite header).")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The in-header page count is valid when the "version-valid-for" number equals the change counter.
    if pages and header[24:28] == header[92:96] and size < page_size * pages:
        raise NsysExportError(
            f"{label} is truncated ({size} bytes, its header promises {page_size * pages}).")


@contextmanager
def _reading(label: str) -> Iterator[None]:
    """Turn SQLite failures while reading an export into one-sentence errors."""
    try:
        yield
    except NsysExportError:
        raise
    except sqlite3.OperationalError as exc:
        msg = str(exc).rstrip(".")
        if msg.startswith(("no such", "ambiguous")):
            raise NsysExportError(f"{label} has an unexpected export schema ({msg}).") from None
        raise NsysExportError(f"{label} could not be read ({msg}); the file may be truncated or corrupt.") from None
    except sqlite3.DatabaseError as exc:
        msg = str(exc).rstrip(".")
        raise NsysExportError(f"{label} could not be read ({msg}); the file may be truncated or corrupt.") from None


def _nsys_round(value: float | None, digits: int) -> float | None:
    """Round as nsys prints: Python's round() of the binary value (7653.45 -> 7653.4), not
    SQLite's round(), which rounds the decimal text half away from zero (7653.45 -> 7653.5).
    Seen on the H200: two of 24 pipeline captures differed from `nsys stats` with SQLite's."""
    return None if value is None else round(float(value), int(digits))


def open_export(path: str | Path) -> sqlite_utils.Database:
    """Validate an nsys SQLite export and open it read-only.

    Raises NsysExportError (one sentence) when the file does not exist, is not SQLite, is
    truncated, or is an SQLite database that is not an nsys export. The connection decodes text
    leniently (invalid UTF-8 becomes U+FFFD) and has the function `nsys_stdev` registered.
    """
    label = str(path)
    p = Path(path)
    _check_file(p, label)
    uri = "file:" + urllib.parse.quote(str(p.resolve())) + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise NsysExportError(f"{label} cannot be opened as SQLite ({str(exc).rstrip('.')}).") from None
    conn.text_factory = _decode_text
    conn.create_function("nsys_round", 2, _nsys_round, deterministic=True)
    try:
        with _reading(label):
            names = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    except NsysExportError:
        conn.close()
        raise
    is_nsys = any(t in names for t in META_TABLES) or (
        "StringIds" in names and any(n.startswith(("CUPTI_ACTIVITY_KIND_", "TARGET_INFO_", "NVTX_"))
                                     for n in names))
    if not is_nsys:
        conn.close()
        raise NsysExportError(
            f"{label} is an SQLite database but not an nsys export (it has no META_DATA_EXPORT, "
            "EXPORT_META_DATA or StringIds table).")
    conn.create_function("nsys_stdev", 5, _stdev, deterministic=True)
    return sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)


class _Export:
    """An open export plus what the queries need to know about its schema."""

    def __init__(self, path: str | Path) -> None:
        self.label = str(path)
        self.db = open_export(path)
        with _reading(self.label):
            self.tables = set(self.db.table_names()) | set(self.db.view_names())
        self._columns: dict[str, set[str]] = {}
        self.range_base: int | None = None  # set by prepare_ranges

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> _Export:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            if table not in self.tables:
                self._columns[table] = set()
            else:
                with _reading(self.label):
                    self._columns[table] = {c.name for c in self.db[table].columns}
        return self._columns[table]

    def has(self, table: str, *cols: str) -> bool:
        have = self.columns(table)
        return table in self.tables and all(c in have for c in cols)

    def col(self, alias: str, table: str, name: str, default: str = "NULL") -> str:
        """`alias."name"` when the table has that column, else `default` (optional columns)."""
        return f'{alias}."{name}"' if name in self.columns(table) else default

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> sqlite3.Cursor:
        with _reading(self.label):
            return self.db.execute(sql, params)

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        with _reading(self.label):
            return list(self.db.query(sql, params))

    # -- pieces shared by every kernel query --------------------------------------------------

    def require_kernels(self) -> None:
        if KERNEL_TABLE not in self.tables:
            raise NsysExportError(
                f"{self.label} has no CUDA kernel records (no {KERNEL_TABLE} table); the capture "
                "probably lacked `-t cuda` or ran no kernel.")
        if not self.has(KERNEL_TABLE, "start", "end") or not (
                self.has(KERNEL_TABLE, "demangledName") or self.has(KERNEL_TABLE, "shortName")):
            raise NsysExportError(
                f"{self.label} has a {KERNEL_TABLE} table without start, end and kernel name columns.")
        if "StringIds" not in self.tables:
            raise NsysExportError(f"{self.label} has no StringIds table, so kernels cannot be named.")

    def event_types(self) -> dict[str, int]:
        ids = dict(_EVENT_TYPE_DEFAULTS)
        if self.has(EVENT_TYPE_ENUM, "id", "name"):
            rows = self.execute(
                f"SELECT name, id FROM {EVENT_TYPE_ENUM} WHERE name IN ({','.join('?' * len(ids))})",
                list(ids)).fetchall()
            ids.update({name: int(i) for name, i in rows})
        return ids

    def kernel_select(self) -> str:
        """The kernel columns every summary reads, from CUPTI_ACTIVITY_KIND_KERNEL AS k."""
        t = KERNEL_TABLE
        name = 'k."demangledName"' if self.has(t, "demangledName") else 'k."shortName"'
        short = 'k."shortName"' if self.has(t, "shortName") else name
        if self.has(t, "gridX", "gridY", "gridZ"):
            grid = "k.gridX || 'x' || k.gridY || 'x' || k.gridZ"
        else:
            grid = "NULL"
        if self.has(t, "blockX", "blockY", "blockZ"):
            block = "k.blockX || 'x' || k.blockY || 'x' || k.blockZ"
        else:
            block = "NULL"
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

    def prepare_runtime(self) -> None:
        """temp.nsys_rt: the runtime API calls (the kernels' launch calls), indexed by correlation id
        and process. Empty when the export has no usable CUPTI_ACTIVITY_KIND_RUNTIME table."""
        self.execute("DROP TABLE IF EXISTS temp.nsys_rt")
        self.execute(
            'CREATE TEMP TABLE nsys_rt (corr INTEGER, gpid INTEGER, gtid INTEGER, start INTEGER, "end" INTEGER)')
        if self.has(RUNTIME_TABLE, "correlationId", "globalTid", "start", "end"):
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

    def prepare_ranges(self, text: str | None = None) -> None:
        """Build the NVTX range tables of the containment join, in the TEMP schema:

        nsys_ranges: one row per NVTX push/pop or start/end range (id = NVTX_EVENTS rowid, name
        "<domain>:<text>", text, style, thread, start, end);
        nsys_range_names: one row per distinct (name, style), its integer `key` the group key;
        nsys_range_idx: the ranges as [start, end] boxes with thread and name key, an R*Tree when
        SQLite has the module, else a table indexed by thread and start.
        With `text`, only the ranges whose text (without the domain prefix) equals it."""
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
            where_text = f" AND {label} = :text" if text is not None else ""
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
                """, {"text": text} if text is not None else {})
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

    def combo_sql(self) -> str:
        """One row per (NVTX range instance, kernel) pair, plus one row with NULL range columns per
        kernel that no range contains: the relation nvtx_kern_sum aggregates."""
        t = KERNEL_TABLE
        if self.has(t, "correlationId") and self.has(t, "globalPid"):
            on_runtime = "r.corr = k.correlationId AND r.gpid = k.globalPid"
        elif self.has(t, "correlationId"):
            on_runtime = "r.corr = k.correlationId"
        else:
            on_runtime = "0"
        b = self.range_base
        return f"""
            SELECT
                ri.name_key AS range_key,
                ri.id AS nvtx_id,
                (r.gtid >> 24) & 0xFFFFFF AS pid,
                r.gtid & 0xFFFFFF AS tid,
                {self.kernel_select()}
            FROM main.{t} AS k
            LEFT JOIN temp.nsys_rt AS r
                ON {on_runtime}
            LEFT JOIN temp.nsys_range_idx AS ri
                ON  ri.lo <= r.start - {b} AND ri.hi >= r."end" - {b}
                AND ri.start <= r.start AND ri.stop >= r."end" AND ri.gtid = r.gtid
            WHERE k.start IS NOT NULL AND k."end" IS NOT NULL"""

    def kernels_sql(self) -> str:
        """One row per kernel: the relation cuda_gpu_kern_sum aggregates."""
        return f"""
            SELECT NULL AS nvtx_id, {self.kernel_select()}
            FROM main.{KERNEL_TABLE} AS k
            WHERE k.start IS NOT NULL AND k."end" IS NOT NULL"""


_EXTRA_COLUMNS = ("short_id", "grid", "block", "registers", "static_smem", "dynamic_smem")


def _stdev(n: int | None, total: int | None, sq_hi: int | None, sq_mid: int | None,
           sq_lo: int | None) -> float | None:
    """Sample standard deviation from exact integer sums (0.0 for fewer than two values).

    SQLite sums the squared durations exactly as three int64 sums over the 16-bit split
    d = hi * 2**16 + lo (d*d = hi*hi * 2**32 + 2*hi*lo * 2**16 + lo*lo), so no single sum overflows
    for any realistic capture; here the variance is computed exactly with Python integers and its
    square root taken to 40 significant digits before rounding to a float, which is what
    statistics.stdev (used by nsys's report scripts) returns."""
    if n is None or total is None or sq_hi is None or sq_mid is None or sq_lo is None:
        return None
    if n < 2:
        return 0.0
    sum_sq = (sq_hi << 32) + (sq_mid << 17) + sq_lo
    num = n * sum_sq - total * total  # = n * (n - 1) * variance, exactly
    if num <= 0:
        return 0.0
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        return float((decimal.Decimal(num) / decimal.Decimal(n * (n - 1))).sqrt())


def _summarize(ex: _Export, source: str, keys: Sequence[str], where: str = "1",
               extras: bool = False) -> str:
    """Aggregate `source` per `keys` into temp.nsys_summary; returns that table's name.

    `source` yields one row per (range instance, kernel) pair or per kernel, with the columns
    dur, kern_id, nvtx_id, the `keys` and the kernel columns. The rows are copied once into
    temp.nsys_source (SQLite spills to a temp file, so memory stays bounded), then two passes:
    a GROUP BY for counts, sums, extremes and the exact sums of squares, and a window pass that
    numbers each group's durations in order to pick the middle one or two for the median. The
    summary has per group: the keys, n (rows), kern_inst and nvtx_inst (distinct kernels and
    range instances), total, mean, med, min, max and stddev (unrounded), plus with `extras`
    short_id and the distinct grid/block/registers/static_smem/dynamic_smem values (comma-joined)."""
    key_list = ", ".join(keys)
    extra_cols = "".join(f", {c}" for c in _EXTRA_COLUMNS) if extras else ""
    extra_aggs = ""
    if extras:
        extra_aggs = ", min(short_id) AS short_id" + "".join(
            f", group_concat(DISTINCT {c}) AS {c}" for c in _EXTRA_COLUMNS[1:])
    same_group = " AND ".join(f"x.{k} IS g.{k}" for k in keys)
    for table in ("nsys_summary", "nsys_median", "nsys_stats", "nsys_source"):
        ex.execute(f"DROP TABLE IF EXISTS temp.{table}")
    ex.execute(f"""
        CREATE TEMP TABLE nsys_source AS
        SELECT {key_list}, dur, kern_id, nvtx_id{extra_cols}
        FROM ({source})
        WHERE {where}""")
    ex.execute(f"""
        CREATE TEMP TABLE nsys_stats AS
        SELECT {key_list},
               count(*) AS n,
               count(DISTINCT kern_id) AS kern_inst,
               count(DISTINCT nvtx_id) AS nvtx_inst,
               sum(dur) AS total,
               avg(dur) AS mean,
               min(dur) AS min,
               max(dur) AS max,
               sum((dur >> 16) * (dur >> 16)) AS sq_hi,
               sum((dur >> 16) * (dur & 65535)) AS sq_mid,
               sum((dur & 65535) * (dur & 65535)) AS sq_lo
               {extra_aggs}
        FROM temp.nsys_source
        GROUP BY {key_list}""")
    ex.execute(f"CREATE INDEX temp.nsys_stats_keys ON nsys_stats ({key_list})")
    ex.execute(f"""
        CREATE TEMP TABLE nsys_median AS
        SELECT g.rowid AS gid, avg(x.dur) AS med
        FROM (SELECT {key_list}, dur, row_number() OVER (PARTITION BY {key_list} ORDER BY dur) AS rn
              FROM temp.nsys_source) AS x
        JOIN temp.nsys_stats AS g ON {same_group}
        WHERE x.rn IN ((g.n + 1) / 2, (g.n + 2) / 2)
        GROUP BY g.rowid""")
    ex.execute("""
        CREATE TEMP TABLE nsys_summary AS
        SELECT g.*, m.med AS med, nsys_stdev(g.n, g.total, g.sq_hi, g.sq_mid, g.sq_lo) AS stddev
        FROM temp.nsys_stats AS g
        LEFT JOIN temp.nsys_median AS m ON m.gid = g.rowid""")
    for table in ("nsys_median", "nsys_stats", "nsys_source"):
        ex.execute(f"DROP TABLE temp.{table}")
    return "temp.nsys_summary"


# ----------------------------------------------------------------------------------------------
# The reports


def kern_sum(path: str | Path) -> list[dict[str, Any]]:
    """`nsys stats -r cuda_gpu_kern_sum`: one dict per kernel (demangled name), keyed by
    KERN_SUM_COLUMNS, in nsys's order (Total Time descending, then Instances, then Name)."""
    with _Export(path) as ex:
        ex.require_kernels()
        summary = _summarize(ex, ex.kernels_sql(), ["name_id"])
        return ex.query(f"""
            SELECT
                nsys_round(s.total * 100.0 / (SELECT sum(total) FROM {summary}), 1) AS "Time (%)",
                s.total AS "Total Time (ns)",
                s.n AS "Instances",
                nsys_round(s.mean, 1) AS "Avg (ns)",
                nsys_round(s.med, 1) AS "Med (ns)",
                s.min AS "Min (ns)",
                s.max AS "Max (ns)",
                nsys_round(s.stddev, 1) AS "StdDev (ns)",
                name.value AS "Name"
            FROM {summary} AS s
            LEFT JOIN main.StringIds AS name ON name.id = s.name_id
            ORDER BY 2 DESC, 3, 9""")


def _nvtx_summary(ex: _Export, keys: Sequence[str], where: str = "1", extras: bool = False) -> str:
    """The nvtx_kern_sum aggregation (kernels x containing ranges) per `keys`; see _summarize."""
    ex.require_kernels()
    ex.prepare_runtime()
    if ex.range_base is None:
        ex.prepare_ranges()
    return _summarize(ex, ex.combo_sql(), keys, where, extras)


def nvtx_kern_sum(path: str | Path) -> list[dict[str, Any]]:
    """`nsys stats -r nvtx_kern_sum`: one dict per (process, thread, NVTX range, kernel), keyed by
    NVTX_KERN_SUM_COLUMNS, in nsys's order (range name, PID, TID, Total Time descending).

    Kernels that no range contains appear with an empty (None) range name and NVTX Inst 0; kernels
    with no runtime record also have no PID/TID. An export without NVTX_EVENTS (or without
    CUPTI_ACTIVITY_KIND_RUNTIME) gives only such rows, where nsys would refuse to run the report."""
    with _Export(path) as ex:
        summary = _nvtx_summary(ex, ["pid", "tid", "range_key", "name_id"])
        return ex.query(f"""
            SELECT
                rn.name AS "NVTX Range",
                rn.style AS "Style",
                s.pid AS "PID",
                s.tid AS "TID",
                s.nvtx_inst AS "NVTX Inst",
                s.kern_inst AS "Kern Inst",
                s.total AS "Total Time (ns)",
                nsys_round(s.mean, 1) AS "Avg (ns)",
                nsys_round(s.med, 1) AS "Med (ns)",
                s.min AS "Min (ns)",
                s.max AS "Max (ns)",
                nsys_round(s.stddev, 1) AS "StdDev (ns)",
                name.value AS "Kernel Name"
            FROM {summary} AS s
            LEFT JOIN temp.nsys_range_names AS rn ON rn.key = s.range_key
            LEFT JOIN main.StringIds AS name ON name.id = s.name_id
            ORDER BY 1, 3, 4, 7 DESC, 2, 13""")


def _distinct_values(joined: Any) -> Any:
    """group_concat(DISTINCT x) -> the single value, or the distinct values sorted and joined by ';'."""
    if joined is None:
        return None
    parts = sorted(set(str(joined).split(",")), key=lambda s: (len(s), s))
    if len(parts) == 1:
        value = parts[0]
        return int(value) if value.lstrip("-").isdigit() else value
    return ";".join(parts)


def range_kernels(path: str | Path, range_name: str) -> list[dict[str, Any]]:
    """Per kernel launched inside the NVTX range(s) whose text (without the domain prefix) is
    `range_name`, over all instances of that range on all threads: the nvtx_kern_sum query with
    the ranges filtered to that text and grouped per kernel only.

    Each dict has the keys RANGE_KERNEL_KEYS: kernel (demangled name), short_name, instances
    (Kern Inst), total_ns, mean_ns, median_ns, min_ns, max_ns, stddev_ns (rounded as nsys rounds
    them), grid and block ("XxYxZ"; distinct geometries joined by ';'), registers, static_smem,
    dynamic_smem (an int, or distinct values joined by ';'), and range_instances (how many
    instances of the range the export holds). Sorted by total_ns descending. Raises
    NsysExportError when the export has no range of that name."""
    with _Export(path) as ex:
        ex.require_kernels()
        ex.prepare_ranges(text=range_name)
        range_instances = ex.execute("SELECT count(*) FROM temp.nsys_ranges").fetchone()[0]
        if not range_instances:
            raise NsysExportError(_no_range_message(ex, range_name))
        summary = _nvtx_summary(ex, ["name_id"], where="nvtx_id IS NOT NULL", extras=True)
        rows = ex.query(f"""
            SELECT
                name.value AS kernel,
                short.value AS short_name,
                s.kern_inst AS instances,
                s.total AS total_ns,
                nsys_round(s.mean, 1) AS mean_ns,
                nsys_round(s.med, 1) AS median_ns,
                s.min AS min_ns,
                s.max AS max_ns,
                nsys_round(s.stddev, 1) AS stddev_ns,
                s.grid AS grid,
                s.block AS block,
                s.registers AS registers,
                s.static_smem AS static_smem,
                s.dynamic_smem AS dynamic_smem
            FROM {summary} AS s
            LEFT JOIN main.StringIds AS name ON name.id = s.name_id
            LEFT JOIN main.StringIds AS short ON short.id = s.short_id
            ORDER BY total_ns DESC, instances, kernel""")
    out = []
    for row in rows:
        for key in ("grid", "block"):
            row[key] = None if row[key] is None else ";".join(sorted(set(str(row[key]).split(","))))
        for key in ("registers", "static_smem", "dynamic_smem"):
            row[key] = _distinct_values(row[key])
        row["range_instances"] = range_instances
        out.append({k: row[k] for k in RANGE_KERNEL_KEYS})
    return out


def _no_range_message(ex: _Export, range_name: str) -> str:
    if NVTX_TABLE not in ex.tables:
        return (f"{ex.label} has no NVTX data (no {NVTX_TABLE} table), so it has no range "
                f"{range_name!r}; the capture probably lacked `-t nvtx`.")
    if ex.has(NVTX_TABLE, "endGlobalTid"):
        # Ranges that end on another thread are left out (as nsys does): say so if that is why.
        text_id = ex.col("ne", NVTX_TABLE, "textId")
        crossed = ex.execute(f"""
            SELECT count(*) FROM main.{NVTX_TABLE} AS ne
            LEFT JOIN main.StringIds AS sid ON sid.id = {text_id}
            WHERE ne.endGlobalTid IS NOT NULL
              AND coalesce(sid.value, {ex.col('ne', NVTX_TABLE, 'text')}, '') = ?""",
            [range_name]).fetchone()[0]
        if crossed:
            return (f"{ex.label} has NVTX range {range_name!r} only as ranges that end on another "
                    "thread than they start, and nsys attributes no kernels to those.")
    return f"{ex.label} has no NVTX push/pop or start/end range named {range_name!r}."


def export_info(path: str | Path) -> dict[str, Any]:
    """What the export says about itself: nsys_version (EXPORT_PRODUCT_VERSION), schema_version,
    the metadata table's name, and the GPUs of TARGET_INFO_GPU (id, name, uuid, ...) with
    gpu_name / gpu_uuid (distinct values joined by '; ') for a one-line summary."""
    with _Export(path) as ex:
        meta_table = next((t for t in META_TABLES if ex.has(t, "name", "value")), None)
        meta: dict[str, Any] = {}
        if meta_table:
            for row in ex.query(f"SELECT name, value FROM main.{meta_table}"):
                meta.setdefault(row["name"], row["value"])
        gpus: list[dict[str, Any]] = []
        if "TARGET_INFO_GPU" in ex.tables:
            t = "TARGET_INFO_GPU"
            wanted = {"id": "id", "name": "name", "uuid": "uuid", "chipName": "chip",
                      "busLocation": "bus_location", "smCount": "sm_count",
                      "totalMemory": "total_memory", "clockRate": "clock_rate_hz",
                      "computeMajor": "compute_major", "computeMinor": "compute_minor"}
            cols = [f'{ex.col("g", t, c)} AS "{k}"' for c, k in wanted.items()]
            order = 'g."id"' if ex.has(t, "id") else "g.rowid"
            gpus = ex.query(f"SELECT {', '.join(cols)} FROM main.{t} AS g ORDER BY {order}")

    def joined(key: str) -> str | None:
        values = list(dict.fromkeys(g[key] for g in gpus if g.get(key)))
        return "; ".join(str(v) for v in values) if values else None

    return {
        "nsys_version": meta.get("EXPORT_PRODUCT_VERSION"),
        "schema_version": meta.get("EXPORT_SCHEMA_VERSION"),
        "metadata_table": meta_table,
        "gpus": gpus,
        "gpu_name": joined("name"),
        "gpu_uuid": joined("uuid"),
    }


# ----------------------------------------------------------------------------------------------
# Output


def format_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """CSV as `nsys stats --format csv` prints it: a header line, then one line per row; minimal
    quoting, '\\n' line ends, None as an empty field, floats as Python prints them (12512.0)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else row.get(c) for c in columns])
    return buf.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return format(value, ",")
    return str(value)


def format_table(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A readable aligned text table: numbers right-aligned with thousands separators, text
    left-aligned, a rule under the header."""
    rows = list(rows)
    numeric = [bool(rows) and all(isinstance(r.get(c), (int, float)) or r.get(c) is None for r in rows)
               and any(r.get(c) is not None for r in rows) for c in columns]
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(line[i]) for line in cells]) for i, c in enumerate(columns)]

    def render(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    lines = [render(list(columns)), render(["-" * w for w in widths])]
    lines += [render(line) for line in cells]
    return "\n".join(lines) + "\n"
