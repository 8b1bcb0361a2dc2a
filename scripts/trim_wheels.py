#!/usr/bin/env python3
"""Make the wheelhouse the GPU machine installs from (.whl/, built by ../shared/device/wheelhouse.sh)
smaller, so that the working tree and what a device call carries stay under the call's 64 MiB.

    python3 scripts/trim_wheels.py [.whl]

It removes what the pipeline never loads there: the tzdata wheel (the machine's pandas brings its
own), the greenlet wheel (SQLAlchemy imports it only for asyncio, which Snakemake's sqlmodel does
not use) and SQLAlchemy's compiled speed-ups (`sqlalchemy/cyextension/*.so`: SQLAlchemy falls
back to the same code in Python), rewriting that wheel's RECORD to match. Run it once after
building the wheelhouse; running it again changes nothing. Seen on an H100 with the trimmed
wheelhouse: the imports, a dry run of the main command and the smoke tier's end-to-end test
(docs/gpu-machine.md).
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path

DROP = ("tzdata-", "greenlet-")
"""Wheels the pipeline does not load on the GPU machine (file-name prefixes)."""

STRIP = ("sqlalchemy-", "/cyextension/", ".so")
"""In the wheel whose name starts with the first, the members under the second ending in the third."""


def strip_members(wheel: Path, inside: str, suffix: str) -> list[str]:
    """Rewrite `wheel` without its members whose path holds `inside` and ends in `suffix`, and
    without their lines in its RECORD; the names removed (none where there were none)."""
    with zipfile.ZipFile(wheel) as zin:
        gone = [i.filename for i in zin.infolist() if inside in i.filename and i.filename.endswith(suffix)]
        if not gone:
            return []
        fd, tmp = tempfile.mkstemp(suffix=".whl", dir=wheel.parent)
        os.close(fd)
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
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
        elif wheel.name.lower().startswith(STRIP[0]):
            gone = strip_members(wheel, STRIP[1], STRIP[2])
            if gone:
                done.append(f"{wheel.name}: removed {len(gone)} compiled extension(s)")
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
