"""Atomic writes: a file appears complete or not at all (written under '<name>.partial', then
renamed), so an interrupted run never leaves a partial output that a later run would trust."""

from __future__ import annotations

import os
from pathlib import Path


def write_text(text: str, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)
