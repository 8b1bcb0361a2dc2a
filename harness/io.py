"""Writing outputs: a file appears complete or not at all (written under '<name>.partial', then
renamed), so an interrupted run never leaves a partial output that a later run would trust."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def write_text(text: str, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)


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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    frame.to_csv(tmp, index=False, float_format="%.6g")
    os.replace(tmp, path)
    return frame


def read_csvs(paths: Iterable[str | Path]) -> pd.DataFrame:
    """The CSV tables at `paths`, one after another (an empty frame for none)."""
    import pandas as pd  # deferred, as in write_csv

    frames = [pd.read_csv(p) for p in paths]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
