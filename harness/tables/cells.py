"""What a table cell holds, read one way everywhere: the trust rules (harness/tables) and the
reports' wording (harness/report/words) ask these, so a cell that is empty, NaN, pandas' NA, a
boolean or an infinity means the same to both."""

from __future__ import annotations

import math
from typing import Any


def missing(value: Any) -> bool:
    """None, NaN or pandas' NA (or NaT)."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return type(value).__name__ in ("NAType", "NaTType")


def number(value: Any) -> float | None:
    """A finite float, or None (empty, not a number, a boolean, an infinity)."""
    if missing(value) or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def integer(value: Any) -> int | None:
    """A whole number, or None."""
    v = number(value)
    return None if v is None else round(v)


def text(value: Any) -> str | None:
    """Text of a table cell, None where it is empty."""
    return None if missing(value) or str(value) == "" else str(value)


def truth(value: Any) -> bool | None:
    """A boolean cell (True/False, true/false, 1/0, yes/no), None where it is empty or neither."""
    if missing(value):
        return None
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        return None
    return bool(value)
