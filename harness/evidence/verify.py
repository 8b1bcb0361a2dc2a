"""Verify a bundle (harness.evidence.bundle): `python -m harness verify BUNDLE`.

`verify(bundle)` extracts the bundle safely into a temporary folder (regular files and folders
only: no absolute path, no '..', no link, device or sparse member, nothing landing outside the
folder; at most MAX_TOTAL_BYTES in all and no more than half the folder's free space, both checked
from the headers before anything is written) and then checks:

1. every member against the manifest: size and SHA-256, none missing, none extra, all inside
   artifacts/<ns>/ or report/<ns>/, each a file the pipeline writes for the bundled config
   (`unaccounted`), no two differing only in case (refused before extracting);
2. the tables against the exports (where the bundle has them): each group's launches are read
   again from its export (harness.tables.derive.launch_rows, through the nsys reader with its time
   limit and storage caps), and the namespace's tables are derived from them by the one function
   the pipeline's tables step calls (harness.tables.derive.namespace_tables), with the bundled
   provenance's settings and ceilings, then compared cell by cell with the bundled tables;
3. the reports against the tables: both reports (and the figures) re-rendered from the bundled
   tables and provenance; each differing line names the report, the bundle's line number and the
   numbers that differ; each SVG must be the same bytes.

Run verify at the commit the bundle's run used (provenance git.commit, also MANIFEST.json's
run_commit): steps 2 and 3 use this checkout's code and templates, and where those differ from the
ones that produced the bundle the differences are named as wording, layout or column differences,
never as differing numbers.

`verify` returns the problems, one sentence each (an empty list: verified). A file that is not a
usable bundle (not gzip, not tar, truncated, an unsafe member, too large, a hostile export, no or a
malformed manifest) raises BundleError instead, one sentence, within seconds. The temporary folder
is removed on every exit (`main` turns SIGTERM into an ordinary exit), and a verify sweeps the
folders that a killed one left. `main` is the command line: exit 0 verified, 1 problems found, 2
unusable input.
"""

from __future__ import annotations

import difflib
import gzip
import json
import os
import re
import shutil
import signal
import sys
import tarfile
import tempfile
import time
import unicodedata
import zlib
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pandas as pd

from harness import config as hconfig
from harness.errors import EvidenceError
from harness.evidence.bundle import (
    CODE_FILES,
    FORMAT,
    FORMATS,
    MANIFEST,
    BundleError,
    check_namespace,
    code_hashes,
    safe_name,
    sha256,
    show,
)
from harness.io import row_dicts, write_csv
from harness.measure.capture import GROUP_REPORT, SESSION_REPORT
from harness.report.render import output_paths, render_reports, table_inputs
from harness.tables import derive, history, nsys, table_files, targets

MAX_TOTAL_BYTES = 2 * 1024**3
"""Largest total of the members' sizes verify accepts (checked from the headers, before extracting)."""
MAX_MEMBERS = 100_000
MAX_MESSAGES_PER_FILE = 40
"""Differences listed per table or report; the rest are counted in one sentence."""
EXPORT_TIME_LIMIT_S = 30.0
"""Longest a bundled export may take to read; a slower one is refused as hostile."""
STALE_AFTER_S = 3600.0
"""A verify folder older than this, left by a verify that was killed, is removed by the next."""
PREFIX = "bundle-verify-"
RENDER_TABLES = ("kernel_time", "kernel_time_detail", "span", "check", "sweep", "census")
NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_CHUNK = 1 << 20

PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}(?:@[A-Za-z0-9._-]{1,127})?")
"""An operation, shape or implementation name of a bundled config: a single path component (ours at
a baseline revision, 'cuda@main', carries its label after '@')."""

_show, _sha256, _safe_name, _check_namespace = show, sha256, safe_name, check_namespace


def _open_error(bundle: Path, exc: BaseException) -> BundleError:
    detail = _show(str(exc).rstrip(".") or type(exc).__name__, 100)
    return BundleError(f"{_show(bundle)} is not a complete gzip-compressed tar archive ({detail}); it is truncated or corrupt.")


def _check_stream(bundle: Path) -> None:
    """The whole gzip stream decompresses, its checksums hold and it is not too large."""
    try:
        with open(bundle, "rb") as fh:
            magic = fh.read(2)
    except OSError as exc:
        raise BundleError(f"{_show(bundle)} cannot be read ({exc.strerror}).") from None
    if magic != b"\x1f\x8b":
        raise BundleError(f"{_show(bundle)} is not a gzip file, so not a bundle (a bundle is a .tar.gz).")
    limit = MAX_TOTAL_BYTES + (MAX_MEMBERS + 64) * 2048  # the members plus their tar headers
    total = 0
    try:
        with gzip.open(bundle, "rb") as gz:
            while chunk := gz.read(_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise BundleError(f"{_show(bundle)} decompresses to more than {MAX_TOTAL_BYTES} bytes; "
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
    if m.issparse() or getattr(m, "sparse", None):
        return f"member {name} is a sparse file, which a bundle never holds"
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
            folded: dict[str, str] = {}
            total = 0
            for m in tar:
                members.append(m)
                if len(members) > MAX_MEMBERS:
                    raise BundleError(f"{_show(bundle)} has more than {MAX_MEMBERS} members; verify refuses it.")
                why = _refusal(m, dest)
                if why:
                    raise BundleError(f"{_show(bundle)} is refused: {why}.")
                key = m.name.rstrip("/")
                if key in seen:
                    raise BundleError(f"{_show(bundle)} is refused: member {_show(m.name)} occurs twice.")
                seen.add(key)
                other = folded.setdefault(unicodedata.normalize("NFC", key).casefold(), key)
                if other != key:
                    raise BundleError(f"{_show(bundle)} is refused: member {_show(m.name)} differs only in case (or in "
                                      f"how its letters are composed) from {_show(other)}, so on a file system that "
                                      "ignores case one would replace the other.")
                total += max(m.size, 0)
                if total > MAX_TOTAL_BYTES:
                    raise BundleError(f"{_show(bundle)} holds more than {MAX_TOTAL_BYTES} bytes of members; verify refuses bundles that large.")
            free = shutil.disk_usage(dest).free
            if 2 * total > free:
                raise BundleError(f"{_show(bundle)} would take {total} bytes unpacked, more than half the {free} bytes free "
                                  f"where verify unpacks it; free some space or pass another folder.")
            names = []
            root = os.path.realpath(dest)
            for m in members:
                target = Path(root, *m.name.rstrip("/").split("/"))
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                if os.path.commonpath([os.path.realpath(target.parent), root]) != root:
                    raise BundleError(f"{_show(bundle)} is refused: member {_show(m.name)} would land outside the extraction folder.")
                src = tar.extractfile(m)
                if src is None:
                    raise BundleError(f"{_show(bundle)} is refused: member {_show(m.name)} has no content.")
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
                written = 0
                with os.fdopen(fd, "wb") as fh, src:
                    while chunk := src.read(min(_CHUNK, m.size - written) or 1):
                        written += len(chunk)
                        if written > m.size:
                            raise BundleError(f"{_show(bundle)} is refused: member {_show(m.name)} is longer than its header says.")
                        fh.write(chunk)
                names.append(m.name)
    except BundleError:
        raise
    except tarfile.TarError as exc:
        detail = _show(str(exc).rstrip(".") or type(exc).__name__, 100)
        raise BundleError(f"{_show(bundle)} is gzip-compressed but not a readable tar archive ({detail}).") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise _open_error(bundle, exc) from None
    return names


def _read_manifest(dest: Path, bundle: Path, names: list[str]) -> dict[str, Any]:
    if MANIFEST not in names:
        raise BundleError(f"{_show(bundle)} has no {MANIFEST}, so it is not a bundle made by `make_bundle`.")
    try:
        manifest = json.loads((dest / MANIFEST).read_text())
    except (ValueError, UnicodeDecodeError):
        raise BundleError(f"{_show(bundle)}'s {MANIFEST} is not valid JSON.") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in FORMATS:
        raise BundleError(f"{_show(bundle)}'s {MANIFEST} is not of format {FORMAT}.")
    members = manifest.get("members")
    if not isinstance(members, list) or not all(
            isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("size"), int)
            and isinstance(e.get("sha256"), str) for e in members):
        raise BundleError(f"{_show(bundle)}'s {MANIFEST} has no valid member list (path, size, sha256 of each).")
    _check_namespace(manifest.get("namespace"))
    return manifest



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


def _compare_table(name: str, bundled: Path, derived: Path, keys: list[str], scope: AbstractSet[tuple[str, ...]] | None,
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
        for rec in row_dicts(frame):
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


def _check_tables(dest: Path, cfg: Mapping[str, Any], ns: str, work: Path, drift: list[str]) -> list[str]:
    """Re-derive every table of the namespace from the bundled exports and group files, and compare."""
    art = dest / "artifacts" / ns
    tdir = art / "tables"
    groups, derivable, problems = [], set(), []
    measure = art / "measure"
    folders = sorted(p.parent for p in measure.glob("*/*/record.json")) if measure.is_dir() else []
    if not folders:
        if (art / "capture").is_dir():
            drift.append("the layout of the captures")
            return ["The bundle holds one capture per implementation (artifacts/<ns>/capture/), the layout before "
                    "measurement groups; this checkout derives its tables from groups: verify it at its commit."]
        return []
    for folder in folders:
        op, shape = folder.parent.name, folder.name
        export = folder / "capture.sqlite"
        try:
            record = json.loads((folder / "record.json").read_text())
        except (OSError, ValueError):
            problems.append(f"measure/{op}/{shape}/record.json is not a group record (JSON).")
            continue
        if not record.get("passed"):
            launches = pd.DataFrame(columns=derive.LAUNCH_COLUMNS)
        elif not export.is_file():
            problems.append(f"The bundle has no export measure/{op}/{shape}/capture.sqlite, so the tables of "
                            f"({op}, {shape}) cannot be re-derived.")
            continue
        else:
            try:
                launches = pd.DataFrame(nsys_limited(lambda: derive.launch_rows(export, op, shape)),
                                        columns=derive.LAUNCH_COLUMNS)
            except nsys.NsysExportError as exc:
                raise BundleError(f"the bundle's export measure/{op}/{shape}/capture.sqlite is refused: {exc}") from None
        bundled = folder / "launches.csv"
        if bundled.is_file():
            again = work / "launches" / op / shape / "launches.csv"
            write_csv(row_dicts(launches), derive.LAUNCH_COLUMNS, again)
            problems += _compare_launches(f"measure/{op}/{shape}/launches.csv", bundled, again)
        groups.append(derive.read_group(folder, launches=launches))
        derivable.add((op, shape))
    if not groups:
        return problems
    try:
        ceilings = pd.read_csv(tdir / "ceilings.csv") if (tdir / "ceilings.csv").is_file() else None
        tables = derive.frames(derive.namespace_tables(
            groups, namespace=str(cfg["namespace"]), cache_mode=str(cfg["cache_mode"]),
            descriptions=hconfig.variant_descriptions(cfg), ceilings=ceilings,
            cross_check={k: cfg["cross_check"][k] for k in ("rtol", "atol_us_per_kernel")},
            margin=float((cfg.get("verdict") or {}).get("margin", 0.01)),
            between_runs=(cfg.get("verdict") or {}).get("between_runs")))
    except Exception as exc:  # noqa: BLE001 - an unknown operation, a malformed record: one finding
        return problems + [f"The tables cannot be re-derived from the bundle's groups "
                           f"({type(exc).__name__}: {_show(exc, 120)})."]
    written: dict[str, Path] = {}
    for name, frame in tables.items():
        bundled = table_files.table_path(tdir, name)
        if frame.empty and not bundled.is_file():
            continue  # a table the exports give no row of, which an older namespace never wrote
        again = written[name] = work / table_files.table_file(name)
        write_csv(row_dicts(frame), list(frame.columns), again)
        problems += _compare_table(bundled.name, bundled, again, TABLE_KEYS[name], derivable, drift)
    return problems + _check_targets(tdir, cfg, ns, written, work, drift)


def _check_targets(tdir: Path, cfg: Mapping[str, Any], ns: str, written: Mapping[str, Path], work: Path,
                   drift: list[str]) -> list[str]:
    """The bundled targets table against the config's targets judged again from the re-derived
    sweep, kernel-time and span tables (`written`: name -> the CSV _check_tables wrote of each) and
    the bundled controls table (nothing where the bundled config has no targets and the bundle no
    targets table). The re-derived tables are judged as the pipeline judges its own, as written
    and read back: a ratio the sweep table holds the other way round is inverted from its written
    digits, so the same digits give the same row."""
    bundled = table_files.table_path(tdir, "targets")
    if not cfg.get("targets") and not bundled.is_file():
        return []
    controls_csv = table_files.table_path(tdir, "controls")

    def read(name: str) -> pd.DataFrame | None:
        return history.read_table(written[name]) if name in written else None

    try:
        frame = targets.evaluate(ns, list(cfg.get("targets") or []), hconfig.targets_plan(cfg), read("sweep"),
                                 read("kernel_time"), read("span"),
                                 history.read_table(controls_csv) if controls_csv.is_file() else None)
    except Exception as exc:  # noqa: BLE001 - a malformed target or table: one finding
        return [f"The targets cannot be judged again from the bundle's tables ({type(exc).__name__}: {_show(exc, 120)})."]
    again = work / table_files.table_file("targets")
    write_csv(row_dicts(frame), list(frame.columns), again)
    return _compare_table(bundled.name, bundled, again, TABLE_KEYS["targets"], None, drift)


OTHER_TABLES = ("census", "ceilings", "counters", "controls", "drift", "job_times", "group_seconds", "targets")
"""Tables of a namespace that the pipeline writes beside those `namespace_tables` derives."""
GROUP_MEMBERS = ("record.json", "launches.csv", "spans.csv", "graph.csv", "capture.sqlite", GROUP_REPORT)
SHAPE_NAME = r"[0-9]+(?:x[0-9]+)+(?:-[a-z]+)?"


def unaccounted(names: list[str], ns: str, cfg: Mapping[str, Any]) -> list[str]:
    """One sentence for each member that no step of the pipeline writes for the bundled config (a
    table nothing derives, a group or sweep of an operation the config does not measure): verify
    could only vouch for its hash, not for where it came from."""
    ops = [op for op in (cfg.get("operations") or {}) if isinstance(op, str) and PLAIN_NAME.fullmatch(op)]
    op_re = "|".join(re.escape(op) for op in ops) or "(?!)"
    tables = "|".join(re.escape(t) for t in (*derive.TABLES, *OTHER_TABLES))
    a, r = re.escape(f"artifacts/{ns}/"), re.escape(f"report/{ns}/")
    patterns = [rf"{a}(?:provenance|summary)\.json", rf"{a}commands\.jsonl", rf"{a}tables/(?:{tables})\.csv(?:\.gz)?",
                rf"{a}tables/sweep_(?:{op_re})(?:_kernel_time|_variants)?\.csv", rf"{a}tables/sweep_(?:{op_re})_provenance\.json",
                rf"{a}tables/shape/(?:{op_re})/{SHAPE_NAME}\.csv",
                rf"{a}measure/(?:{op_re})/{SHAPE_NAME}/(?:{'|'.join(re.escape(g) for g in GROUP_MEMBERS)})",
                rf"{a}measure/{re.escape(SESSION_REPORT)}",
                rf"{r}(?:field_note\.md|issue_comment\.md|index\.html)", rf"{r}figures/[A-Za-z0-9_.-]+\.svg"]
    known = re.compile("|".join(f"(?:{p})" for p in patterns))
    return [f"{_show(name)} is no file the pipeline writes for the bundled config (nothing derives it), so verify "
            "cannot account for it." for name in sorted(names) if name != MANIFEST and not known.fullmatch(name)]


TABLE_KEYS = {"kernel_time_detail": ["op", "shape", "impl", "kernel"], "kernel_time": ["op", "shape", "impl"],
              "rounds": ["op", "shape", "impl", "round"], "span": ["op", "shape", "impl"],
              "check": ["op", "shape", "impl"], "sweep": ["op", "shape"], "variants": ["op", "shape", "variant"],
              "change": ["op", "shape", "impl", "revision"], "targets": ["target", "op", "shape"],
              "cross_check": ["op", "shape", "impl"], "gpu_state": ["op", "shape", "impl"]}
"""How the rows of each derived table are matched."""


def nsys_limited(read: Any) -> Any:
    """`read()` with the nsys reader's time limit lowered to EXPORT_TIME_LIMIT_S."""
    saved = nsys.TIME_LIMIT_S
    nsys.TIME_LIMIT_S = min(saved, EXPORT_TIME_LIMIT_S)
    try:
        return read()
    finally:
        nsys.TIME_LIMIT_S = saved


def _compare_launches(name: str, bundled: Path, again: Path) -> list[str]:
    """The bundled launches against those read again from the export, as multisets of rows."""
    try:
        b = pd.read_csv(bundled, dtype=str, keep_default_na=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable table is one finding
        return [f"{name} cannot be read as CSV ({_show(exc, 100)})."]
    d = pd.read_csv(again, dtype=str, keep_default_na=False)
    if list(b.columns) != list(d.columns):
        return [f"{name} has the columns {', '.join(map(_show, b.columns))}, not those the reader gives."]
    rows_b = sorted(map(tuple, b.to_numpy().tolist()))
    rows_d = sorted(map(tuple, d.to_numpy().tolist()))
    if rows_b != rows_d:
        return [f"{name} differs from the launches read again from the export ({len(rows_b)} rows in the bundle, "
                f"{len(rows_d)} read)."]
    return []


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
    out = work / "render"
    ops = list(cfg["operations"])
    paths = output_paths(ns, ops, out / "artifacts", out / "report")
    with_figures = (rep / "figures").is_dir()
    if not with_figures:  # a bundle of reports without figures (older): render the texts only
        paths.update(figures=[], overview=None, html=None)
    try:
        render_reports(cfg, inputs, paths["field_note"], paths["issue_comment"], [str(f) for f in paths["figures"]],
                       html=paths["html"], summary=paths["summary"], overview=paths["overview"])
    except Exception as exc:  # noqa: BLE001 - whatever stops the render is the finding, in one sentence
        drift.append("the rendering of the reports")
        return [f"The reports cannot be re-rendered from the bundle's tables with this checkout's code "
                f"({type(exc).__name__}: {_show(exc, 120)}); the tables were probably written by another version "
                f"of the pipeline: run verify at the bundle's commit {_show(commit)}."]
    texts = [("field_note.md", rep / "field_note.md", paths["field_note"], True),
             ("issue_comment.md", rep / "issue_comment.md", paths["issue_comment"], True),
             ("index.html", rep / "index.html", paths["html"], False),
             ("summary.json", art / "summary.json", paths["summary"], False)]
    for name, bundled_path, rendered_path, required in texts:
        if rendered_path is None:
            continue
        where = f"report/{ns}/{name}" if bundled_path.parent == rep else f"artifacts/{ns}/{name}"
        if not bundled_path.is_file():
            if required:
                problems.append(f"The bundle has no {where}.")
            continue
        try:
            bundled = bundled_path.read_text()
        except UnicodeDecodeError:
            problems.append(f"{where} is not UTF-8 text.")
            continue
        problems += _diff_lines(name, bundled, Path(rendered_path).read_text(), drift)
    figs = out / "report" / ns / "figures"
    bundled_svgs = {p.name for p in (rep / "figures").glob("*.svg")} if with_figures else set()
    drawn = {p.name for p in figs.glob("*.svg")} if with_figures else set()
    for fig in sorted(bundled_svgs - drawn):
        problems.append(f"report/{ns}/figures/{_show(fig)} is no figure the bundled config's operations draw.")
    for fig in sorted(drawn - bundled_svgs):
        problems.append(f"report/{ns}/figures/{fig} is missing; the tables draw it.")
    for fig in sorted(drawn & bundled_svgs):
        if (rep / "figures" / fig).read_bytes() != (figs / fig).read_bytes():
            drift.append(f"figures/{fig}")
            problems.append(f"figures/{fig} differs from the figure drawn from the bundle's tables "
                            "(the same table gives the same bytes with the same matplotlib; another matplotlib "
                            "version also changes them).")
    return problems


def sweep_stale(parent: Path) -> list[Path]:
    """Remove the verify folders under `parent` that a killed verify left (older than
    STALE_AFTER_S); returns what was removed."""
    removed = []
    now = time.time()
    for path in parent.glob(f"{PREFIX}*"):
        try:
            if path.is_dir() and not path.is_symlink() and now - path.stat().st_mtime > STALE_AFTER_S:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        except OSError:
            continue
    return removed


NO_EXPORTS = ("the bundle holds no capture exports (raw captures never enter git), so its tables were checked "
              "against MANIFEST.json and its reports re-rendered from them, but the tables were not re-derived.")


def verify(bundle: Path | str, workdir: Path | str | None = None, notes: list[str] | None = None) -> list[str]:
    """Verify a bundle (see the module's docstring): the problems found, one sentence each; an
    empty list means verified. Raises BundleError (one sentence) when the file is not a usable
    bundle. Everything is extracted into, and re-derived in, a temporary folder (under `workdir`
    when given, else the system's) that is removed afterwards; nothing is written anywhere else.
    What was not checked (a bundle without exports) is appended to `notes`, not to the problems."""
    bundle = Path(bundle)
    if not bundle.is_file():
        raise BundleError(f"{_show(bundle)} does not exist or is not a file.")
    parent = Path(workdir) if workdir is not None else Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(parent)
    with tempfile.TemporaryDirectory(prefix=PREFIX, dir=parent) as tmp:
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
        problems += unaccounted(names, ns, cfg)
        if cfg.get("namespace") != ns:
            problems.append(f"The bundled config's namespace {_show(cfg.get('namespace'))!r} is not the bundle's {ns!r}.")
        commit = str((provenance.get("git") or {}).get("commit", manifest.get("run_commit", "unknown")))
        drift: list[str] = []
        if manifest.get("exports", True):
            problems += _check_tables(dest, cfg, ns, work, drift)
        elif notes is not None:
            notes.append(NO_EXPORTS)
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
    bad = next((n for n in names if not isinstance(n, str) or not PLAIN_NAME.fullmatch(n)), None)
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
# Command line


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM ends verify like an error, so its temporary folder is removed on the way out."""
    raise SystemExit(128 + signum)

VERIFY_USAGE = "usage: python -m harness verify BUNDLE.tar.gz"
INTERRUPTED = "verify: interrupted (Ctrl-C) before it finished, so nothing is verified; its temporary folder is removed."


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
    signal.signal(signal.SIGTERM, _terminated)
    notes: list[str] = []
    try:
        problems = verify(args[0], notes=notes)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    except EvidenceError as exc:
        print(_show(str(exc), 100_000), file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - never a traceback
        print(f"{_show(args[0])} could not be verified ({type(exc).__name__}: {_show(exc, 160)}).", file=sys.stderr)
        return 2
    if problems:
        for p in problems:
            print(p)
        print(f"{_show(args[0])}: {len(problems)} problem(s); not verified.", file=sys.stderr)
        return 1
    for note in notes:
        print(f"note: {note}")
    print(f"{_show(args[0])}: verified.")
    return 0



if __name__ == "__main__":
    sys.exit(main())
