"""One reviewable file per namespace: its evidence packed into a .tar.gz that
`python -m harness verify` (harness.evidence.verify) checks.

`make_bundle(ns, out)` packs, from the repository root:

    MANIFEST.json                                          (always the first member)
    artifacts/<ns>/provenance.json, artifacts/<ns>/summary.json (when there is one)
    artifacts/<ns>/tables/**                               every table, sub-folders included
    artifacts/<ns>/measure/<op>/<shape>/record.json, launches.csv, spans.csv, graph.csv
    artifacts/<ns>/measure/<op>/<shape>/capture.sqlite     the group's export, re-scrubbed (below)
    artifacts/<ns>/measure/session.nsys-rep                the session's raw report, only with include_reports=True
                                                           (before sessions: measure/<op>/<shape>/capture.nsys-rep)
    report/<ns>/**                                         the reports, the figures, and the page where it is there (never committed)

Each export is copied to a temporary folder and scrubbed there (harness.measure.capture), never on
the namespace's file; the scrubbed copy is what is hashed and packed, so no environment row of the
captured process reaches the bundle. Then every member is searched for the values of the
environment (`secret_values`: the environment of the command making the bundle, and any the
provenance records): a text member holding one is packed as a copy with each value replaced by
'[NAME withheld]', an export is scrubbed again by value, and any other file that holds one (a raw
`.nsys-rep`, which cannot be scrubbed) is left out; each with a one-sentence note, and the manifest
says which (`withheld`, `left_out`). The temporary copies live in a private folder (mode 0700,
files 0600) named `bundle-scrub-<pid>-*` under the system's temporary folder, removed on every
exit; one a killed bundle left (its process gone) is removed by the next bundle. A raw `.nsys-rep`
stays out unless asked for. A link anywhere under artifacts/<ns>/ or report/<ns>/ (symbolic, or a
file with a second name: a hard link) stops the bundle: nothing outside the namespace enters it.
A namespace whose exports are not here (a retained namespace in a checkout: raw captures never
enter git) is bundled without them, and the manifest says so (`exports: false`): verify then
checks its members and reports, not its kernel times.

MANIFEST.json (JSON, keys sorted, one space indent):

    format            "kernel-evidence-bundle/2"
    namespace         <ns>
    run_commit        the git commit of the run, from the bundled provenance (git.commit)
    bundled_at        {"commit", "dirty"} of the checkout that made the bundle
    code_sha256       SHA-256 of the code that turns exports into tables and tables into reports
                      (CODE_FILES), in the checkout that made the bundle
    include_reports   whether .nsys-rep files were asked for
    exports           whether the groups' exports are in it
    scrubbed_rows     {export path: environment rows the re-scrub removed}
    withheld          {member path: names of the variables whose values were replaced in it}
    left_out          {file path: names of the variables whose values kept it out of the bundle}
    members           [{"path", "size", "sha256"}] for every other member, sorted by path

The archive is deterministic: members sorted (the manifest first), regular files only, mode 0644,
uid/gid 0, empty owner names, mtime MTIME, PAX format, gzip with no file name and mtime 0; the same
inputs (and the same Python/zlib) give the same bytes. It is written under a temporary name and
renamed when complete.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import signal
import sqlite3
import stat
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.errors import ConfigError, EvidenceError, shown
from harness.io import check_out, partial_path
from harness.measure.capture import GROUP_REPORT as RAW_GROUP_REPORT
from harness.measure.capture import SESSION_REPORT as RAW_SESSION_REPORT
from harness.measure.capture import leaked_values, outside_values, scrub_export, scrub_values
from harness.namespaces import check_name
from harness.report.provenance import git_state

FORMAT = "kernel-evidence-bundle/2"
FORMATS = (FORMAT, "kernel-evidence-bundle/1")
"""The formats verify reads: this one, and the one of bundles made before measurement groups."""
MANIFEST = "MANIFEST.json"
MTIME = 946684800  # 2000-01-01T00:00:00Z: the mtime of every member
_CHUNK = 1 << 20

CODE_GLOBS = ("harness/tables/*.py", "harness/report/*.py", "report/templates/*.j2", "harness/ops/__init__.py")
CODE_FILES = tuple(sorted({p.relative_to(ROOT).as_posix() for g in CODE_GLOBS for p in ROOT.glob(g)}))
"""The code that turns exports into tables and tables into reports (every module of the tables and
report stages, the templates, the operations' registry), hashed into the manifest."""

GROUP_FILES = ("record.json", "launches.csv", "spans.csv", "graph.csv")
"""The files of a measurement group a bundle carries beside its export."""


class BundleError(EvidenceError):
    """A bundle cannot be made, or a file is not a usable bundle (one sentence)."""


# ----------------------------------------------------------------------------------------------
# Small helpers


show = shown
"""Untrusted text (member names, report lines) made safe for a one-line message."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def check_namespace(ns: Any) -> str:
    """The namespace name of a bundle (harness.namespaces.check_name), else BundleError."""
    try:
        return check_name(ns)
    except ConfigError as exc:
        raise BundleError(str(exc)) from None


def code_hashes(root: Path = ROOT) -> dict[str, str]:
    """SHA-256 of each file of CODE_FILES in a checkout ('absent' where it has none)."""
    return {f: (sha256(root / f) if (root / f).is_file() else "absent") for f in CODE_FILES}


# ----------------------------------------------------------------------------------------------
# Making a bundle


def refuse_links(folders: Iterable[Path], root: Path) -> None:
    """BundleError (one sentence) for the first link anywhere under `folders` (a folder that is
    itself a link included; a file with more than one name, a hard link, too): a link to
    /etc/passwd or to a file outside the repository would otherwise be followed into the bundle."""
    for folder in folders:
        if folder.is_symlink():
            raise BundleError(f"{show(folder.relative_to(root))} is a symbolic link; a bundle takes regular files only.")
        if not folder.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
            for name in sorted(dirnames + filenames):
                p = Path(dirpath) / name
                if p.is_symlink():
                    raise BundleError(f"{show(p.relative_to(root))} is a symbolic link; a bundle takes regular files only.")
            for name in sorted(filenames):
                p = Path(dirpath) / name
                if p.lstat().st_nlink > 1:
                    raise BundleError(f"{show(p.relative_to(root))} is a hard link (the file has {p.lstat().st_nlink} names, "
                                      "one of them perhaps outside the namespace); a bundle takes files of one name only.")


SCRUB_PREFIX = "bundle-scrub-"
STALE_AFTER_S = 3600.0
"""A scrub folder without a live owner (or, named without one, older than this) is removed."""
TEXT_MEMBERS = (".csv", ".json", ".jsonl", ".md", ".html", ".svg", ".txt", ".log")
"""Members scrubbed by value as text; any other kind holding a value is left out."""
_NUMBER = re.compile(r"[0-9.:,+-]+")
DESCRIPTIVE = frozenset({"HOSTNAME", "HOST", "USER", "LOGNAME", "USERNAME", "SHELL", "TERM", "TERM_PROGRAM",
                         "TERM_PROGRAM_VERSION", "COLORTERM", "LS_COLORS", "DISPLAY", "TZ", "EDITOR", "VISUAL", "PAGER",
                         "PWD", "OLDPWD", "SHLVL", "_", "MAIL", "LANGUAGE"})
"""Variables that describe the machine or the terminal, not a credential: the provenance records the
host by design, and a report may name it; their values are not searched for."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def sweep_scrub(parent: Path) -> list[Path]:
    """Remove the scrub folders under `parent` that a killed bundle left: those whose process (the
    pid in the name) is gone, and those without a pid older than STALE_AFTER_S."""
    removed = []
    for path in parent.glob(f"{SCRUB_PREFIX}*"):
        try:
            if not path.is_dir() or path.is_symlink():
                continue
            m = re.match(rf"{re.escape(SCRUB_PREFIX)}(\d+)-", path.name)
            stale = not _alive(int(m.group(1))) if m else time.time() - path.stat().st_mtime > STALE_AFTER_S
            if stale and path.stat().st_uid == os.getuid():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        except OSError:
            continue
    return removed


def _private_copy(src: Path, dst: Path) -> Path:
    """A copy of `src` at `dst` that is never readable by others, not even for a moment (0600)."""
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as out, open(src, "rb") as fh:
        shutil.copyfileobj(fh, out, _CHUNK)
    return dst


def _recorded_environment(value: Any) -> dict[str, str]:
    """Every environment the provenance records (a mapping under a key named environment or env)."""
    found: dict[str, str] = {}
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                if str(key).lower() in ("environment", "env", "environ") and isinstance(sub, dict):
                    found.update({str(k): v for k, v in sub.items() if isinstance(v, str)})
                else:
                    stack.append(sub)
        elif isinstance(item, list):
            stack.extend(item)
    return found


def secret_values(provenance: Any = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The values searched for in every member, name -> value: those of the environment of this
    command and of any environment the provenance records (harness.measure.capture.outside_values:
    outside the capture's allowlist, long enough, not a path that exists), less plain numbers,
    which a table holds of its own accord, and the DESCRIPTIVE variables (the host's name).
    outside_values leaves out the provenance's own inputs (the commit of a copy without .git,
    which the reports name by design)."""
    values = outside_values(_recorded_environment(provenance))
    values.update(outside_values(environ))
    return {k: v for k, v in values.items()
            if not _NUMBER.fullmatch(v) and k not in DESCRIPTIVE and not k.startswith("LC_")}


def scrub_members(files: dict[str, Path], values: Mapping[str, str], scratch: Path,
                  notes: list[str] | None = None) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Search every member for `values`: a text member holding one becomes a private copy in
    `scratch` with each value replaced by '[NAME withheld]'; an SQLite file is scrubbed by value (a
    copy, where it is not one already); any other file holding one is left out. `files` is updated
    in place. Returns ({member: names withheld}, {member: names that kept it out}); one note each."""
    withheld: dict[str, list[str]] = {}
    left_out: dict[str, list[str]] = {}
    for i, arc in enumerate(sorted(files)):
        path = files[arc]
        names = sorted(leaked_values(path, values))
        if not names:
            continue
        if path.suffix in TEXT_MEMBERS:
            text = path.read_bytes().decode("utf-8", errors="surrogateescape")
            for name in sorted(names, key=lambda n: -len(values[n])):
                text = text.replace(values[name], f"[{name} withheld]")
            copy = scratch / f"text-{i}{path.suffix}"
            fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(text.encode("utf-8", errors="surrogateescape"))
            files[arc] = copy
            withheld[arc] = names
            if notes is not None:
                notes.append(f"{show(arc)}: the value of {', '.join(names)} from the environment is withheld in the bundle.")
            continue
        if path.suffix == ".sqlite":
            copy = path if scratch in path.parents else _private_copy(path, scratch / f"db-{i}.sqlite")
            try:
                scrub_values(copy, [values[n] for n in names])
            except sqlite3.Error:
                pass
            if not leaked_values(copy, values):
                files[arc] = copy
                withheld[arc] = names
                if notes is not None:
                    notes.append(f"{show(arc)}: the cells holding the value of {', '.join(names)} from the environment "
                                 "are blanked in the bundle.")
                continue
        del files[arc]
        left_out[arc] = names
        if notes is not None:
            notes.append(f"{show(arc)} is left out of the bundle: it holds the value of {', '.join(names)} from the "
                         "environment and cannot be scrubbed.")
    return withheld, left_out


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
    if out.is_dir():
        raise BundleError(f"{out} is a folder; --out names the bundle file to write.")
    for arc in files:
        if arc == MANIFEST or not safe_name(arc):
            raise BundleError(f"{show(arc)} cannot be a member of a bundle.")
    members: list[dict[str, Any]] = []
    for arc in sorted(files):
        members.append({"path": arc, "size": Path(files[arc]).stat().st_size, "sha256": sha256(Path(files[arc]))})
    manifest = {**meta, "format": FORMAT, "members": members}
    data = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()

    def info(name: str, size: int) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mtime, ti.mode, ti.type = size, MTIME, 0o644, tarfile.REGTYPE
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        return ti

    tmp = partial_path(out)  # a name of its own: two bundles to one --out never share a partial file
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
                with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    tar.addfile(info(MANIFEST, len(data)), io.BytesIO(data))
                    for entry in members:
                        with open(files[entry["path"]], "rb") as fh:
                            tar.addfile(info(entry["path"], entry["size"]), fh)
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise BundleError(f"the bundle cannot be written to {out} ({exc.strerror or exc}).") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


def make_bundle(ns: str, out: Path, root: Path = ROOT, include_reports: bool = False,
                notes: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """Bundle namespace `ns` of the checkout at `root` into the .tar.gz `out` (see the module's
    docstring for the members and MANIFEST.json). Returns `out`. Raises BundleError (one sentence)
    when the namespace lacks its provenance, its tables or its two reports, holds a symbolic link,
    or an export cannot be scrubbed. What the scrub by value did (values of `environ`, default this
    process's environment) is appended to `notes`, one sentence a file."""
    ns = check_namespace(ns)
    root = Path(root)
    art, rep = root / "artifacts" / ns, root / "report" / ns
    needed = [art / "provenance.json", art / "tables" / "kernel_time.csv", rep / "field_note.md", rep / "issue_comment.md"]
    for p in needed:
        if not p.is_file():
            raise BundleError(f"{p.relative_to(root)} does not exist; run the pipeline for namespace {ns} first.")
    try:
        provenance = json.loads((art / "provenance.json").read_text())
    except (ValueError, UnicodeDecodeError):
        raise BundleError(f"artifacts/{ns}/provenance.json is not valid JSON.") from None

    refuse_links([art, rep], root)

    def arc(p: Path) -> str:
        return p.relative_to(root).as_posix()

    files: dict[str, Path] = {arc(art / "provenance.json"): art / "provenance.json"}
    if (art / "summary.json").is_file():
        files[arc(art / "summary.json")] = art / "summary.json"
    files.update({arc(p): p for p in _regular_files(art / "tables", root)})
    files.update({arc(p): p for p in _regular_files(rep, root)})
    scrubbed: dict[str, int] = {}
    groups = sorted(p.parent for p in (art / "measure").glob("*/*/record.json")) if (art / "measure").is_dir() else []
    exports = bool(groups) and all((g / "capture.sqlite").is_file() for g in groups
                                   if json.loads((g / "record.json").read_text()).get("passed"))
    parent = Path(tempfile.gettempdir())
    sweep_scrub(parent)
    with tempfile.TemporaryDirectory(prefix=f"{SCRUB_PREFIX}{os.getpid()}-", dir=parent) as tmp:  # mode 0700
        for i, group in enumerate(groups):
            for name in GROUP_FILES:
                if (group / name).is_file():
                    files[arc(group / name)] = group / name
            if include_reports and (group / RAW_GROUP_REPORT).is_file():
                files[arc(group / RAW_GROUP_REPORT)] = group / RAW_GROUP_REPORT
            export = group / "capture.sqlite"
            if export.is_file():
                copy = _private_copy(export, Path(tmp) / f"{i}.sqlite")
                try:
                    scrubbed[arc(export)] = scrub_export(copy)
                except sqlite3.Error as exc:
                    raise BundleError(f"{arc(export)} could not be scrubbed ({str(exc).rstrip('.')}); "
                                      "it may not be an SQLite export.") from None
                files[arc(export)] = copy
        session_report = art / "measure" / RAW_SESSION_REPORT
        if include_reports and session_report.is_file():
            files[arc(session_report)] = session_report
        withheld, left_out = scrub_members(files, secret_values(provenance, environ), Path(tmp), notes)
        state = git_state()
        meta = {
            "namespace": ns,
            "run_commit": (provenance.get("git") or {}).get("commit", "unknown") if isinstance(provenance, dict) else "unknown",
            "bundled_at": {"commit": state.get("commit"), "dirty": state.get("dirty")},
            "code_sha256": code_hashes(),
            "include_reports": bool(include_reports),
            "exports": exports,
            "scrubbed_rows": scrubbed,
            "withheld": withheld,
            "left_out": left_out,
        }
        return pack(files, Path(out), meta)


# ----------------------------------------------------------------------------------------------
# Names inside a bundle


def safe_name(name: str) -> bool:
    if not name or name.startswith("/") or "\\" in name or "\x00" in name or re.match(r"^[A-Za-z]:", name):
        return False
    parts = name.split("/")
    return all(p not in ("", ".", "..") for p in parts) and posixpath.normpath(name) == name



BUNDLE_USAGE = "usage: python -m harness bundle NAMESPACE [--out FILE.tar.gz] [--force] [--include-reports]"


def bundle_main(argv: list[str] | None = None) -> int:
    """`python -m harness bundle NAMESPACE [--out FILE] [--force] [--include-reports]` (default out:
    bundles/NAMESPACE.evidence.tar.gz, which a bundle of the same namespace replaces; an --out that
    exists is replaced only with --force, and never one under artifacts/, report/, the code or the
    config: harness.io.check_out)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(BUNDLE_USAGE)
        return 0
    include, force = "--include-reports" in args, "--force" in args
    args = [a for a in args if a not in ("--include-reports", "--force")]
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
    default = ROOT / "bundles" / f"{args[0]}.evidence.tar.gz"
    notes: list[str] = []
    signal.signal(signal.SIGTERM, _terminated)
    try:
        target = check_out(out, "bundle", force=force, own=default) if out else default
        path = make_bundle(args[0], target, include_reports=include, notes=notes)
    except EvidenceError as exc:
        print(show(str(exc), 100_000), file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}")
    print(f"bundle: {show(path)}")
    return 0


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM ends bundle like an error, so its scrub folder and partial file are removed on the way out."""
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(bundle_main())
