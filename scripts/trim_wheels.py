#!/usr/bin/env python3
"""Make the wheelhouse the GPU machine installs from (.whl/, built by ../shared/device/wheelhouse.sh)
smaller, so that the working tree and what a device call carries stay under the call's 64 MiB.

    python3 scripts/trim_wheels.py [.whl]

It removes what the pipeline never loads there: the tzdata wheel (the machine's pandas brings its
own), the greenlet wheel (SQLAlchemy imports it only for asyncio, which Snakemake's sqlmodel does
not use), SQLAlchemy's compiled speed-ups (`sqlalchemy/cyextension/*.so`: SQLAlchemy falls
back to the same code in Python) and the CBC solvers PuLP ships for other machines than the
GPU machine's (`pulp/solverdir/cbc/` but `linux/i64/`: 13 of the wheel's 16 MB; Snakemake's
scheduler runs the x86-64 Linux one), rewriting each such wheel's RECORD to match. Also what only
`snakemake --report` (Snakemake's own HTML report, which the GPU machine never makes) loads: the
docutils wheel and Snakemake's report assets (`snakemake/assets/data/`: vega, tailwind, react);
SQLAlchemy's test suite (`sqlalchemy/testing/`) and its dialects but SQLite's (it imports a
dialect only when an engine names it; Snakemake's database is SQLite); and GitPython with gitdb and
smmap (Snakemake imports them only for workflow sources in git repositories). Run it once after building
the wheelhouse; running it again changes nothing. Seen on an H100 with the trimmed wheelhouse: the
imports, a dry run of the main command and the smoke tier's end-to-end test (docs/gpu-machine.md);
with the report's, SQLAlchemy's and git's parts left out too, the CPU tests that run real Snakemake but
its HTML report passed on this machine's Snakemake with those parts removed from its install.
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

DROP = ("tzdata-", "greenlet-", "docutils-", "gitpython-", "gitdb-", "smmap-")
"""Wheels the pipeline does not load on the GPU machine (file-name prefixes)."""

SQLALCHEMY_DIALECTS_KEPT = ("sqlalchemy/dialects/__init__.py", "sqlalchemy/dialects/_typing.py", "sqlalchemy/dialects/sqlite/")
"""What stays of SQLAlchemy's dialects: the registry and SQLite's."""


def _sqlalchemy_goes(name: str) -> bool:
    """SQLAlchemy's members the GPU machine never loads: compiled speed-ups, the test suite, and
    the dialects but SQLite's."""
    return ((name.startswith("sqlalchemy/cyextension/") and name.endswith(".so")) or name.startswith("sqlalchemy/testing/")
            or (name.startswith("sqlalchemy/dialects/") and not name.startswith(SQLALCHEMY_DIALECTS_KEPT)))


STRIP: dict[str, Callable[[str], bool]] = {
    "sqlalchemy-": _sqlalchemy_goes,
    "snakemake-": lambda name: name.startswith("snakemake/assets/data/"),
    "pulp-": lambda name: name.startswith("pulp/solverdir/cbc/") and not name.startswith("pulp/solverdir/cbc/linux/i64/"),
}
"""For the wheels whose names start with each key, which members go (by their path in the wheel)."""


def strip_members(wheel: Path, goes: Callable[[str], bool]) -> list[str]:
    """Rewrite `wheel` without its members whose path `goes` accepts, and without their lines in
    its RECORD; the names removed (none where there were none)."""
    with zipfile.ZipFile(wheel) as zin:
        gone = [i.filename for i in zin.infolist() if goes(i.filename)]
        if not gone:
            return []
        fd, tmp = tempfile.mkstemp(suffix=".whl", dir=wheel.parent)
        os.close(fd)
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            for item in zin.infolist():
                if item.filename in gone:
                    continue
                data = zin.read(item.filename)
                if item.filename.endswith(".dist-info/RECORD"):
                    kept = [line for line in data.decode().splitlines() if line.split(",", 1)[0] not in gone]
                    data = ("\n".join(kept) + "\n").encode()
                zout.writestr(item, data)
    os.replace(tmp, wheel)
    return gone


def trim(folder: Path) -> list[str]:
    """Trim the wheelhouse in `folder`; one line for each thing done."""
    done = []
    for wheel in sorted(folder.glob("*.whl")):
        if wheel.name.lower().startswith(DROP):
            wheel.unlink()
            done.append(f"removed {wheel.name}")
            continue
        for prefix, goes in STRIP.items():
            if wheel.name.lower().startswith(prefix) and (gone := strip_members(wheel, goes)):
                done.append(f"{wheel.name}: removed {len(gone)} member(s) not loaded there")
    return done


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ".whl")
    if not folder.is_dir():
        print(f"trim_wheels: there is no folder {folder}.", file=sys.stderr)
        return 2
    for line in trim(folder) or ["nothing to trim"]:
        print(line)
    print(f"{sum(p.stat().st_size for p in folder.glob('*.whl')) / 2**20:.1f} MiB in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
