"""Writing outputs: a file appears complete or not at all (written under a partial name of its
own, '<name>.<pid>.<random>.partial', then renamed), so an interrupted run never leaves a partial
output that a later run would trust, and two writers of one file never share a partial file: the
last rename wins, whole.

`check_out` guards the `--out` of a command: nothing under PROTECTED (the evidence, the kernels,
the code, the workflow) or a file of PROTECTED_FILES (the config) is ever replaced, and no existing
file is replaced unless the user said `--force`."""

from __future__ import annotations

import gzip
import json
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import ROOT
from harness.errors import EvidenceError, shown

if TYPE_CHECKING:
    import pandas as pd


PROTECTED = ("artifacts", "report", "kernels", "harness", "workflow", ".git")
"""Folders of the repository that no command's --out may write into: the evidence, the kernels, the
code and the workflow (each command writes its own outputs there itself, never through --out)."""
PROTECTED_FILES = ("config.yaml", "Snakefile", "pyproject.toml")
"""Files of the repository's top level that no --out may replace: the config among them."""


def partial_path(path: str | Path) -> Path:
    """A partial name beside `path` that no other writer uses: '<name>.<pid>.<random>.partial'."""
    path = Path(path)
    return path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.partial")


def check_out(path: str | Path, command: str, force: bool = False, own: str | Path | None = None,
              root: str | Path = ROOT) -> Path:
    """`path`, the --out of `command`, if it may be written; else EvidenceError, one sentence.

    Refused: a path (after links) under a PROTECTED folder of the repository at `root` or one of
    its PROTECTED_FILES; an existing file unless `force` (`own`, the command's default output,
    which it rebuilds by design, may always be replaced); a folder (the command names a file)."""
    path = Path(path)
    resolved, base = path.resolve(), Path(root).resolve()
    if own is not None and resolved == Path(own).resolve() and not path.is_dir():
        return path  # the command's own output, named explicitly
    for top in PROTECTED:
        where = base / top
        if resolved == where or where in resolved.parents:
            raise EvidenceError(f"{command}: --out {shown(path)} lies under {top}/, which holds evidence or code that "
                                f"no command's --out may replace; write it elsewhere (bundles/ or outside the repository).")
    if resolved.parent == base and resolved.name in PROTECTED_FILES:
        raise EvidenceError(f"{command}: --out {shown(path)} is the repository's {resolved.name}, which no command's "
                            f"--out may replace; write it elsewhere.")
    if path.is_dir():
        raise EvidenceError(f"{command}: --out {shown(path)} is a folder; --out names the file to write.")
    if (path.exists() or path.is_symlink()) and not force:
        raise EvidenceError(f"{command}: {shown(path)} already exists; pass --force to replace it.")
    return path


def _atomic(write: Callable[[Path], Any], path: str | Path) -> None:
    """`write(tmp)` to a partial name of its own beside `path` (partial_path), then rename it to
    `path`; on any failure (a `path` that is a folder, a full disk, an interrupt) the partial file
    is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(text: str, path: str | Path) -> None:
    _atomic(lambda tmp: tmp.write_text(text), path)


def write_bytes(data: bytes, path: str | Path) -> None:
    _atomic(lambda tmp: tmp.write_bytes(data), path)


def write_gzip(data: bytes, path: str | Path) -> bytes:
    """`data` gzip-compressed into `path`, atomically, with no time or name in the gzip header, so
    the same data give the same bytes; returns what was written."""
    blob = gzip.compress(data, compresslevel=9, mtime=0)
    write_bytes(blob, path)
    return blob


def write_json(obj: Any, path: str | Path) -> None:
    """`obj` as indented JSON, atomically (values JSON cannot hold are written as text)."""
    write_text(json.dumps(obj, indent=1, default=str) + "\n", path)


def write_csv(rows: Iterable[Mapping[str, Any]], columns: list[str], path: str | Path) -> pd.DataFrame:
    """Write rows with exactly these columns, atomically (temporary name, then rename); a `path`
    ending in '.gz' is gzip-compressed, byte for byte the same for the same rows (no time or name
    in its header), which pandas reads back by its name alone."""
    import pandas as pd  # deferred: half a second that GPU jobs writing only JSON need not pay

    frame = pd.DataFrame(list(rows))
    for col in columns:
        if col not in frame.columns:
            frame[col] = pd.NA
    frame = frame[columns]
    written = _whole_numbers_exact(frame)
    if str(path).endswith(".gz"):
        text = written.to_csv(index=False, float_format="%.6g", lineterminator="\n")
        write_gzip(text.encode(), path)
    else:
        _atomic(lambda tmp: written.to_csv(tmp, index=False, float_format="%.6g"), path)
    return frame


def _whole_numbers_exact(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with each float column whose values are all whole numbers (missing ones aside) as
    pandas' nullable integers, so that it is written digit for digit: pandas holds a column of
    integers with a missing value as floats, and "%.6g" would write the byte count 123456789 as
    1.23457e+08. Other floats keep "%.6g", as do whole numbers that all lie below 1e6 ("%.6g"
    writes them in full) or any beyond 2**53 (where every float is whole). The frame given is left
    as it is; a copy is returned where a column changes."""
    import numpy as np
    import pandas as pd

    out = frame
    for i, dtype in enumerate(frame.dtypes):
        if not pd.api.types.is_float_dtype(dtype):
            continue
        values = frame.iloc[:, i].dropna().to_numpy(dtype="float64")
        if values.size == 0 or not np.isfinite(values).all() or not (np.abs(values) <= 2.0**53).all():
            continue
        if not (values == np.trunc(values)).all() or np.abs(values).max() < 1e6:
            continue  # not whole numbers, or all below 1e6, which "%.6g" writes in full already
        if out is frame:
            out = frame.copy()
        out.isetitem(i, frame.iloc[:, i].astype("Int64"))
    return out


def read_csvs(paths: Iterable[str | Path]) -> pd.DataFrame:
    """The CSV tables at `paths`, one after another (an empty frame for none)."""
    import pandas as pd  # deferred, as in write_csv

    frames = [pd.read_csv(p) for p in paths]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def row_dicts(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as {column: value} dicts, each value as `frame.to_dict("records")` gives it
    (Python's int, float, bool and str for numpy's, None for a nullable column's NA, NaN and NaT
    as they are), in a fifth of its time: to_dict takes the frame apart column by column on every
    call, and the trust step calls it for every retained namespace (a quarter of that step's
    time over a resolution run's history: 0.93 s with to_dict, 0.68 s with this, on a CPU)."""
    import pandas as pd  # deferred, as in write_csv (the frame given has loaded it)

    values = frame.to_numpy(dtype=object)
    for i, dtype in enumerate(frame.dtypes):
        if getattr(dtype, "na_value", None) is pd.NA:  # a nullable column: to_dict gives None for NA
            values[:, i] = frame.iloc[:, i].to_numpy(dtype=object, na_value=None)
    columns = list(frame.columns)
    return [dict(zip(columns, row)) for row in values.tolist()]
