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


_NAMES = r"[^\s,();]+(?:, [^\s,();]+)*"
"""One or more namespace names, ', ' between them, as a `set_aside` cell lists those of one reason."""


def set_aside_cell(items: Iterable[tuple[str, str]]) -> str:
    """The `set_aside` cell of (namespace, why) items in their order: each run of namespaces with
    the same why named together before it once ('a, b (why); c (why2)'), so that a history of many
    namespaces set aside for one reason (another GPU model) does not repeat it for each."""
    groups: list[tuple[list[str], str]] = []
    for name, why in items:
        if groups and groups[-1][1] == why:
            groups[-1][0].append(name)
        else:
            groups.append(([name], why))
    return "; ".join(f"{', '.join(names)} ({why})" for names, why in groups)


def set_aside_items(cell: Any) -> list[tuple[str, str]]:
    """(namespace, why) of each namespace a `set_aside` cell names, in its order: 'a, b (why); c
    (why2)' (`set_aside_cell`), or 'a (why); b (why)' as tables written before it have it; a why
    may hold parentheses and '; ' of its own."""
    if _missing(cell) or not str(cell).strip():
        return []
    out = []
    for item in re.split(rf"(?<=\)); (?={_NAMES} \()", str(cell).strip()):
        m = re.match(rf"^({_NAMES}) \((.*)\)$", item.strip())
        if m:
            out += [(name, m.group(2)) for name in m.group(1).split(", ")]
    return out


def set_aside_text(items: Iterable[tuple[str, str, str]], listed: int = 3) -> str:
    """Namespaces left out of a control band, grouped by why, in their order: each reason once, after
    its namespaces named ('a at 4 shapes and b (why)', with the where-text given; `in_parentheses`)
    where there are at most `listed` of them, else counted, the first and last in their order named
    ('78 namespaces, the earliest a and the latest z (why)': items come in retention order, and 'a
    to z' read as a range of names; the table's set_aside column keeps every name). items:
    (namespace, why, where-text or '')."""
    by_reason: dict[str, list[tuple[str, str]]] = {}
    for name, why, where in items:
        by_reason.setdefault(why, []).append((name, where))
    parts = []
    for why, names in by_reason.items():
        if len(names) <= listed:
            said = _and(f"{n} {w}".strip() for n, w in names)
        else:
            said = f"{len(names)} namespaces, the earliest {names[0][0]} and the latest {names[-1][0]}"
        parts.append(f"{said} {in_parentheses(why)}")
    return "; ".join(parts)


def nested(text: Any) -> str:
    """Text with its parentheses nested as prose nests them: a pair inside a pair becomes brackets,
    one inside that parentheses again ('(NVML flagged its captures there: the GPU throttled [software
    power cap])', not '... (software power cap))'). A parenthesis without its pair, and brackets the
    text holds of its own, are left as they are."""
    out = "" if _missing(text) else str(text)
    opened: list[int] = []  # the index in `chars` of each parenthesis still open
    chars = list(out)
    for i, ch in enumerate(chars):
        if ch == "(":
            if len(opened) % 2:
                chars[i] = "["
            opened.append(i)
        elif ch == ")" and opened:
            if chars[opened.pop()] == "[":
                chars[i] = "]"
    for i in opened:  # left open: not a pair, so not nested
        chars[i] = "("
    return "".join(chars)


def in_parentheses(text: str) -> str:
    """'(text)', the text's own parentheses nested inside (`nested`)."""
    return nested(f"({text})")


def and_(items: Iterable[str]) -> str:
    """'a', 'a and b', 'a, b and c' (empty items dropped)."""
    return _and(items)


def flag_clause(text: Any) -> str:
    """NVML's flags of a table cell made fit to sit inside a sentence ('' where there are none)."""
    return "" if _missing(text) or not str(text).strip() else _flag_text([text])


