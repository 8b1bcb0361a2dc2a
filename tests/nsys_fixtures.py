"""The real Nsight Systems exports the tests read: tests/fixtures/nsys/<name>.sqlite.gz, committed
gzip-compressed (an export is an eighth of its size so, and the tree that travels to a lent GPU
machine has a limit: docs/gpu-machine.md), with what `nsys stats` printed for each beside it
(<name>.<report>.csv). `export(name)` unpacks one, once per process, into a private folder removed
at exit, read-only: a test that changes an export copies it first."""

from __future__ import annotations

import atexit
import functools
import gzip
import shutil
import tempfile
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "fixtures" / "nsys"
SUFFIX = ".sqlite.gz"


@functools.cache
def _folder() -> Path:
    """This process's private folder for the unpacked exports, removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="nsys-fixtures-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def names() -> list[str]:
    """Every committed export's name (its file name without SUFFIX), sorted."""
    return sorted(p.name[: -len(SUFFIX)] for p in FOLDER.glob(f"*{SUFFIX}"))


@functools.cache
def export(name: str) -> Path:
    """The export `name` unpacked, as the SQLite file `nsys export` wrote (once per process)."""
    path = _folder() / f"{name}.sqlite"
    path.write_bytes(gzip.decompress((FOLDER / f"{name}{SUFFIX}").read_bytes()))
    path.chmod(0o444)
    return path


def stats(name: str, report: str) -> Path:
    """What `nsys stats --report <report> --format csv` printed for the export `name`."""
    return FOLDER / f"{name}.{report}.csv"
