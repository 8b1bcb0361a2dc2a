"""Writing outputs: a file appears complete or not at all (written under '<name>.partial', then
renamed), so an interrupted run never leaves a partial output that a later run would trust."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def _atomic(write: Callable[[Path], Any], path: str | Path) -> None:
    """`write(tmp)` to '<name>.partial' beside `path`, then rename it to `path`; on any failure
    (a `path` that is a folder, a full disk, an interrupt) the partial file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(text: str, path: str | Path) -> None:
    _atomic(lambda tmp: tmp.write_text(text), path)


def write_json(obj: Any, path: str | Path) -> None:
    """`obj` as indented JSON, atomically (values JSON cannot hold are written as text)."""
    write_text(json.dumps(obj, indent=1, default=str) + "\n", path)


def write_csv(rows: Iterable[Mapping[str, Any]], columns: list[str], path: str | Path) -> pd.DataFrame:
    """Write rows with exactly these columns, atomically (temporary name, then rename)."""
    import pandas as pd  # deferred: half a second that GPU jobs writing only JSON need not pay

    frame = pd.DataFrame(list(rows))
    for col in columns:
        if col not in frame.columns:
            frame[col] = pd.NA
    frame = frame[columns]
    _atomic(lambda tmp: frame.to_csv(tmp, index=False, float_format="%.6g"), path)
    return frame


def read_csvs(paths: Iterable[str | Path]) -> pd.DataFrame:
    """The CSV tables at `paths`, one after another (an empty frame for none)."""
    import pandas as pd  # deferred, as in write_csv

    frames = [pd.read_csv(p) for p in paths]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
