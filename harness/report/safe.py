"""Text from a measurement or a configuration made inert before a report prints it.

Kernel names, shapes, namespaces, implementation and variant names, descriptions, error messages,
flags and notes all reach the reports from tables and configs that a report does not control. Every
such string passes through this module, and nothing else escapes text:

* `visible` replaces each control character (C0 but space, DEL, C1), each bidirectional control
  and each invisible separator or zero-width character with a visible escape (`\\x1b`, `\\n`,
  `\\u202e`), so no string can move the cursor, colour a terminal, reorder a line or hide a break;
* `md_text` makes a string plain markdown text (GitHub flavour): it cannot open a link, an image,
  an autolink, raw HTML, a code span, emphasis, a table cell, a heading, math, a mention or an
  issue reference; `md_cell` is the same for a table cell, with a mark for an empty one;
* `html_text` makes a string plain HTML text (element content or a quoted attribute value);
  `md_html` is the same for raw HTML inside a markdown file, where GitHub still links text.

The markdown environment of the report escapes every value a template prints with `md_text`
unless the value is `Trusted` (text the report composed from numbers and its own words); the HTML
environment autoescapes, after `visible`. Both are set up in harness.report.render.
"""

from __future__ import annotations

import math
from typing import Any

BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Bidirectional controls: they reorder the text around them without being seen."""

INVISIBLE = frozenset("\u00ad\u180e\u200b\u200c\u200d\u2028\u2029\u2060\u2061\u2062\u2063\u2064\ufeff")
"""Zero-width characters and the Unicode line and paragraph separators."""

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

WORD_JOINER = "\u2060"
"""Put by `md_text` between '@' or '#' and what follows, so GitHub makes no mention or issue
reference of a measured string; it is the only character the escaping adds that is not seen."""


class Trusted(str):
    """Text the report composed itself (a formatted number, a link to its own figure): the
    markdown environment prints it as it is. Never wrap a string that came from a table's text
    column or a config in it."""


def plain(value: Any) -> str:
    """The text of a value: '' for None, NaN and pandas' NA, else str(value)."""
    if value is None:
        return ""
    if isinstance(value, float) and math.isnan(value):
        return ""
    if type(value).__name__ in ("NAType", "NaTType"):
        return ""
    return str(value)


def visible(value: Any) -> str:
    """`plain(value)` with every control, bidirectional and invisible character replaced by a
    visible escape: '\\n', '\\r', '\\t', '\\xNN' (C0, DEL, C1), '\\uNNNN' (the others)."""
    out = []
    for ch in plain(value):
        code = ord(ch)
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif code < 0x20 or 0x7F <= code <= 0x9F:
            out.append(f"\\x{code:02x}")
        elif ch in BIDI or ch in INVISIBLE:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


_MD_BACKSLASH = frozenset("\\`*~|$")
_MD_ENTITY = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "&#91;", "]": "&#93;"}


def md_text(value: Any) -> str:
    """`visible(value)` as inert GitHub markdown text, one line, that renders as the same text.

    Backslash-escaped: backslash, backtick, '*', '~', '|', '$', '#', and '_' unless it stands
    between two letters or digits (where it cannot emphasise). As entities: '&', '<', '>', '[', ']'
    (so neither a link, an image nor raw HTML can open), the ':' of '://' and the '.' of 'www.' (so
    no autolink forms). A word joiner after '@' or '#' when a letter or digit follows (no mention,
    no issue reference)."""
    text = visible(value)
    out = []
    n = len(text)
    for i, ch in enumerate(text):
        nxt = text[i + 1] if i + 1 < n else ""
        prev = text[i - 1] if i else ""
        if ch in _MD_ENTITY:
            out.append(_MD_ENTITY[ch])
        elif ch in _MD_BACKSLASH:
            out.append("\\" + ch)
        elif ch == "_":
            out.append("_" if prev.isalnum() and nxt.isalnum() else "\\_")
        elif ch == "#":
            out.append("\\#" + (WORD_JOINER if nxt.isalnum() else ""))
        elif ch == "@":
            out.append("@" + (WORD_JOINER if nxt.isalnum() else ""))
        elif ch == ":" and text.startswith("//", i + 1):
            out.append("&#58;")
        elif ch == "." and text[max(0, i - 3):i].lower() == "www":
            out.append("&#46;")
        else:
            out.append(ch)
    return "".join(out)


def md_cell(value: Any, empty: str = "") -> str:
    """`md_text(value)` for a table cell (a pipe cannot split it, a break cannot end the row);
    `empty` for a value with no text."""
    text = md_text(value)
    return text if text else empty


_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}


def html_text(value: Any) -> str:
    """`visible(value)` as HTML text, safe as element content and inside a quoted attribute."""
    return "".join(_HTML.get(ch, ch) for ch in visible(value))


def md_html(value: Any) -> str:
    """`visible(value)` as element text inside raw HTML of a GitHub markdown file (the one-line
    summary of a folded section: '&', '<', '>' as entities), where markdown is not parsed but
    GitHub still links text: the ':' of '://',
    the '.' of 'www.' and '#' become entities, and a word joiner follows '@' before a letter or
    digit, so no autolink, issue reference or mention forms."""
    text = visible(value)
    out = []
    for i, ch in enumerate(text):
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if ch in "&<>":
            out.append(_HTML[ch])
        elif ch == "#":
            out.append("&#35;")
        elif ch == "@":
            out.append("@" + (WORD_JOINER if nxt.isalnum() else ""))
        elif ch == ":" and text.startswith("//", i + 1):
            out.append("&#58;")
        elif ch == "." and text[max(0, i - 3):i].lower() == "www":
            out.append("&#46;")
        else:
            out.append(ch)
    return "".join(out)


__all__ = ["BIDI", "INVISIBLE", "WORD_JOINER", "Trusted", "html_text", "md_cell", "md_html", "md_text", "plain",
           "visible"]
