"""The history index: one SQLite database over every retained namespace's tables.

`python -m harness history build [--artifacts DIR] [--out FILE]` reads every namespace folder under
`artifacts/` that has a `tables/` folder and writes one database (sqlite-utils):

* one table per CSV kind (`kernel_time`, `kernel_time_detail`, `span`, `check`, `sweep`, `census`,
  `ceilings`, and any other `tables/*.csv`, named by its file stem), the rows of every namespace
  with a `namespace` column first (the folder's name, which is where the rows are retained);
* `namespaces`: one row per namespace from its `provenance.json` (date, commit, dirty tree, GPU
  name and uuid, nsys / torch / triton versions, config hash) and its place in date order;
* `files`: every CSV read, with its sha256 and row count, so the index can be checked against the
  retained tables it came from.

The index is derived data, never the only copy of anything: the retained CSVs and provenance are.
It is rebuilt whole on every build (written under a temporary name, then renamed over the old
one), never updated in place, and the same inputs give the same rows.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pandas as pd
import sqlite_utils
from sqlite_utils.db import Table

from harness import ROOT
from harness.errors import EvidenceError, shown
from harness.io import check_out, partial_path, row_dicts
from harness.tables import table_files

DEFAULT_ARTIFACTS = ROOT / "artifacts"
DEFAULT_OUT = DEFAULT_ARTIFACTS / "history.sqlite"

# Columns read as text whatever they look like (a shape or a hash must never become a number).
TEXT_COLUMNS = {
    "namespace", "op", "shape", "impl", "cache_mode", "kernel", "short_name", "main_kernel", "kernels",
    "specialization", "shapes", "arch", "symbol", "source_sha256", "compiler", "options", "grid",
    "ceiling", "unit", "method", "status", "note", "reason",
}
TEXT_DTYPES = {c: str for c in sorted(TEXT_COLUMNS)}
"""read_csv's dtypes: the identifying columns a table has kept as text, in one read."""


def namespace_dirs(artifacts: str | Path) -> list[Path]:
    """Every folder directly under `artifacts` that holds a `tables/` folder, by name."""
    artifacts = Path(artifacts)
    if not artifacts.is_dir():
        return []
    return sorted((p for p in artifacts.iterdir() if p.is_dir() and (p / "tables").is_dir()), key=lambda p: p.name)


def named_dirs(artifacts: str | Path, names: Sequence[str]) -> list[Path]:
    """The folders of the namespaces `names` under `artifacts`, in that order (EvidenceError, one
    sentence, for the first that is not there), or without names every namespace folder there
    (`namespace_dirs`): what a command that takes 'NAMESPACE ...' or all of them works on."""
    artifacts = Path(artifacts)
    for name in names:
        if not (artifacts / name).is_dir():
            raise EvidenceError(f"there is no namespace {name} under {artifacts}.")
    return [artifacts / n for n in names] if names else namespace_dirs(artifacts)


def _json_dict(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_provenance(ns_dir: str | Path) -> dict[str, Any]:
    """The namespace's provenance.json; for a namespace that only sweep targets wrote, the latest
    of its `tables/sweep_<op>_provenance.json`; {} where it has none (or none reads as JSON)."""
    whole = _json_dict(Path(ns_dir) / "provenance.json")
    if whole:
        return whole
    sweeps = [d for d in (_json_dict(p) for p in sorted((Path(ns_dir) / "tables").glob("sweep_*_provenance.json"))) if d]
    return max(sweeps, key=lambda d: str(d.get("date_utc", ""))) if sweeps else {}


def provenance_date(provenance: dict[str, Any]) -> datetime.datetime | None:
    """The run's date (provenance `date_utc`) as an aware UTC datetime; None where absent or unreadable."""
    text = provenance.get("date_utc")
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc)


def _order_key(ns_dir: Path) -> tuple[int, str, str]:
    when = provenance_date(read_provenance(ns_dir))
    # Undated namespaces first (their place in time is unknown, so they are never "the most recent").
    return (0, "", ns_dir.name) if when is None else (1, when.isoformat(), ns_dir.name)


def namespaces_in_order(artifacts: str | Path) -> list[str]:
    """Namespace names under `artifacts`, oldest first by provenance date (ties by name); those
    without a readable date come first, by name."""
    return [p.name for p in sorted(namespace_dirs(artifacts), key=_order_key)]


def read_table(path: str | Path, required: Sequence[str] = (), numbers: Sequence[str] = ()) -> pd.DataFrame:
    """One evidence CSV, with identifying columns kept as text. A table that cannot be read (not
    UTF-8, empty, not CSV), that lacks a `required` column, or that holds text in one of its
    `numbers` columns is EvidenceError, one sentence naming the file."""
    name = shown(path)
    try:
        frame = pd.read_csv(path, dtype=TEXT_DTYPES, encoding="utf-8")  # a column it lacks is no error
    except UnicodeDecodeError as exc:
        raise EvidenceError(f"{name} is not UTF-8 text ({shown(exc.reason, 60)}), so it is no evidence table.") from None
    except pd.errors.EmptyDataError:
        raise EvidenceError(f"{name} is empty: it has not even a header row of column names.") from None
    except (pd.errors.ParserError, ValueError) as exc:
        raise EvidenceError(f"{name} cannot be read as CSV ({shown(str(exc).strip().splitlines()[0], 100)}).") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise EvidenceError(f"{name} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}, "
                            "so it is not the table it is named for.")
    for col in numbers:
        if col in frame.columns and not pd.api.types.is_numeric_dtype(frame[col]):
            values = pd.to_numeric(frame[col], errors="coerce")
            bad = frame[col][values.isna() & frame[col].notna()]
            if len(bad):
                raise EvidenceError(f"{name} holds {shown(bad.iloc[0], 40)!r} in its number column {col} "
                                    f"(row {int(bad.index[0]) + 2} of the file).")
            frame[col] = values
    return frame


def _version_number(text: Any) -> str | None:
    """'NVIDIA Nsight Systems version 2025.3.1.0' -> '2025.3.1.0'; other strings kept as they are."""
    if text is None:
        return None
    match = re.search(r"\d+(?:\.\d+)+", str(text))
    return match.group(0) if match else str(text)


def gpu_model(gpus: Sequence[Mapping[str, Any]]) -> str | None:
    """The GPU model(s) a namespace ran on, each name once ('NVIDIA H200' for a run spread over
    two H200s), so namespaces compare by model whatever number of GPUs each used."""
    names = sorted({str(g.get("name")) for g in gpus})
    return "; ".join(names) or None


def namespace_row(ns_dir: str | Path, order: int | None = None) -> dict[str, Any]:
    """The `namespaces` row of one namespace, from its provenance.json."""
    ns_dir = Path(ns_dir)
    prov = read_provenance(ns_dir)
    git = prov.get("git") or {}
    gpus = prov.get("gpus") or []
    versions = prov.get("versions") or {}
    config_sha = prov.get("config_sha256")
    if not config_sha and isinstance(prov.get("config"), dict):
        config_sha = hashlib.sha256(json.dumps(prov["config"], sort_keys=True).encode()).hexdigest()
    dirty = git.get("dirty")
    when = provenance_date(prov)
    tables = sorted(name for name, _ in table_files.in_folder(ns_dir / "tables"))
    return {
        "name": ns_dir.name,
        "position": order,
        "date_utc": when.isoformat() if when else None,
        "has_provenance": bool(prov),
        "commit": git.get("commit"),
        "dirty": None if dirty is None else bool(dirty),
        "gpu_name": gpu_model(gpus),
        "gpu_uuid": "; ".join(str(g.get("uuid")) for g in gpus) or None,
        "gpu_count": len(gpus),
        "nsys_version": _version_number(versions.get("nsys")),
        "torch_version": versions.get("torch"),
        "triton_version": versions.get("triton"),
        "cupy_version": versions.get("cupy-cuda13x"),
        "python_version": versions.get("python"),
        "config_sha256": config_sha,
        "cache_mode": (prov.get("config") or {}).get("cache_mode"),
        "host": prov.get("host"),
        "tables": ";".join(tables),
        "has_ceilings": "ceilings" in tables,
    }


def _column_type(series: pd.Series) -> type:
    """SQLite column type of a column: INTEGER for booleans and integers, FLOAT for numbers, else TEXT
    (an object column by the types of its values, so a boolean with gaps stays INTEGER)."""
    if pd.api.types.is_bool_dtype(series) or pd.api.types.is_integer_dtype(series):
        return int
    if pd.api.types.is_float_dtype(series):
        return float
    values = [v for v in series if v is not None and not (isinstance(v, float) and pd.isna(v))]
    if values and all(isinstance(v, (bool, int)) for v in values):
        return int
    if values and all(isinstance(v, (bool, int, float)) for v in values):
        return float
    return str


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for rec in row_dicts(frame.astype(object).where(frame.notna(), None)):
        out.append({k: (int(v) if isinstance(v, bool) else v) for k, v in rec.items()})
    return out


def _table_name(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", stem)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_index(artifacts: str | Path = DEFAULT_ARTIFACTS, out: str | Path = DEFAULT_OUT) -> Path:
    """Build the history index of every namespace under `artifacts` into `out` (replacing it whole);
    returns `out`. Written under a temporary name and renamed, so a reader never sees half of one."""
    artifacts, out = Path(artifacts), Path(out)
    if not artifacts.is_dir():
        raise EvidenceError(f"history: there is no artifacts folder at {artifacts}, so there is nothing to index.")
    order = namespaces_in_order(artifacts)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(out)  # a name of its own: two builds to one --out never share a partial file
    frames: dict[str, list[pd.DataFrame]] = {}
    files: list[dict[str, Any]] = []
    ns_rows = []
    for i, name in enumerate(order):
        ns_dir = artifacts / name
        ns_rows.append(namespace_row(ns_dir, i))
        for stem, csv in table_files.in_folder(ns_dir / "tables"):
            frame = read_table(csv)
            frame = frame.drop(columns=["namespace"], errors="ignore")
            frame.insert(0, "namespace", name)
            table = _table_name(stem)
            frames.setdefault(table, []).append(frame)
            files.append({"namespace": name, "path": csv.relative_to(artifacts).as_posix(), "table": table,
                          "rows": len(frame), "sha256": _sha256(csv)})
    try:
        db = sqlite_utils.Database(tmp)
        _write_table(db, "namespaces", pd.DataFrame(ns_rows), pk="name")
        _write_table(db, "files", pd.DataFrame(files, columns=["namespace", "path", "table", "rows", "sha256"]),
                     pk=("namespace", "path"))
        for table in sorted(frames):
            parts = [f for f in frames[table] if not f.empty] or frames[table]
            _write_table(db, table, pd.concat(parts, ignore_index=True, sort=False))
        for table in ("kernel_time", "kernel_time_detail", "span", "check", "sweep", "census", "ceilings"):
            if table in db.table_names():
                cols = [c for c in ("namespace", "op", "shape", "impl") if c in db[table].columns_dict]
                cast(Table, db[table]).create_index(cols, index_name=f"idx_{table}_key", if_not_exists=True)
        db.close()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _write_table(db: sqlite_utils.Database, name: str, frame: pd.DataFrame, pk: Any = None) -> None:
    columns = {c: _column_type(frame[c]) for c in frame.columns} if len(frame.columns) else {"namespace": str}
    cast(Table, db[name]).create(columns, pk=pk)  # tables this build writes, never views
    if len(frame):
        cast(Table, db[name]).insert_all(_records(frame), batch_size=500)


def open_index(path: str | Path) -> sqlite_utils.Database:
    """An existing index, read-only in intent (it is rebuilt, never updated)."""
    path = Path(path)
    if not path.is_file():
        raise EvidenceError(f"history: there is no index at {path}; build it with `python -m harness history build`.")
    return sqlite_utils.Database(path)


def table_frame(db: sqlite_utils.Database, table: str) -> pd.DataFrame:
    """A whole table of the index as a DataFrame (empty without that table)."""
    if table not in db.table_names():
        return pd.DataFrame()
    return pd.DataFrame(list(db[table].rows))


USAGE = "usage: python -m harness history build [--artifacts DIR] [--out FILE]"


def main(argv: list[str] | None = None) -> int:
    """`python -m harness history build [--artifacts DIR] [--out FILE]`."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m harness history", description=__doc__.strip().splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="rebuild the index of every retained namespace")
    build.add_argument("--artifacts", default=str(DEFAULT_ARTIFACTS), help="folder holding the namespaces (artifacts/)")
    build.add_argument("--out", default=None, help="the index to write (default: <artifacts>/history.sqlite, "
                       "which a build replaces; another file that exists only with --force)")
    build.add_argument("--force", action="store_true", help="replace an existing --out")
    if not args or args[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    try:
        opts = parser.parse_args(args)
    except SystemExit as exc:  # argparse already printed its one line
        return 2 if exc.code else 0
    artifacts = Path(opts.artifacts)
    default = artifacts / "history.sqlite"
    try:
        out = check_out(opts.out, "history", force=opts.force, own=default) if opts.out else default
        path = build_index(artifacts, out)
    except EvidenceError as exc:
        print(shown(str(exc), 100_000), file=sys.stderr)
        return 2
    db = sqlite_utils.Database(path)
    names = [r["name"] for r in db["namespaces"].rows_where(order_by="position")]
    counts = ", ".join(f"{t} {db[t].count}" for t in sorted(db.table_names()) if t not in ("namespaces", "files"))
    db.close()
    print(f"history: indexed {len(names)} namespaces ({', '.join(names) or 'none'}) into {path}: {counts or 'no tables'}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
