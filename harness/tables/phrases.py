"""The phrases the trust rules write into their tables (controls.csv and drift.csv notes, the flag
lines): numbers in µs and percent, lists joined with 'and', NVML's flags said once, and sentences
that end with exactly one period. The cell readers those rules share are harness.tables.cells',
under the names the rules use (`_missing`, `_float`, `_truthy`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from harness.tables import cells
from harness.tables.cells import missing as _missing
from harness.tables.cells import number as _float


def _truthy(value: Any) -> bool:
    return cells.truth(value) is True


def _clause(text: Any) -> str:
    """Text from a table (an ncu reason, an error, an NVML flag) made fit to sit inside a
    sentence: one line, no trailing period."""
    out = re.sub(r"\s+", " ", "" if _missing(text) else str(text)).strip()
    return out.rstrip(". ").strip()


def _sentence(text: str) -> str:
    """One sentence: one line, exactly one final period (a sentence may open with an
    implementation's name, which keeps its case: `cuda's layernorm ...`)."""
    out = re.sub(r"\s+", " ", text).strip().rstrip(". ").strip()
    out = re.sub(r"\.{2,}", ".", out)
    return out + "." if out else ""


def _us(value: float) -> str:
    return f"{value:.2f} µs"


def _span(lo: float, hi: float) -> str:
    return f"{lo:.2f}-{hi:.2f} µs"


def _pct(value: float) -> str:
    return f"{value:+.1f}%"


def _and(items: Iterable[str]) -> str:
    items = [i for i in items if i]
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _count(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def _number_word(n: int) -> str:
    return {2: "two", 3: "three", 4: "four"}.get(n, str(n))


_PIDS = re.compile(r"\s*\([^()]*pids seen[^()]*\)")


def _flag_text(flags: Iterable[Any]) -> str:
    """NVML flags of several captures, each said once (the pid detail differs from capture to capture)."""
    seen: list[str] = []
    for text in flags:
        if _missing(text):
            continue
        for part in _PIDS.sub("", str(text)).split("; "):
            part = _clause(part)
            if part and part not in seen:
                seen.append(part)
    return "; ".join(seen) or "flagged disturbed"


def and_(items: Iterable[str]) -> str:
    """'a', 'a and b', 'a, b and c' (empty items dropped)."""
    return _and(items)


def flag_clause(text: Any) -> str:
    """NVML's flags of a table cell made fit to sit inside a sentence ('' where there are none)."""
    return "" if _missing(text) or not str(text).strip() else _flag_text([text])


