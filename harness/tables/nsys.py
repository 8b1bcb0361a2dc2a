"""Read Nsight Systems SQLite exports (`nsys export --type sqlite`).

This module computes, from the export alone, the figures that `nsys stats` prints for the reports
`cuda_gpu_kern_sum` (`kern_sum`) and `nvtx_kern_sum` (`nvtx_kern_sum`): the same columns, the same
rounding, the same sort order. The pipeline's kernel-time table comes from `range_kernels`, which
runs the very same SQL as `nvtx_kern_sum`, only filtered to one NVTX range and grouped per kernel;
`range_launches` lists, launch by launch, the kernels that the same rules attribute to the NVTX
ranges whose text starts with a prefix (one range per implementation and round of a capture).

This module opens the export and runs the reports; what the queries know of the export's schema
(its tables validated on first read, and the SQL pieces every kernel query shares) is
harness.tables.nsys_export.

The export is opened read-only and immutable (SQLite never writes to it, creates no file beside
it and reads no -wal or -journal file there) and read through sqlite-utils. All aggregation
happens in SQLite (GROUP BY, window functions for the median), so memory stays bounded on exports
of hundreds of MB: kernel rows are never loaded into Python (range_launches returns one row per
launch of its ranges). The helper tables this module builds live in the connection's TEMP
schema.

An export may come from someone else (a bundle), so every read runs under limits, and whatever
breaks one is refused with NsysExportError (one sentence):

* every table the reader reads must be a real table: not a view (a view can hold any query, such
  as an unbounded recursive CTE), not a virtual table; the columns it computes with must not be
  generated columns and must be declared with the type nsys writes (INTEGER for times and ids),
  and every value in them must be an integer (or NULL): an INTEGER column keeps text that is not
  a number, or a real number, as it is (and a hand-written file can hold any value in it), and a
  time stored as text would otherwise give wrong kernel times.
  Triggers in the export never run: it is read-only and the reader writes only to TEMP tables;
  schema SQL cannot call this module's functions (trusted_schema is off);
* each read (open to last row) may take TIME_LIMIT_S seconds of wall time: SQLite's progress
  handler looks at the clock every 10,000 virtual-machine steps and interrupts the statement
  past the deadline, and no statement starts after it;
* the TEMP schema lives in a file (temp_store=FILE: in memory it would hold about as many bytes
  as the export, 164 MiB for 1 M kernels) whose size is capped with temp.max_page_count at
  max(TEMP_LIMIT_MIN_BYTES, TEMP_LIMIT_PER_EXPORT_BYTE x the export's size), so a runaway read
  fails with SQLITE_FULL at the cap instead of filling a disk. SQLite's sorter and transient
  tables spill to temporary files of their own that the cap does not count; they hold at most
  what the capped TEMP tables or the export hold;
* memory: a single string or blob may be at most VALUE_LIMIT_BYTES long (SQLITE_LIMIT_LENGTH on
  the connection, which also bounds what group_concat builds), page caches and the sorter's
  in-memory runs keep SQLite's default sizes (about 2 MiB per schema), and results are grouped
  in SQLite. The heap limits (PRAGMA soft_heap_limit / hard_heap_limit) are left alone: they
  apply to every SQLite connection of the process, and hard_heap_limit can only be lowered.

Rules taken from nsys's own report scripts (and checked against real exports and the CSVs that
`nsys stats` printed for them, see tests/fixtures/nsys/):

* a kernel's duration is `end - start` of its CUPTI_ACTIVITY_KIND_KERNEL row; kernels are named by
  their demangled name (StringIds);
* Avg, Med and StdDev are rounded to one decimal from the exact binary value, an exact tie away
  from zero (`_nsys_round`: neither Python's round(x, 1) nor SQLite's, which differ at ties);
  StdDev is the sample standard deviation (0.0 for a single instance); Time (%) is
  100 * total / sum of totals, rounded so;
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

`format_csv` and `format_table` print strings with control characters (C0, DEL, C1, line and
paragraph separators, bidirectional controls) replaced by visible escapes such as `\\x1b`, so a
kernel or range name cannot drive the terminal (`escape_controls`).
"""

from __future__ import annotations

import csv
import decimal
import io
import math
import re
import sqlite3
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.tables.nsys_export import (
    GPU_TABLE,
    KERNEL_TABLE,
    META_TABLES,
    NVTX_TABLE,
    RUNTIME_TABLE,
    NsysExportError,
    _Export,
    _reading,
)

if TYPE_CHECKING:
    import sqlite_utils

__all__ = [
    "NsysExportError", "KERN_SUM_COLUMNS", "NVTX_KERN_SUM_COLUMNS", "RANGE_KERNEL_KEYS",
    "RANGE_LAUNCH_KEYS", "TIME_LIMIT_S", "TEMP_LIMIT_MIN_BYTES", "TEMP_LIMIT_PER_EXPORT_BYTE",
    "VALUE_LIMIT_BYTES", "open_export", "kern_sum", "nvtx_kern_sum", "range_kernels",
    "range_launches", "export_info", "format_csv", "format_table", "escape_controls",
]




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

RANGE_LAUNCH_KEYS = [
    "range", "kernel", "short_name", "start_ns", "end_ns", "duration_ns", "grid", "block",
    "registers", "static_smem", "dynamic_smem", "launch_start_ns",
]
"""The keys of each dict that `range_launches` returns."""

TIME_LIMIT_S = 60.0
"""Wall-clock seconds one export read (opening it, every query, the last row) may take; a read
that takes longer is refused. The functions' `time_limit_s` argument overrides it."""

TEMP_LIMIT_MIN_BYTES = 256 * 2**20
TEMP_LIMIT_PER_EXPORT_BYTE = 8
"""The TEMP schema of one read may grow to max(TEMP_LIMIT_MIN_BYTES, TEMP_LIMIT_PER_EXPORT_BYTE x
the export's size in bytes); a read that needs more is refused. The functions'
`temp_limit_bytes` argument overrides it. (nvtx_kern_sum on an export of 1 M kernels, 158 MiB,
needs about 164 MiB; nested ranges multiply the (range, kernel) pairs it stores.)"""

VALUE_LIMIT_BYTES = 64 * 2**20
"""The longest string or blob a read may hold (SQLITE_LIMIT_LENGTH on the connection)."""

_PROGRESS_OPS = 10_000  # SQLite virtual-machine steps between two looks at the clock


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


def _mib(n: float) -> str:
    return f"{n / 2**20:g}"


class _Guard:
    """The limits one export read runs under; `progress` is the connection's progress handler."""

    def __init__(self, label: str, time_limit_s: float, temp_limit_bytes: int) -> None:
        self.label = label
        self.time_limit_s = time_limit_s
        self.temp_limit_bytes = temp_limit_bytes
        self.deadline = time.monotonic() + time_limit_s
        self.timed_out = False

    def progress(self) -> int:
        """Nonzero (SQLite then interrupts the statement) once the read is past its deadline."""
        if self.timed_out or time.monotonic() > self.deadline:
            self.timed_out = True
            return 1
        return 0

    def check(self) -> None:
        """Raise the time-limit error when the read is past its deadline (between statements)."""
        if self.progress():
            raise self.refusal(sqlite3.OperationalError("interrupted"))

    def refusal(self, exc: sqlite3.Error) -> NsysExportError:
        """The one-sentence error for an SQLite failure while reading the export."""
        label = self.label
        msg = str(exc).rstrip(".")
        code = getattr(exc, "sqlite_errorname", "")
        if self.timed_out:
            return NsysExportError(
                f"{label} took longer than {self.time_limit_s:g} s to read, so it is refused.")
        if code == "SQLITE_FULL" or msg == "database or disk is full":
            return NsysExportError(
                f"{label} needs more than {_mib(self.temp_limit_bytes)} MiB of temporary storage to "
                "read (or the disk that holds SQLite's temporary files is full), so it is refused.")
        if code == "SQLITE_TOOBIG" or msg == "string or blob too big":
            return NsysExportError(
                f"{label} holds a string or blob longer than {_mib(VALUE_LIMIT_BYTES)} MiB, so it "
                "is refused.")
        if isinstance(exc, sqlite3.OperationalError) and msg.startswith(("no such", "ambiguous")):
            return NsysExportError(f"{label} has an unexpected export schema ({msg}).")
        return NsysExportError(
            f"{label} could not be read ({msg}); the file may be truncated or corrupt.")




def _nsys_round(value: float | None, digits: int) -> float | None:
    """Round as nsys prints: the exact binary value to the nearest, and an exact tie away from zero.
    7653.45 is 7653.4499999999998... in binary, so 7653.4 (SQLite's round() of the decimal text
    gives 7653.5); 2733.25 is exactly a tie, so 2733.3 (Python's round() gives 2733.2, half to
    even), as nsys stats printed it for a smoke run's layer norm on the H200. Pipeline captures
    with averages at ties of the first kind are among tests/fixtures/nsys/; the second kind is a
    synthetic export in the reader's tests."""
    if value is None:
        return None
    x = float(value)
    if not math.isfinite(x):  # Decimal's quantize refuses an infinity
        return x
    return float(decimal.Decimal(x).quantize(decimal.Decimal(1).scaleb(-int(digits)), rounding=decimal.ROUND_HALF_UP))


def _open(path: str | Path, time_limit_s: float | None,
          temp_limit_bytes: int | None) -> tuple[sqlite_utils.Database, _Guard]:
    label = str(path)
    p = Path(path)
    _check_file(p, label)
    if temp_limit_bytes is None:
        temp_limit_bytes = max(TEMP_LIMIT_MIN_BYTES, TEMP_LIMIT_PER_EXPORT_BYTE * p.stat().st_size)
    guard = _Guard(label, TIME_LIMIT_S if time_limit_s is None else float(time_limit_s),
                   int(temp_limit_bytes))
    uri = "file:" + urllib.parse.quote(str(p.resolve())) + "?mode=ro&immutable=1"
    try:
        # raw sqlite3: sqlite-utils has no call to open a URI (read-only, immutable)
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise NsysExportError(f"{label} cannot be opened as SQLite ({str(exc).rstrip('.')}).") from None
    # raw sqlite3: sqlite-utils has no call for text_factory, limits, the progress handler or an
    # aggregate function (its register_function registers scalar functions only)
    conn.text_factory = _decode_text
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, VALUE_LIMIT_BYTES)
    conn.set_progress_handler(guard.progress, _PROGRESS_OPS)
    conn.create_function("nsys_round", 2, _nsys_round, deterministic=True)
    conn.create_function("nsys_stdev", 5, _stdev, deterministic=True)
    # typeshed types an aggregate's step as taking one argument; this one takes three
    conn.create_aggregate("nsys_innermost", 3, _Innermost)  # type: ignore[arg-type]
    import sqlite_utils  # here, not at the top, as pandas in harness.tables.derive

    db = sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
    try:
        with _reading(guard):
            db.execute("PRAGMA trusted_schema = OFF")
            db.execute("PRAGMA temp_store = FILE")
            page_size = db.execute("PRAGMA temp.page_size").fetchone()[0]
            db.execute(f"PRAGMA temp.max_page_count = {max(1, guard.temp_limit_bytes // page_size)}")
            names = set(db.table_names()) | set(db.view_names())
    except NsysExportError:
        db.close()
        raise
    is_nsys = any(t in names for t in META_TABLES) or (
        "StringIds" in names and any(n.startswith(("CUPTI_ACTIVITY_KIND_", "TARGET_INFO_", "NVTX_"))
                                     for n in names))
    if not is_nsys:
        db.close()
        raise NsysExportError(
            f"{label} is an SQLite database but not an nsys export (it has no META_DATA_EXPORT, "
            "EXPORT_META_DATA or StringIds table).")
    return db, guard


def open_export(path: str | Path, *, time_limit_s: float | None = None,
                temp_limit_bytes: int | None = None) -> sqlite_utils.Database:
    """Validate an nsys SQLite export and open it read-only (and immutable).

    Raises NsysExportError (one sentence) when the file does not exist, is not SQLite, is
    truncated, or is an SQLite database that is not an nsys export. The connection decodes text
    leniently (invalid UTF-8 becomes U+FFFD), has the functions `nsys_round` and `nsys_stdev`
    registered, and runs under the read limits (see the module docstring): a statement still
    running `time_limit_s` (default TIME_LIMIT_S) after opening is interrupted
    (sqlite3.OperationalError), and TEMP tables may hold `temp_limit_bytes`. Its tables are not
    validated here: the report functions validate the tables they read.
    """
    return _open(path, time_limit_s, temp_limit_bytes)[0]


def _export(path: str | Path, time_limit_s: float | None, temp_limit_bytes: int | None) -> _Export:
    """The export at `path`, opened under the read limits, for the queries (nsys_export._Export)."""
    db, guard = _open(path, time_limit_s, temp_limit_bytes)
    return _Export(db, guard, str(path))




_EXTRA_COLUMNS = ("short_id", "grid", "block", "registers", "static_smem", "dynamic_smem")


class _Innermost:
    """SQL aggregate nsys_innermost(start, stop, id): the id of the innermost range of a group,
    the one with the latest start, then the earliest stop, then the highest id."""

    def __init__(self) -> None:
        self.best: tuple[int, int, int] | None = None

    def step(self, start: int, stop: int, range_id: int) -> None:
        key = (start, -stop, range_id)
        if self.best is None or key > self.best:
            self.best = key

    def finalize(self) -> int | None:
        return None if self.best is None else self.best[2]


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
#
# Every report takes the keyword arguments time_limit_s and temp_limit_bytes (None: the module's
# TIME_LIMIT_S and TEMP_LIMIT_* at call time), the limits of that one read.


def kern_sum(path: str | Path, *, time_limit_s: float | None = None,
             temp_limit_bytes: int | None = None) -> list[dict[str, Any]]:
    """`nsys stats -r cuda_gpu_kern_sum`: one dict per kernel (demangled name), keyed by
    KERN_SUM_COLUMNS, in nsys's order (Total Time descending, then Instances, then Name)."""
    with _export(path, time_limit_s, temp_limit_bytes) as ex:
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
                CAST(name.value AS TEXT) AS "Name"
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


def nvtx_kern_sum(path: str | Path, *, time_limit_s: float | None = None,
                  temp_limit_bytes: int | None = None) -> list[dict[str, Any]]:
    """`nsys stats -r nvtx_kern_sum`: one dict per (process, thread, NVTX range, kernel), keyed by
    NVTX_KERN_SUM_COLUMNS, in nsys's order (range name, PID, TID, Total Time descending).

    Kernels that no range contains appear with an empty (None) range name and NVTX Inst 0; kernels
    with no runtime record also have no PID/TID. An export without NVTX_EVENTS (or without
    CUPTI_ACTIVITY_KIND_RUNTIME) gives only such rows, where nsys would refuse to run the report."""
    with _export(path, time_limit_s, temp_limit_bytes) as ex:
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
                CAST(name.value AS TEXT) AS "Kernel Name"
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


def range_kernels(path: str | Path, range_name: str, *, time_limit_s: float | None = None,
                  temp_limit_bytes: int | None = None) -> list[dict[str, Any]]:
    """Per kernel launched inside the NVTX range(s) whose text (without the domain prefix) is
    `range_name`, over all instances of that range on all threads: the nvtx_kern_sum query with
    the ranges filtered to that text and grouped per kernel only.

    Each dict has the keys RANGE_KERNEL_KEYS: kernel (demangled name), short_name, instances
    (Kern Inst), total_ns, mean_ns, median_ns, min_ns, max_ns, stddev_ns (rounded as nsys rounds
    them), grid and block ("XxYxZ"; distinct geometries joined by ';'), registers, static_smem,
    dynamic_smem (an int, or distinct values joined by ';'), and range_instances (how many
    instances of the range the export holds). Sorted by total_ns descending. Raises
    NsysExportError when the export has no range of that name."""
    with _export(path, time_limit_s, temp_limit_bytes) as ex:
        ex.require_kernels()
        ex.prepare_ranges(text=range_name)
        range_instances = ex.execute("SELECT count(*) FROM temp.nsys_ranges").fetchone()[0]
        if not range_instances:
            raise NsysExportError(_no_range_message(ex, range_name))
        summary = _nvtx_summary(ex, ["name_id"], where="nvtx_id IS NOT NULL", extras=True)
        rows = ex.query(f"""
            SELECT
                CAST(name.value AS TEXT) AS kernel,
                CAST(short.value AS TEXT) AS short_name,
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


def range_launches(path: str | Path, prefix: str, *, time_limit_s: float | None = None,
                   temp_limit_bytes: int | None = None) -> list[dict[str, Any]]:
    """One dict per kernel that the nvtx_kern_sum rules attribute to an NVTX range whose text
    starts with `prefix` (for example "capture/" for the ranges "capture/<impl>/<round>").

    A kernel belongs to a range that is open on the thread that made its CUDA runtime launch call
    over the whole call, joined by correlation id within its process; push/pop and start/end
    ranges count, ranges ending on another thread do not, a range with no end lasts until the
    last NVTX range timestamp. Ranges whose text does not start with `prefix` are ignored; when
    several matching ranges contain the call, the kernel goes to the innermost one: the latest
    start, then the earliest end, then the later NVTX event. Each kernel of a CUDA graph launch
    is a row of its own (all with that launch call).

    Each dict has the keys RANGE_LAUNCH_KEYS: range (the range's text as the application passed
    it, e.g. "capture/cuda.block512/0": whatever its NVTX domain, without the "<domain>:" that
    nvtx_kern_sum puts before it), kernel (demangled name, as kern_sum names it), short_name,
    start_ns, end_ns, duration_ns (end - start), grid and block ("XxYxZ"), registers,
    static_smem, dynamic_smem, and launch_start_ns (the start of the runtime launch call). Sorted
    by launch_start_ns, then start_ns. The rows come from an SQLite aggregation that stores no
    (range, kernel) pairs; the list holds one small dict per launch (about 600 bytes).

    Raises NsysExportError when the export has no range with that prefix, or no runtime records
    to attribute kernels with; a matching range that holds no launch gives no rows."""
    with _export(path, time_limit_s, temp_limit_bytes) as ex:
        ex.require_kernels()
        ex.prepare_ranges(prefix=prefix)
        if not ex.execute("SELECT count(*) FROM temp.nsys_ranges").fetchone()[0]:
            raise NsysExportError(_no_range_message(ex, prefix, prefix=True))
        ex.prepare_runtime()
        if ex.runtime_join() == "0" or not ex.has(RUNTIME_TABLE, "correlationId", "globalTid",
                                                  "start", "end"):
            raise NsysExportError(
                f"{ex.label} has no CUDA runtime launch records joined to its kernels ({RUNTIME_TABLE} "
                "with correlationId), so kernels cannot be attributed to NVTX ranges.")
        t = KERNEL_TABLE
        name, short = ex.name_columns()
        grid, block = ex.geometry("x")
        # Per kernel, its innermost matching range: the kernels are scanned in rowid order, joined
        # to their launch call and to the ranges around it (CROSS JOIN keeps that order), so
        # GROUP BY k.rowid aggregates as the rows stream by; no (range, kernel) pair is stored or
        # sorted, only the result rows (at most one per kernel) are sorted by launch.
        cursor = ex.execute(f"""
            SELECT
                CAST(rg.text AS TEXT),
                CAST(name.value AS TEXT),
                CAST(short.value AS TEXT),
                x.start,
                x."end",
                x."end" - x.start,
                x.grid,
                x.block,
                x.registers,
                x.static_smem,
                x.dynamic_smem,
                x.launch_start
            FROM (
                SELECT
                    k.rowid AS kern_id, k.start AS start, k."end" AS "end",
                    {name} AS name_id, {short} AS short_id, {grid} AS grid, {block} AS block,
                    {ex.col('k', t, 'registersPerThread')} AS registers,
                    {ex.col('k', t, 'staticSharedMemory')} AS static_smem,
                    {ex.col('k', t, 'dynamicSharedMemory')} AS dynamic_smem,
                    min(r.start) AS launch_start,
                    nsys_innermost(ri.start, ri.stop, ri.id) AS nvtx_id
                FROM main.{t} AS k
                CROSS JOIN temp.nsys_rt AS r ON {ex.runtime_join()}
                CROSS JOIN temp.nsys_range_idx AS ri ON {ex.containment()}
                WHERE k.start IS NOT NULL AND k."end" IS NOT NULL
                GROUP BY k.rowid
            ) AS x
            JOIN temp.nsys_ranges AS rg ON rg.id = x.nvtx_id
            LEFT JOIN main.StringIds AS name ON name.id = x.name_id
            LEFT JOIN main.StringIds AS short ON short.id = x.short_id
            ORDER BY x.launch_start, x.start, x.kern_id""")
        # The same few names repeat on every row: keep one string object per distinct text.
        texts: dict[str, str] = {}
        out = []
        with ex.reading():
            for row in cursor:
                out.append({key: texts.setdefault(v, v) if isinstance(v, str) else v
                            for key, v in zip(RANGE_LAUNCH_KEYS, row)})
    return out


def _no_range_message(ex: _Export, range_name: str, prefix: bool = False) -> str:
    what = f"whose text starts with {range_name!r}" if prefix else f"named {range_name!r}"
    if not ex.present(NVTX_TABLE):
        return (f"{ex.label} has no NVTX data (no {NVTX_TABLE} table), so it has no range "
                f"{what}; the capture probably lacked `-t nvtx`.")
    if ex.has(NVTX_TABLE, "endGlobalTid"):
        # Ranges that end on another thread are left out (as nsys does): say so if that is why.
        text_id = ex.col("ne", NVTX_TABLE, "textId")
        label = f"coalesce(sid.value, {ex.col('ne', NVTX_TABLE, 'text')}, '')"
        match = (f"substr({label}, 1, length(:name)) = :name" if prefix else f"{label} = :name")
        crossed = ex.execute(f"""
            SELECT count(*) FROM main.{NVTX_TABLE} AS ne
            LEFT JOIN main.StringIds AS sid ON sid.id = {text_id}
            WHERE ne.endGlobalTid IS NOT NULL AND {match}""", {"name": range_name}).fetchone()[0]
        if crossed:
            return (f"{ex.label} has NVTX ranges {what} only as ranges that end on another "
                    "thread than they start, and nsys attributes no kernels to those.")
    return f"{ex.label} has no NVTX push/pop or start/end range {what}."


def _plain(expr: str) -> str:
    """SQL: `expr` with a blob read as text (so a value is always JSON-serializable)."""
    return f"(CASE WHEN typeof({expr}) = 'blob' THEN CAST({expr} AS TEXT) ELSE {expr} END)"


def export_info(path: str | Path, *, time_limit_s: float | None = None,
                temp_limit_bytes: int | None = None) -> dict[str, Any]:
    """What the export says about itself: nsys_version (EXPORT_PRODUCT_VERSION), schema_version,
    the metadata table's name, and the GPUs of TARGET_INFO_GPU (id, name, uuid, ...) with
    gpu_name / gpu_uuid (distinct values joined by '; ') for a one-line summary, and
    kernels_without_duration: the kernel rows with a NULL start or end, which every summary leaves
    out (`without_duration_note` says so in one sentence)."""
    with _export(path, time_limit_s, temp_limit_bytes) as ex:
        meta_table = next((t for t in META_TABLES if ex.has(t, "name", "value")), None)
        meta: dict[str, Any] = {}
        if meta_table:
            for row in ex.query(f"SELECT {_plain('name')} AS name, {_plain('value')} AS value "
                                f"FROM main.{meta_table}"):
                meta.setdefault(row["name"], row["value"])
        gpus: list[dict[str, Any]] = []
        if ex.present(GPU_TABLE):
            t = GPU_TABLE
            wanted = {"id": "id", "name": "name", "uuid": "uuid", "chipName": "chip",
                      "busLocation": "bus_location", "smCount": "sm_count",
                      "totalMemory": "total_memory", "clockRate": "clock_rate_hz",
                      "computeMajor": "compute_major", "computeMinor": "compute_minor"}
            cols = [f'{_plain(ex.col("g", t, c))} AS "{k}"' for c, k in wanted.items()]
            order = 'g."id"' if ex.has(t, "id") else "g.rowid"
            gpus = ex.query(f"SELECT {', '.join(cols)} FROM main.{t} AS g ORDER BY {order}")

        without = ex.query(f'SELECT count(*) AS n FROM main.{KERNEL_TABLE} WHERE start IS NULL OR "end" IS NULL')[0]["n"] \
            if ex.has(KERNEL_TABLE, "start", "end") else 0

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
        "kernels_without_duration": int(without or 0),
    }


def without_duration_note(count: int, where: str) -> str | None:
    """The sentence for kernel rows that have no duration (a NULL start or end), which no summary,
    launch table or kernel time counts; None for none."""
    if not count:
        return None
    return (f"{count} kernel row{'s' if count != 1 else ''} of {where} {'have' if count != 1 else 'has'} no duration "
            "(a NULL start or end) and {} not counted in any summary, launch or kernel time."
            .format("are" if count != 1 else "is"))


# ----------------------------------------------------------------------------------------------
# Output

# Characters a terminal acts on instead of printing: C0 controls (ESC starts escape sequences),
# DEL, C1 controls, the line and paragraph separators, and the bidirectional formatting controls
# (they reorder what follows them on screen).
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with every control character (C0, DEL, C1, U+2028/U+2029, bidirectional controls)
    written as a visible escape (`\\x1b`, `\\x07`, `\\u202e`); printable text, Unicode included,
    is kept as it is. An escape sequence such as ESC [ 3 1 m becomes the text `\\x1b[31m`."""
    return _CONTROLS.sub(_escape_one, text)


def _visible(value: Any) -> Any:
    return escape_controls(value) if isinstance(value, str) else value


def format_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """CSV as `nsys stats --format csv` prints it: a header line, then one line per row; minimal
    quoting, '\\n' line ends, None as an empty field, floats as Python prints them (12512.0).
    Control characters in strings are written as visible escapes (escape_controls)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([escape_controls(c) for c in columns])
    for row in rows:
        writer.writerow(["" if row.get(c) is None else _visible(row.get(c)) for c in columns])
    return buf.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return format(value, ",")
    return escape_controls(str(value))


def format_table(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A readable aligned text table: numbers right-aligned with thousands separators, text
    left-aligned, a rule under the header; control characters in strings are written as visible
    escapes (escape_controls)."""
    rows = list(rows)
    header = [escape_controls(c) for c in columns]
    numeric = [bool(rows) and all(isinstance(r.get(c), (int, float)) or r.get(c) is None for r in rows)
               and any(r.get(c) is not None for r in rows) for c in columns]
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(h)] + [len(line[i]) for line in cells]) for i, h in enumerate(header)]

    def render(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    lines = [render(header), render(["-" * w for w in widths])]
    lines += [render(line) for line in cells]
    return "\n".join(lines) + "\n"
