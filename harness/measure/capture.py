"""Run a measurement group's process under Nsight Systems, export the capture to SQLite, and keep
the invoking shell's environment out of both.

No shell is involved: every command is an argument list. The tool (nsys, ncu) and the process it
starts run under a minimal environment (`ENV_ALLOWLIST`) and a private temporary folder and home
(`private_env`), so neither inherits a variable of the invoking shell nor finds a daemon another
process started with one, and in a process namespace of their own where the machine allows one
(harness.tools.isolation): nsys records the environment of every process above it, so without
one the shell that started snakemake reaches the report. The fresh export (the report
decompressed) is searched for the values of the invoking environment outside the allowlist
(`leaked_values`): where it holds one, the raw report is deleted, never kept. The export's
environment rows are then deleted and the file vacuumed (`scrub_export`), and every file written
is searched again.
Outputs are written under temporary names and renamed only when complete.
"""

from __future__ import annotations

import glob
import os
import re
import site
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.errors import EvidenceError
from harness.launch import modules
from harness.tools import PROVENANCE_INPUTS, clean_parent, find_nsys, isolation_note, start_owned, wait_owned

SESSION_REPORT = "session.nsys-rep"
"""A measurement session's one raw nsys report, in the session's folder (artifacts/<ns>/measure/)."""

GROUP_REPORT = "capture.nsys-rep"
"""A group's raw report in its own folder, as runs before measurement sessions left it."""

# Variables the captured process may see; everything else is dropped before nsys starts.
ENV_ALLOWLIST = (
    "PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "TRITON_CACHE_DIR", "CUPY_CACHE_DIR",
    "XDG_CACHE_HOME", "NVIDIA_VISIBLE_DEVICES", "PYTHONUSERBASE", "EVIDENCE_BUILD_CACHE",
)


def minimal_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOWLIST}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def private_env(folder: Path) -> dict[str, str]:
    """`minimal_env` with TMPDIR and HOME in `folder`: nsys keeps its session sockets and daemon
    state under the temporary folder and its configuration under the home, so a tool started here
    finds no daemon, socket or state that another nsys command started with a fuller environment
    (the invoking shell's, whose values then reach the raw report), and starts its own with this
    one. HOME used to stay the shell's (`setdefault` over an allowlisted HOME), so an nsys started
    from the shell before the run was found through it. The caches the real home holds (compiled
    Triton and CuPy kernels, packages installed with `pip --user`) are named explicitly, so they
    are still used, and so is the build cache's folder (the cubins the run loads instead of compiling)."""
    folder.mkdir(parents=True, exist_ok=True)
    env = minimal_env()
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    env.setdefault("TRITON_CACHE_DIR", str(home / ".triton" / "cache"))
    env.setdefault("CUPY_CACHE_DIR", str(home / ".cupy" / "kernel_cache"))
    env.setdefault("PYTHONUSERBASE", site.getuserbase())
    built = modules.cache_root()  # the build's compiled modules (harness.launch.modules), by the real home
    env.setdefault(modules.ENV, str(built) if built is not None else "off")
    private_home = folder / "home"
    private_home.mkdir(mode=0o700, exist_ok=True)
    env["TMPDIR"] = str(folder)
    env["HOME"] = str(private_home)
    return env


SECRET_MIN_LENGTH = 8
"""Values shorter than this are too common to search for ('1', 'true', a path component)."""


def outside_values(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The invoking environment's variables outside the allowlist whose values are worth searching
    for, name -> value: long enough (SECRET_MIN_LENGTH), and not what the pipeline writes of its
    own accord (a value found in an allowlisted variable, in the interpreter's or the project's
    path, or a path that exists on this machine, such as a home or tool folder, and the commit a
    copy without .git is given: PROVENANCE_INPUTS)."""
    env = dict(os.environ if environ is None else environ)
    own = " ".join([*(v for k, v in env.items() if k in ENV_ALLOWLIST), sys.executable, sys.prefix, str(ROOT)])
    out = {}
    for k, v in env.items():
        if k in ENV_ALLOWLIST or k in PROVENANCE_INPUTS or len(v) < SECRET_MIN_LENGTH or v in own:
            continue
        try:
            if os.path.exists(v):
                continue
        except (OSError, ValueError):
            pass
        out[k] = v
    return out


def leaked_values(path: Path, values: Mapping[str, str]) -> list[str]:
    """The names of the variables whose value occurs in the file's bytes (as UTF-8 or UTF-16)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    found = []
    for name, value in values.items():
        if value.encode() in data or value.encode("utf-16-le") in data:
            found.append(name)
    return found


ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _stringid_references(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(table, column) pairs the export's schema declares as `REFERENCES StringIds(id)`."""
    refs = []
    for table, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type='table'"):
        for line in (sql or "").splitlines():
            m = re.match(r"\s*(\w+)\s+INTEGER.*REFERENCES StringIds\(id\)", line)
            if m:
                refs.append((table, m.group(1)))
    return refs


def scrub_export(sqlite_path: Path) -> int:
    """Remove the captured processes' environment from an export, then vacuum the file so no
    deleted page keeps it. nsys stores it in three places: rows of META_DATA_CAPTURE named *ENV*
    (deleted), the 'DeviceEnvironment' row of TARGET_INFO_SYSTEM_ENV (blanked), and whole
    NUL-separated environment blocks in StringIds that no event references (blanked; ids stay
    valid). Returns the number of rows removed or blanked."""
    conn = sqlite3.connect(sqlite_path)
    try:
        removed = 0
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "META_DATA_CAPTURE" in tables:
            removed += conn.execute("DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENV%'").rowcount
        if "TARGET_INFO_SYSTEM_ENV" in tables:  # 'DeviceEnvironment': the launch environment, ';'-joined
            removed += conn.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = '' "
                                    "WHERE name LIKE '%Environment%' AND value != ''").rowcount
        if "StringIds" in tables:
            used: set[int] = set()
            for table, column in _stringid_references(conn):
                used.update(r[0] for r in conn.execute(f'SELECT DISTINCT "{column}" FROM "{table}"') if r[0] is not None)
            doomed = [i for i, v in conn.execute("SELECT id, value FROM StringIds")
                      if isinstance(v, str) and ENV_ASSIGNMENT.match(v) and i not in used]
            conn.executemany("UPDATE StringIds SET value = '' WHERE id = ?", [(i,) for i in doomed])
            removed += len(doomed)
        conn.commit()
        conn.execute("VACUUM")
    finally:
        conn.close()
    return removed


TIME_COLUMNS = ("start", "timestamp")
"""The column by which a row of an export lies in a group's window (the first a table has)."""


def split_export(session: Path, out: Path, window: str) -> int:
    """Write the part of the session's export that lies in the NVTX range `window` (one group's
    captured rounds, opened and closed with the GPU idle) to `out`, whole or not at all: every
    table with its schema, the rows of a table with a time column (TIME_COLUMNS) only where that
    time lies in the window (or is missing: such rows are kept in every part), every other table
    (strings, enums, the target's and the export's facts) whole. Returns the rows kept in tables
    with a time column. EvidenceError (one sentence) where the export has no such range."""
    tmp = out.with_name(out.name + ".partial")
    tmp.unlink(missing_ok=True)
    dst = sqlite3.connect(tmp)
    kept = 0
    try:
        dst.execute("PRAGMA journal_mode=OFF")
        dst.execute("PRAGMA synchronous=OFF")
        dst.execute("ATTACH DATABASE ? AS src", (str(session),))
        span = _window(dst, window)
        if span is None:
            raise EvidenceError(f"the session's export {session.name} holds no one range {window!r}, so the group's part "
                                "of it cannot be told apart.")
        schema = dst.execute("SELECT type, name, sql FROM src.sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE "
                             "'sqlite_%'").fetchall()
        for kind, name, sql in schema:
            if kind == "table":
                dst.execute(sql)
        for kind, name, _ in schema:
            if kind != "table":
                continue
            columns = [(r[1], r[6] if len(r) > 6 else 0) for r in dst.execute(f'PRAGMA src.table_xinfo("{name}")')]
            stored = ", ".join(f'"{c}"' for c, hidden in columns if not hidden)
            time_column = next((c for c in TIME_COLUMNS if c in {c for c, _ in columns}), None)
            if time_column is None:
                dst.execute(f'INSERT INTO main."{name}" ({stored}) SELECT {stored} FROM src."{name}"')
                continue
            cur = dst.execute(f'INSERT INTO main."{name}" ({stored}) SELECT {stored} FROM src."{name}" '
                              f'WHERE "{time_column}" IS NULL OR "{time_column}" BETWEEN ? AND ?', span)
            kept += max(0, cur.rowcount)
        for kind, name, sql in schema:
            if kind != "table":
                dst.execute(sql)
        dst.commit()
        dst.execute("DETACH DATABASE src")
    except BaseException:
        dst.close()
        tmp.unlink(missing_ok=True)
        raise
    dst.close()
    os.replace(tmp, out)
    return kept


def _window(conn: sqlite3.Connection, name: str) -> tuple[int, int] | None:
    """(start, end) in ns of the one NVTX range named `name` in the export attached as `src`, or
    None where it holds none, or more than one."""
    tables = {r[0] for r in conn.execute("SELECT name FROM src.sqlite_master WHERE type='table'")}
    if "NVTX_EVENTS" not in tables:
        return None
    columns = {r[1] for r in conn.execute('PRAGMA src.table_info("NVTX_EVENTS")')}
    where, args = "text = ?", [name]
    if "textId" in columns and "StringIds" in tables:
        where += " OR textId IN (SELECT id FROM src.StringIds WHERE value = ?)"
        args.append(name)
    rows = conn.execute(f"SELECT start, end FROM src.NVTX_EVENTS WHERE end IS NOT NULL AND ({where})", args).fetchall()
    return (int(rows[0][0]), int(rows[0][1])) if len(rows) == 1 else None


def _run(argv: list[str], log: Any, what: str, env: dict[str, str], timeout: float) -> int:
    print("$ " + " ".join(argv), file=log, flush=True)
    proc = start_owned(clean_parent(argv), what, stdout=log, stderr=subprocess.STDOUT, env=env)
    wait_owned(proc, timeout, what)
    return proc.returncode


def group_command(nsys: str, trace: Sequence[str], extra_args: Sequence[str], out_base: Path,
                  plan: Path) -> list[str]:
    """nsys profile of the group process (harness.measure.group): one report and its SQLite export
    of the one capture range the process opens, which its exit closes (--capture-range-end stop:
    no second range)."""
    return [nsys, "profile", "--trace", ",".join(trace), *extra_args, "--capture-range", "cudaProfilerApi",
            "--capture-range-end", "stop", "--force-overwrite", "true", "--export", "sqlite",
            "--output", str(out_base), sys.executable, "-m", "harness", "group", str(plan)]


def profile_group(nsys_path: str | None, trace: Sequence[str], extra_args: Sequence[str], plan: Path,
                  report: Path, export: Path, log_path: Path, timeout: float) -> dict[str, Any]:
    """Run the group process under nsys; on success the report and the scrubbed export are at
    `report` and `export` (renamed there when complete). Returns the facts of the run. A process
    that exits non-zero raises GroupFailed with its exit status (its progress file says why)."""
    nsys = find_nsys(nsys_path)
    report.parent.mkdir(parents=True, exist_ok=True)
    tmp_base = report.with_name(report.name + ".partial")
    tmp_rep = tmp_base.with_name(tmp_base.name + ".nsys-rep")
    tmp_sqlite = tmp_base.with_name(tmp_base.name + ".sqlite")
    leftovers = glob.escape(tmp_base.name) + ".*"  # nsys's files under the partial name (.qdstrm too)
    for stale in (*report.parent.glob(leftovers), report, export):
        stale.unlink(missing_ok=True)
    try:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="evidence-nsys-") as private, open(log_path, "a") as log:
            rc = _run(group_command(nsys, trace, extra_args, tmp_base, plan), log, "nsys profile of the group",
                      private_env(Path(private)), timeout)
        if rc != 0:
            raise GroupFailed(rc)
        ran = time.perf_counter() - started
        if not tmp_rep.is_file() or not tmp_sqlite.is_file():
            raise EvidenceError(f"nsys profile wrote no {'report' if not tmp_rep.is_file() else 'export'} (a .qdstrm "
                                "alone means its importer failed, e.g. libdw.so.1 missing); see the log.")
        held = leaked_values(tmp_sqlite, outside_values())
        if held:  # the export is the report decompressed: the report holds these values too
            tmp_rep.unlink()
        removed = scrub_export(tmp_sqlite)
        if not held:
            os.replace(tmp_rep, report)
        os.replace(tmp_sqlite, export)
        scrubbed = time.perf_counter() - started - ran
    finally:  # whatever nsys left under the partial name (a raw stream holds what the report would)
        for stale in report.parent.glob(leftovers):
            stale.unlink(missing_ok=True)
    return {"nsys": nsys, "env_rows_removed": removed, "isolation": isolation_note(),
            "seconds": {"nsys": ran, "scrub": scrubbed},
            "report_withheld": [f"{report.name}: deleted, its export held the value of {', '.join(sorted(held))} from the "
                                "invoking environment (nsys records every process above it, and no process namespace "
                                "kept them out)"] if held else []}


class GroupFailed(Exception):
    """The group process exited with a non-zero status (the measure step reads its progress file)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the group process exited with status {status}")
        self.status = status


TEXT_SUFFIXES = (".log", ".csv", ".json", ".txt", ".md")


def keep_clean(paths: Sequence[Path], values: Mapping[str, str]) -> list[str]:
    """Search every file for the invoking environment's values (`outside_values`): a text file
    (TEXT_SUFFIXES) has each such value replaced by '[NAME withheld]'; an SQLite file is scrubbed
    again by value (every text cell holding it blanked, then vacuumed); any other file that still
    holds one (a raw report) is deleted. Returns one line per file acted on."""
    notes = []
    for path in paths:
        names = leaked_values(path, values)
        if not names:
            continue
        if path.suffix in TEXT_SUFFIXES:
            text = path.read_text(errors="replace")
            for name in names:
                text = text.replace(values[name], f"[{name} withheld]")
            path.write_text(text)
            notes.append(f"{path.name}: the value of {', '.join(sorted(names))} withheld")
            continue
        if path.suffix == ".sqlite":
            scrub_values(path, [values[n] for n in names])
            left = leaked_values(path, values)
            if not left:
                notes.append(f"{path.name}: the value of {', '.join(sorted(names))} blanked")
                continue
            names = left
        path.unlink(missing_ok=True)
        notes.append(f"{path.name}: deleted, it held the value of {', '.join(sorted(names))} from the invoking environment")
    return notes


def scrub_values(sqlite_path: Path, secrets: Sequence[str]) -> int:
    """Blank every text cell of the export that holds one of `secrets`, then vacuum."""
    conn = sqlite3.connect(sqlite_path)
    changed = 0
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            for column in columns:
                for secret in secrets:
                    changed += conn.execute(
                        f'UPDATE "{table}" SET "{column}" = \'\' WHERE typeof("{column}") = \'text\' '
                        f'AND instr("{column}", ?) > 0', (secret,)).rowcount
        conn.commit()
        conn.execute("VACUUM")
    finally:
        conn.close()
    return changed
