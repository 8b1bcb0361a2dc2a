"""One reviewable file per namespace: bundle its evidence into a .tar.gz, and verify such a bundle.

`make_bundle(ns, out)` packs, from the repository root:

    MANIFEST.json                                   (always the first member)
    artifacts/<ns>/provenance.json
    artifacts/<ns>/tables/**                        every table, sub-folders included
    artifacts/<ns>/capture/<op>/<shape>/<impl>.sqlite   the exports, each re-scrubbed (below)
    artifacts/<ns>/capture/**/*.json                the capture metadata (and <impl>.config.json)
    artifacts/<ns>/capture/**/*.nsys-rep            only with include_reports=True
    report/<ns>/**                                  field_note.md, issue_comment.md, figures/*.svg

Each export is copied to a temporary folder and `harness.capture.scrub_export` is run on the copy
(never on the namespace's file); the scrubbed copy is what is hashed and packed, so no environment
row of the captured process reaches the bundle. A raw `.nsys-rep` cannot be scrubbed: it holds the
captured process's (allowlisted) environment, which is why reports stay out unless asked for.

MANIFEST.json (JSON, keys sorted, one space indent):

    format            "kernel-evidence-bundle/1"
    namespace         <ns>
    run_commit        the git commit of the run, from the bundled provenance (git.commit)
    bundled_at        {"commit", "dirty"} of the checkout that made the bundle
    code_sha256       SHA-256 of the report templates and the harness modules that make the tables
                      and reports (CODE_FILES), in the checkout that made the bundle
    include_reports   whether .nsys-rep files were asked for
    scrubbed_rows     {export path: environment rows the re-scrub removed} (0 for a pipeline export)
    members           [{"path", "size", "sha256"}] for every other member, sorted by path

The archive is deterministic: members sorted (the manifest first), regular files only, mode 0644,
uid/gid 0, empty owner names, mtime MTIME, PAX format, gzip with no file name and mtime 0; the same
inputs (and the same Python/zlib) give the same bytes. It is written under a temporary name and
renamed when complete.

`verify(bundle)` extracts the bundle safely into a temporary folder (regular files and folders
only; no absolute path, no '..', no link or device, nothing landing outside the folder; at most
MAX_TOTAL_BYTES uncompressed, checked before anything is written) and then checks:

1. every member against the manifest: size and SHA-256, none missing, none extra, all inside
   artifacts/<ns>/ or report/<ns>/;
2. the kernel-time tables against the exports: `harness.tables.kernel_time_detail` on every bundled
   export with the capture range and iterations of the bundled provenance's config, then
   `kernel_time_summary` (with the bundled ceilings.csv when there is one) and `sweep_rows`, each
   written through `harness.tables.write_csv` (`%.6g`) exactly as the pipeline writes them, compared
   cell by cell with tables/kernel_time_detail.csv, kernel_time.csv, sweep.csv and sweep_<op>.csv
   (rows matched by op, shape, impl and kernel). Other tables (span, check, census, ceilings,
   shape/*) are measurements without an export to re-derive them from: only their hashes are
   checked;
3. the reports against the tables: `harness.report.render_reports` re-renders both reports (and the
   figures, when the bundle has report/<ns>/figures/) from the bundled tables and provenance; each
   differing line names the report, the bundle's line number and the numbers that differ
   ("field_note.md line 14: 5.91 in the bundle, 5.81 from the tables"); each SVG must be the same
   bytes.

Run verify at the commit the bundle's run used (provenance git.commit, also MANIFEST.json's
run_commit): steps 2 and 3 use this checkout's code and templates. When they differ from those that
produced the bundle, the differences show up as wording, layout or column differences, or as a
report that cannot be rendered; verify names them as such (and the files of CODE_FILES that differ
from those the bundle was made with), and never presents them as differing numbers.

`verify` returns the problems, one sentence each (an empty list: verified). A file that is not a
usable bundle (not gzip, not tar, truncated, an unsafe member, too large, no or a malformed
manifest) raises BundleError instead, one sentence. `main` is the command line: exit 0 verified,
1 problems found, 2 unusable input; `bundle_main` makes a bundle from the command line.
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import sqlite3
import stat
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness import ROOT
from harness import config as hconfig
from harness.errors import EvidenceError
from harness.io import read_csvs, write_csv
from harness.measure.capture import scrub_export
from harness.report.provenance import git_state
from harness.report.render import render_reports, table_inputs
from harness.tables import derive as tables

FORMAT = "kernel-evidence-bundle/1"
MANIFEST = "MANIFEST.json"
MTIME = 946684800  # 2000-01-01T00:00:00Z: the mtime of every member
MAX_TOTAL_BYTES = 2 * 1024**3
"""Largest total of the members' sizes verify accepts (checked from the headers, before extracting)."""
MAX_MEMBERS = 100_000
MAX_MESSAGES_PER_FILE = 40
"""Differences listed per table or report; the rest are counted in one sentence."""

CODE_FILES = (
    "report/templates/field_note.md.j2", "report/templates/issue_comment.md.j2", "harness/report.py",
    "harness/figures.py", "harness/tables.py", "harness/nsys.py", "harness/ops/__init__.py",
)
"""The code that turns exports into tables and tables into reports, hashed into the manifest."""

RENDER_TABLES = ("kernel_time", "kernel_time_detail", "span", "check", "sweep", "census")
NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_CHUNK = 1 << 20


class BundleError(EvidenceError):
    """A bundle cannot be made, or a file is not a usable bundle (one sentence)."""


# ----------------------------------------------------------------------------------------------
# Small helpers


def _show(text: Any, limit: int = 160) -> str:
    """Untrusted text (member names, report lines) made safe for a one-line message."""
    s = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in str(text))
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_namespace(ns: Any) -> str:
    if not isinstance(ns, str) or not NAMESPACE_RE.match(ns):
        raise BundleError(f"{_show(ns)!s} is not a namespace name (letters, digits, '.', '_', '-').")
    return ns


def code_hashes(root: Path = ROOT) -> dict[str, str]:
    """SHA-256 of each file of CODE_FILES in a checkout ('absent' where it has none)."""
    return {f: (_sha256(root / f) if (root / f).is_file() else "absent") for f in CODE_FILES}


# ----------------------------------------------------------------------------------------------
# Making a bundle


def _regular_files(folder: Path, root: Path) -> Iterable[Path]:
    """Every regular file under folder, sorted; a symbolic link stops the bundle (one sentence)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            if p.is_symlink():
                raise BundleError(f"{p.relative_to(root)} is a symbolic link; a bundle takes regular files only.")
        for name in filenames:
            p = Path(dirpath) / name
            if stat.S_ISREG(p.lstat().st_mode) and ".partial" not in name:  # .partial: an unfinished write
                found.append(p)
    return sorted(found)


def pack(files: Mapping[str, Path], out: Path, meta: Mapping[str, Any]) -> Path:
    """Write a deterministic bundle: MANIFEST.json (meta plus format and members) first, then every
    file of `files` (archive path -> file on disk) in path order. Atomic: temporary name, rename."""
    out = Path(out)
    for arc in files:
        if arc == MANIFEST or not _safe_name(arc):
            raise BundleError(f"{_show(arc)} cannot be a member of a bundle.")
    members = []
    for arc in sorted(files):
        members.append({"path": arc, "size": Path(files[arc]).stat().st_size, "sha256": _sha256(Path(files[arc]))})
    manifest = {**meta, "format": FORMAT, "members": members}
    data = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()

    def info(name: str, size: int) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mtime, ti.mode, ti.type = size, MTIME, 0o644, tarfile.REGTYPE
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        return ti

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    try:
        with open(tmp, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
                with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    tar.addfile(info(MANIFEST, len(data)), io.BytesIO(data))
                    for entry in members:
                        with open(files[entry["path"]], "rb") as fh:
                            tar.addfile(info(entry["path"], entry["size"]), fh)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


def make_bundle(ns: str, out: Path, root: Path = ROOT, include_reports: bool = False) -> Path:
    """Bundle namespace `ns` of the checkout at `root` into the .tar.gz `out` (see the module's
    docstring for the members and MANIFEST.json). Returns `out`. Raises BundleError (one sentence)
    when the namespace lacks its provenance, its tables or its two reports, holds a symbolic link,
    or an export cannot be scrubbed."""

    ns = _check_namespace(ns)
    root = Path(root)
    art, rep = root / "artifacts" / ns, root / "report" / ns
    needed = [art / "provenance.json", art / "tables" / "kernel_time.csv", art / "tables" / "kernel_time_detail.csv",
              rep / "field_note.md", rep / "issue_comment.md"]
    for p in needed:
        if not p.is_file():
            raise BundleError(f"{p.relative_to(root)} does not exist; run the pipeline for namespace {ns} first.")
    try:
        provenance = json.loads((art / "provenance.json").read_text())
    except (ValueError, UnicodeDecodeError):
        raise BundleError(f"artifacts/{ns}/provenance.json is not valid JSON.") from None

    def arc(p: Path) -> str:
        return p.relative_to(root).as_posix()

    files: dict[str, Path] = {arc(art / "provenance.json"): art / "provenance.json"}
    files.update({arc(p): p for p in _regular_files(art / "tables", root)})
    files.update({arc(p): p for p in _regular_files(rep, root)})
    scrubbed: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bundle-scrub-") as tmp:
        for i, p in enumerate(_regular_files(art / "capture", root) if (art / "capture").is_dir() else []):
            if p.suffix == ".json" or (include_reports and p.name.endswith(".nsys-rep")):
                files[arc(p)] = p
            elif p.suffix == ".sqlite":
                copy = Path(tmp) / f"{i}.sqlite"
                shutil.copyfile(p, copy)
                copy.chmod(0o600)
                try:
                    scrubbed[arc(p)] = scrub_export(copy)
                except sqlite3.Error as exc:
                    raise BundleError(f"{arc(p)} could not be scrubbed ({str(exc).rstrip('.')}); "
                                      "it may not be an SQLite export.") from None
                files[arc(p)] = copy
        state = git_state()
        meta = {
            "namespace": ns,
            "run_commit": (provenance.get("git") or {}).get("commit", "unknown") if isinstance(provenance, dict) else "unknown",
            "bundled_at": {"commit": state.get("commit"), "dirty": state.get("dirty")},
            "code_sha256": code_hashes(),
            "include_reports": bool(include_reports),
            "scrubbed_rows": scrubbed,
        }
        return pack(files, Path(out), meta)


# ----------------------------------------------------------------------------------------------
# Safe extraction


def _safe_name(name: str) -> bool:
    if not name or name.startswith("/") or "\\" in name or "\x00" in name or re.match(r"^[A-Za-z]:", name):
        return False
    parts = name.split("/")
    return all(p not in ("", ".", "..") for p in parts) and posixpath.normpath(name) == name


def _open_error(bundle: Path, exc: BaseException) -> BundleError:
    detail = _show(str(exc).rstrip(".") or type(exc).__name__, 100)
    return BundleError(f"{bundle} is not a complete gzip-compressed tar archive ({detail}); it is truncated or corrupt.")


def _check_stream(bundle: Path) -> None:
    """The whole gzip stream decompresses, its checksums hold and it is not too large."""
    try:
        with open(bundle, "rb") as fh:
            magic = fh.read(2)
    except OSError as exc:
        raise BundleError(f"{bundle} cannot be read ({exc.strerror}).") from None
    if magic != b"\x1f\x8b":
        raise BundleError(f"{bundle} is not a gzip file, so not a bundle (a bundle is a .tar.gz).")
    limit = MAX_TOTAL_BYTES + (MAX_MEMBERS + 64) * 2048  # the members plus their tar headers
    total = 0
    try:
        with gzip.open(bundle, "rb") as gz:
            while chunk := gz.read(_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise BundleError(f"{bundle} decompresses to more than {MAX_TOTAL_BYTES} bytes; "
                                      "verify refuses bundles that large.")
    except (OSError, EOFError, zlib.error) as exc:
        raise _open_error(bundle, exc) from None


def _refusal(m: tarfile.TarInfo, dest: Path) -> str | None:
    """Why member m may not be extracted into dest, or None."""
    name = _show(m.name)
    if m.issym() or m.islnk():
        return f"member {name} is a link (to {_show(m.linkname)}); a bundle holds regular files only"
    if m.isdev() or m.type not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE):
        return f"member {name} is not a regular file or folder"
    if m.name.startswith("/") or re.match(r"^[A-Za-z]:", m.name):
        return f"member {name} has an absolute path"
    if ".." in m.name.replace("\\", "/").split("/"):
        return f"member {name} has a '..' in its path"
    if not _safe_name(m.name.rstrip("/") if m.isdir() else m.name):
        return f"member {name} has a path that is not a plain relative path"
    target = os.path.realpath(dest / m.name)
    if os.path.commonpath([target, os.path.realpath(dest)]) != os.path.realpath(dest):
        return f"member {name} would land outside the extraction folder"
    return None


def _extract(bundle: Path, dest: Path) -> list[str]:
    """Extract the bundle's regular files into dest (created empty); return their names. Every
    member is checked before anything is written."""
    _check_stream(bundle)
    dest.mkdir(parents=True, exist_ok=False)
    try:
        with tarfile.open(bundle, mode="r:gz") as tar:
            members: list[tarfile.TarInfo] = []
            seen: set[str] = set()
            total = 0
            for m in tar:
                members.append(m)
                if len(members) > MAX_MEMBERS:
                    raise BundleError(f"{bundle} has more than {MAX_MEMBERS} members; verify refuses it.")
                why = _refusal(m, dest)
                if why:
                    raise BundleError(f"{bundle} is refused: {why}.")
                key = m.name.rstrip("/")
                if key in seen:
                    raise BundleError(f"{bundle} is refused: member {_show(m.name)} occurs twice.")
                seen.add(key)
                total += max(m.size, 0)
                if total > MAX_TOTAL_BYTES:
                    raise BundleError(f"{bundle} holds more than {MAX_TOTAL_BYTES} bytes of members; verify refuses bundles that large.")
            names = []
            root = os.path.realpath(dest)
            for m in members:
                target = Path(root, *m.name.rstrip("/").split("/"))
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                if os.path.commonpath([os.path.realpath(target.parent), root]) != root:
                    raise BundleError(f"{bundle} is refused: member {_show(m.name)} would land outside the extraction folder.")
                src = tar.extractfile(m)
                if src is None:
                    raise BundleError(f"{bundle} is refused: member {_show(m.name)} has no content.")
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
                written = 0
                with os.fdopen(fd, "wb") as fh, src:
                    while chunk := src.read(min(_CHUNK, m.size - written) or 1):
                        written += len(chunk)
                        if written > m.size:
                            raise BundleError(f"{bundle} is refused: member {_show(m.name)} is longer than its header says.")
                        fh.write(chunk)
                names.append(m.name)
    except BundleError:
        raise
    except tarfile.TarError as exc:
        detail = _show(str(exc).rstrip(".") or type(exc).__name__, 100)
        raise BundleError(f"{bundle} is gzip-compressed but not a readable tar archive ({detail}).") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise _open_error(bundle, exc) from None
    return names


def _read_manifest(dest: Path, bundle: Path, names: list[str]) -> dict[str, Any]:
    if MANIFEST not in names:
        raise BundleError(f"{bundle} has no {MANIFEST}, so it is not a bundle made by `make_bundle`.")
    try:
        manifest = json.loads((dest / MANIFEST).read_text())
    except (ValueError, UnicodeDecodeError):
        raise BundleError(f"{bundle}'s {MANIFEST} is not valid JSON.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{bundle}'s {MANIFEST} is not of format {FORMAT}.")
    members = manifest.get("members")
    if not isinstance(members, list) or not all(
            isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("size"), int)
            and isinstance(e.get("sha256"), str) for e in members):
        raise BundleError(f"{bundle}'s {MANIFEST} has no valid member list (path, size, sha256 of each).")
    _check_namespace(manifest.get("namespace"))
    return manifest


# ----------------------------------------------------------------------------------------------
# The checks


def _check_members(dest: Path, names: list[str], manifest: Mapping[str, Any]) -> list[str]:
    problems = []
    ns = manifest["namespace"]
    listed: dict[str, dict[str, Any]] = {}
    for entry in manifest["members"]:
        if entry["path"] in listed:
            problems.append(f"{MANIFEST} lists {_show(entry['path'])} twice.")
        listed[entry["path"]] = entry
    present = set(names) - {MANIFEST}
    for path, entry in sorted(listed.items()):
        if path not in present:
            problems.append(f"{_show(path)} is listed in {MANIFEST} but missing from the bundle.")
            continue
        size = (dest / path).stat().st_size
        if size != entry["size"]:
            problems.append(f"{_show(path)} is {size} bytes, {MANIFEST} says {entry['size']}.")
        elif _sha256(dest / path) != entry["sha256"]:
            problems.append(f"{_show(path)} does not match its SHA-256 in {MANIFEST}: it changed after bundling.")
    for path in sorted(present - set(listed)):
        problems.append(f"{_show(path)} is in the bundle but not listed in {MANIFEST}.")
    for path in sorted(present):
        if not path.startswith((f"artifacts/{ns}/", f"report/{ns}/")):
            problems.append(f"{_show(path)} lies outside artifacts/{ns}/ and report/{ns}/.")
    return problems


def _same(a: str, b: str) -> bool:
    """Two CSV cells agree: equal text, or equal numbers after the pipeline's %.6g."""
    if a == b:
        return True
    try:
        return "%.6g" % float(a) == "%.6g" % float(b)
    except ValueError:
        return False


def _compare_table(name: str, bundled: Path, derived: Path, keys: list[str], scope: set[tuple[str, ...]] | None,
                   drift: list[str]) -> list[str]:
    """Cell-by-cell comparison of a bundled table with the one re-derived from the exports, rows
    matched by `keys`; with `scope`, only rows whose (op, shape, impl) or (op, shape) is in it."""
    import pandas as pd

    if not bundled.is_file():
        return [f"The bundle has no tables/{name}, which its exports give."]
    try:
        b = pd.read_csv(bundled, dtype=str, keep_default_na=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable table is one finding
        return [f"tables/{name} cannot be read as CSV ({_show(exc, 100)})."]
    d = pd.read_csv(derived, dtype=str, keep_default_na=False)
    if not set(keys) <= set(b.columns):
        return [f"tables/{name} lacks the key columns {', '.join(k for k in keys if k not in b.columns)}."]
    problems: list[str] = []
    missing_cols = [c for c in d.columns if c not in b.columns]
    extra_cols = [c for c in b.columns if c not in d.columns]
    if missing_cols or extra_cols:
        parts = []
        if missing_cols:
            parts.append(f"lacks the columns {', '.join(missing_cols)} that this checkout's pipeline writes")
        if extra_cols:
            parts.append(f"has the columns {', '.join(map(_show, extra_cols))} that this checkout's pipeline does not write")
        problems.append(f"tables/{name} {' and '.join(parts)}.")
        drift.append(f"the columns of tables/{name}")

    width = len(next(iter(scope))) if scope else len(keys)  # scope keys: (op, shape, impl) or (op, shape)

    def rows(frame: Any) -> dict[tuple[str, ...], dict[str, str]]:
        out: dict[tuple[str, ...], dict[str, str]] = {}
        for rec in frame.to_dict("records"):
            key = tuple(str(rec[k]) for k in keys)
            if scope is not None and key[:width] not in scope:
                continue
            if key in out:
                problems.append(f"tables/{name} has two rows ({', '.join(map(_show, key))}).")
            out[key] = rec
        return out

    b_rows, d_rows = rows(b), rows(d)
    diffs: list[str] = []
    for key in d_rows:
        if key not in b_rows:
            diffs.append(f"tables/{name} has no row ({', '.join(map(_show, key))}), which the exports give.")
    for key in b_rows:
        if key not in d_rows:
            diffs.append(f"tables/{name} row ({', '.join(map(_show, key))}) comes from no bundled export.")
    common = [c for c in d.columns if c in b.columns and c not in keys]
    for key, drow in d_rows.items():
        brow = b_rows.get(key)
        if brow is None:
            continue
        for col in common:
            if not _same(str(brow[col]), str(drow[col])):
                diffs.append(f"tables/{name} row ({', '.join(map(_show, key))}), column {col}: "
                             f"{_show(brow[col], 80) or '(empty)'} in the bundle, {_show(drow[col], 80) or '(empty)'} from the exports.")
    if len(diffs) > MAX_MESSAGES_PER_FILE:
        diffs = diffs[:MAX_MESSAGES_PER_FILE] + [f"tables/{name}: {len(diffs) - MAX_MESSAGES_PER_FILE} more differences."]
    return problems + diffs


def _not_measured(record: Path) -> bool:

    try:
        return not tables.measured(json.loads(record.read_text()))
    except (OSError, ValueError, AttributeError):
        return False


def _check_tables(dest: Path, cfg: Mapping[str, Any], ns: str, work: Path, drift: list[str]) -> list[str]:
    """Re-derive kernel_time_detail, kernel_time and the sweep tables from the bundled exports."""
    import pandas as pd


    art = dest / "artifacts" / ns
    tdir = art / "tables"
    try:
        jobs = list(hconfig.jobs(cfg))
        range_name, iterations = str(cfg["capture"]["range"]), int(cfg["capture"]["iterations"])
        namespace, cache_mode = cfg["namespace"], cfg["cache_mode"]
        if iterations <= 0:
            raise ValueError(f"capture.iterations is {iterations}")
    except (KeyError, TypeError, ValueError) as exc:
        return [f"The bundled provenance's config lacks what re-deriving the tables needs ({_show(exc, 80)})."]
    exports = {}
    cap = art / "capture"
    for p in sorted(cap.glob("*/*/*.sqlite")) if cap.is_dir() else []:
        exports[(p.parent.parent.name, p.parent.name, p.stem)] = p
    problems: list[str] = []
    if not exports:
        return [f"The bundle holds no capture exports (artifacts/{ns}/capture/<op>/<shape>/<impl>.sqlite), so its "
                "kernel-time tables cannot be re-derived; bundle the namespace on the machine that captured it."]
    for key in sorted(set(exports) - set(jobs)):
        problems.append(f"capture/{'/'.join(key)}.sqlite is not one of the captures of the bundled config.")
    details, derivable = [], set()
    for job in jobs:
        export = exports.get(job)
        record = cap / job[0] / job[1] / f"{job[2]}.json"
        if export is None and record.is_file() and _not_measured(record):
            continue  # its check failed: never captured, and the tables have no row of it
        if export is None:
            problems.append(f"The bundle has no export capture/{'/'.join(job)}.sqlite, so the kernel-time rows of "
                            f"({', '.join(job)}) cannot be re-derived.")
            continue
        try:
            rows = tables.kernel_time_detail(export, range_name, iterations, *job)
        except EvidenceError as exc:
            problems.append(f"capture/{'/'.join(job)}.sqlite cannot be re-derived: {_show(exc, 200)}")
            continue
        out = work / "kernel_time" / job[0] / job[1] / f"{job[2]}.csv"
        write_csv(rows, tables.KERNEL_TIME_DETAIL_COLUMNS, out)  # as the rule kernel_time writes it
        details.append(out)
        derivable.add(job)
    if not details:
        return problems
    # As steps.all_tables does it.
    detail = read_csvs(details)
    write_csv(detail.to_dict("records"), tables.KERNEL_TIME_DETAIL_COLUMNS, work / "kernel_time_detail.csv")
    try:
        ceilings = pd.read_csv(tdir / "ceilings.csv") if (tdir / "ceilings.csv").is_file() else None
        metas = [p.with_suffix(".json") for p in exports.values() if p.with_suffix(".json").is_file()]
        kt = pd.DataFrame(tables.kernel_time_summary(detail, iterations, namespace, cache_mode, ceilings,
                                                     tables.gpus_of_captures(metas)))
    except Exception as exc:  # noqa: BLE001 - an unknown operation, an unreadable ceilings table: one finding
        return problems + [f"The kernel-time summary cannot be re-derived from the bundle's exports "
                           f"({type(exc).__name__}: {_show(exc, 120)})."]
    write_csv(kt.to_dict("records"), tables.KERNEL_TIME_COLUMNS, work / "kernel_time.csv")
    write_csv(tables.sweep_rows(kt, namespace, cache_mode), tables.SWEEP_COLUMNS, work / "sweep.csv")
    problems += _compare_table("kernel_time_detail.csv", tdir / "kernel_time_detail.csv", work / "kernel_time_detail.csv",
                               ["op", "shape", "impl", "kernel"], derivable, drift)
    problems += _compare_table("kernel_time.csv", tdir / "kernel_time.csv", work / "kernel_time.csv",
                               ["op", "shape", "impl"], derivable, drift)
    # A sweep row needs every implementation of its shape.
    whole = {(op, shape) for op in cfg["operations"] for shape in hconfig.shapes(cfg, op)
             if all((op, shape, impl) in derivable or _not_measured(cap / op / shape / f"{impl}.json")
                    for impl in hconfig.implementations(cfg, op))}
    if (tdir / "sweep.csv").is_file() or whole:
        problems += _compare_table("sweep.csv", tdir / "sweep.csv", work / "sweep.csv", ["op", "shape"], whole, drift)
    for op in cfg["operations"]:
        if (tdir / f"sweep_{op}.csv").is_file():
            write_csv(tables.sweep_rows(kt[kt["op"] == op], namespace, cache_mode), tables.SWEEP_COLUMNS,
                             work / f"sweep_{op}.csv")
            problems += _compare_table(f"sweep_{op}.csv", tdir / f"sweep_{op}.csv", work / f"sweep_{op}.csv",
                                       ["op", "shape"], {w for w in whole if w[0] == op}, drift)
    return problems


def _diff_lines(name: str, bundled: str, rendered: str, drift: list[str]) -> list[str]:
    """Differences between a bundled report and the one rendered from the tables, line by line."""
    if bundled == rendered:
        return []
    a, b = bundled.splitlines(), rendered.splitlines()
    if a == b:
        drift.append(f"the line endings of {name}")
        return [f"{name} differs from the report rendered from the tables only in its line endings."]
    out: list[str] = []
    wording = False
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            for k in range(i2 - i1):
                x, y = a[i1 + k], b[j1 + k]
                if NUMBER_RE.sub("#", x) == NUMBER_RE.sub("#", y):
                    pairs = [f"{p} in the bundle, {q} from the tables"
                             for p, q in zip(NUMBER_RE.findall(x), NUMBER_RE.findall(y)) if p != q]
                    out.append(f"{name} line {i1 + k + 1}: {'; '.join(pairs)}.")
                else:
                    wording = True
                    out.append(f"{name} line {i1 + k + 1} differs in wording from what this checkout renders from the "
                               f"tables: {_show(x, 90)!r} in the bundle, {_show(y, 90)!r} rendered.")
            continue
        wording = True
        where = f"line {i1 + 1}" if i2 - i1 == 1 else f"lines {i1 + 1}-{i2}" if i2 > i1 else f"after line {i1}"
        old = _show(a[i1], 90) if i2 > i1 else ""
        new = _show(b[j1], 90) if j2 > j1 else ""
        verb = "differ" if where.startswith("lines") else "differs"
        out.append(f"{name} {where} {verb} in layout from what this checkout renders from the tables "
                   f"({i2 - i1} line(s) in the bundle, {j2 - j1} rendered"
                   f"{f'; bundle: {old!r}' if old else ''}{f'; rendered: {new!r}' if new else ''}).")
    if wording:
        drift.append(f"the wording of {name}")
    if len(out) > MAX_MESSAGES_PER_FILE:
        out = out[:MAX_MESSAGES_PER_FILE] + [f"{name}: {len(out) - MAX_MESSAGES_PER_FILE} more differing lines."]
    return out


def _check_reports(dest: Path, cfg: Mapping[str, Any], ns: str, work: Path, commit: str, drift: list[str]) -> list[str]:
    """Re-render both reports (and figures) from the bundled tables and compare."""

    art, rep = dest / "artifacts" / ns, dest / "report" / ns
    tdir = art / "tables"
    problems = []
    missing = [f"tables/{t}.csv" for t in RENDER_TABLES if not (tdir / f"{t}.csv").is_file()]
    if missing:
        return [f"The bundle lacks {', '.join(missing)}, so its reports cannot be re-rendered from its tables."]

    inputs = table_inputs(art)
    out = work / "report"
    with_figures = (rep / "figures").is_dir()
    try:
        figures = [str(out / "figures" / f"{op}_sweep.svg") for op in cfg["operations"]] if with_figures else []
        render_reports(cfg, inputs, out / "field_note.md", out / "issue_comment.md", figures)
    except Exception as exc:  # noqa: BLE001 - whatever stops the render is the finding, in one sentence
        drift.append("the rendering of the reports")
        return [f"The reports cannot be re-rendered from the bundle's tables with this checkout's code "
                f"({type(exc).__name__}: {_show(exc, 120)}); the tables were probably written by another version "
                f"of the pipeline: run verify at the bundle's commit {_show(commit)}."]
    for name in ("field_note.md", "issue_comment.md"):
        if not (rep / name).is_file():
            problems.append(f"The bundle has no report/{ns}/{name}.")
            continue
        try:
            bundled = (rep / name).read_text()
        except UnicodeDecodeError:
            problems.append(f"report/{ns}/{name} is not UTF-8 text.")
            continue
        problems += _diff_lines(name, bundled, (out / name).read_text(), drift)
    bundled_svgs = {p.name for p in (rep / "figures").glob("*.svg")} if with_figures else set()
    drawn = {p.name for p in (out / "figures").glob("*.svg")} if with_figures else set()
    for fig in sorted(bundled_svgs - drawn):
        problems.append(f"report/{ns}/figures/{_show(fig)} is no figure the bundled config's operations draw.")
    for fig in sorted(drawn - bundled_svgs):
        problems.append(f"report/{ns}/figures/{fig} is missing; the sweep table draws it.")
    for fig in sorted(drawn & bundled_svgs):
        if (rep / "figures" / fig).read_bytes() != (out / "figures" / fig).read_bytes():
            drift.append(f"figures/{fig}")
            problems.append(f"figures/{fig} differs from the figure drawn from the bundle's sweep table "
                            "(the same table gives the same bytes with the same matplotlib; another matplotlib "
                            "version also changes them).")
    return problems


def verify(bundle: Path | str, workdir: Path | str | None = None) -> list[str]:
    """Verify a bundle (see the module's docstring): the problems found, one sentence each; an
    empty list means verified. Raises BundleError (one sentence) when the file is not a usable
    bundle. Everything is extracted into, and re-derived in, a temporary folder (under `workdir`
    when given) that is removed afterwards; nothing is written anywhere else.

    Run it at the bundle's commit (provenance git.commit, MANIFEST.json run_commit): the tables and
    reports are re-derived with this checkout's code and templates, and where those differ from
    the ones that produced the bundle, the differences are reported as wording, layout or column
    differences, never as differing numbers."""
    bundle = Path(bundle)
    if not bundle.is_file():
        raise BundleError(f"{bundle} does not exist or is not a file.")
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bundle-verify-", dir=workdir) as tmp:
        dest, work = Path(tmp) / "bundle", Path(tmp) / "derived"
        names = _extract(bundle, dest)
        manifest = _read_manifest(dest, bundle, names)
        ns = manifest["namespace"]
        problems = _check_members(dest, names, manifest)
        prov_path = dest / "artifacts" / ns / "provenance.json"
        try:
            provenance = json.loads(prov_path.read_text())
            cfg = provenance["config"]
            if not isinstance(cfg, dict):
                raise TypeError
        except FileNotFoundError:
            return problems + [f"The bundle has no artifacts/{ns}/provenance.json, so nothing can be re-derived."]
        except (ValueError, UnicodeDecodeError, KeyError, TypeError):
            return problems + [f"artifacts/{ns}/provenance.json is not JSON with a config, so nothing can be re-derived."]
        unsafe = _unsafe_config_names(cfg)
        if unsafe:
            return problems + [f"The bundled config names {unsafe}, which is not a plain name (letters, digits, "
                               "'.', '_', '-'), so nothing is re-derived from it."]
        if cfg.get("namespace") != ns:
            problems.append(f"The bundled config's namespace {_show(cfg.get('namespace'))!r} is not the bundle's {ns!r}.")
        commit = str((provenance.get("git") or {}).get("commit", manifest.get("run_commit", "unknown")))
        drift: list[str] = []
        problems += _check_tables(dest, cfg, ns, work, drift)
        problems += _check_reports(dest, cfg, ns, work, commit, drift)
        if drift:
            problems.append(_drift_sentence(drift, manifest, commit))
    return problems


def _unsafe_config_names(cfg: Mapping[str, Any]) -> str | None:
    """The first operation, shape or implementation name of the config that could not be a single
    path component (they become file names while re-deriving), shown; None when all are plain."""

    try:
        names = [n for op in cfg["operations"] for n in (op, *hconfig.shapes(cfg, op), *hconfig.implementations(cfg, op))]
    except (KeyError, TypeError, AttributeError):
        return "no usable operations"
    bad = next((n for n in names if not isinstance(n, str) or not NAMESPACE_RE.match(n)), None)
    return None if bad is None else repr(_show(bad))


def _drift_sentence(drift: list[str], manifest: Mapping[str, Any], commit: str) -> str:
    recorded = manifest.get("code_sha256")
    changed = []
    if isinstance(recorded, dict):
        now = code_hashes()
        changed = [f for f in CODE_FILES if f in recorded and recorded[f] != now[f]]
    code = (f"; this checkout's {', '.join(changed)} differ from those the bundle was made with"
            if changed else "")
    return (f"The differences in {', '.join(dict.fromkeys(drift))} are not differences of numbers: they come from a "
            f"pipeline, template or library version other than the one that produced the bundle{code}; "
            f"run verify at the bundle's commit {_show(commit)} to check those parts.")


# ----------------------------------------------------------------------------------------------
# Command lines

VERIFY_USAGE = "usage: python -m harness verify BUNDLE.tar.gz"
BUNDLE_USAGE = "usage: python -m harness bundle NAMESPACE [--out FILE.tar.gz] [--include-reports]"


def main(argv: list[str] | None = None) -> int:
    """`python -m harness verify BUNDLE`: exit 0 verified, 1 problems found (one line each on
    stdout), 2 not a usable bundle (one sentence on stderr)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(VERIFY_USAGE)
        return 0
    if len(args) != 1:
        print(f"{VERIFY_USAGE}\nverify takes exactly one bundle.", file=sys.stderr)
        return 2
    try:
        problems = verify(args[0])
    except EvidenceError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - never a traceback
        print(f"{args[0]} could not be verified ({type(exc).__name__}: {_show(exc, 160)}).", file=sys.stderr)
        return 2
    if problems:
        for p in problems:
            print(p)
        print(f"{args[0]}: {len(problems)} problem(s); not verified.", file=sys.stderr)
        return 1
    print(f"{args[0]}: verified.")
    return 0


def bundle_main(argv: list[str] | None = None) -> int:
    """`python -m harness bundle NAMESPACE [--out FILE] [--include-reports]` (default out:
    NAMESPACE.evidence.tar.gz in the current folder)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(BUNDLE_USAGE)
        return 0
    include = "--include-reports" in args
    args = [a for a in args if a != "--include-reports"]
    out = None
    if "--out" in args:
        i = args.index("--out")
        if i + 1 >= len(args):
            print(f"{BUNDLE_USAGE}\n--out needs a file name.", file=sys.stderr)
            return 2
        out = args[i + 1]
        del args[i : i + 2]
    if len(args) != 1 or args[0].startswith("-"):
        print(f"{BUNDLE_USAGE}\nbundle takes exactly one namespace.", file=sys.stderr)
        return 2
    try:
        path = make_bundle(args[0], Path(out or f"{args[0]}.evidence.tar.gz"), include_reports=include)
    except EvidenceError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(f"bundle: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
