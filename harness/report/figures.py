"""Figures of the report, drawn from the sweep table only.

* `sweep_figure`: one SVG per operation, three panels one above the other (each the page's
  width, so its text stays legible there): each implementation's kernel time per shape (grouped
  bars, log axis); ours over the control per shape, with the ratio's interval as error bars where
  the table has one (`<a>_over_<b>_lo/_hi`) and a shaded band for the verdict "same" (1 +/- the
  table's `margin`); and every other ratio, on a log axis. Log axes are labelled in plain numbers
  (0.5, 1, 2), and every ratio axis holds its band of "same".
* `overview_figure`: one SVG for the namespace: every operation's ratio of ours over the control
  at its default shape, with its interval and the same band.

An interval is the table's: a 95% interval over the interleaved rounds where the table has a
`margin` column (over their placements, by Student's t, where its `placements` column says the
rounds ran on several; a bootstrap of the rounds otherwise), else (tables written before the rounds) the min-max envelope of the
launches, or none for tables older still; the legend says which. Nothing is estimated here. Each SVG is reproducible byte for byte
for the same table: fixed hash salt, no date, text as text.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from harness.errors import EvidenceError
from harness.io import write_text
from harness.report.words import number
from harness.tables.derive import SWEEP_PAIRS

IMPLS = ("cuda", "triton", "torch", "external")
"""Implementations in drawing order; each is a column '<impl>_us' of the sweep table."""

COLORS = {"cuda": "#1f77b4", "triton": "#ff7f0e", "torch": "#2ca02c", "external": "#9467bd"}
VERDICT_COLORS = {"faster": "#1a7f37", "slower": "#cf222e", "same": "#0969da", "can't tell": "#6e7781"}

HASH_SALT = "kernel-evidence"
"""Fixed salt for the SVG element ids, so that the same figure gives the same bytes."""

BOOTSTRAP_LABEL = "95% bootstrap interval over interleaved rounds"
PLACED_LABEL = "95% interval over the placements of interleaved rounds (Student's t)"
ENVELOPE_LABEL = "min-max envelope of the launches"
NO_INTERVAL_LABEL = "none (the table records no interval)"


def _number(value: Any) -> float:
    """A table cell as a float to draw (harness.report.words.number), NaN where it holds no finite number."""
    out = number(value)
    return math.nan if out is None else out


def implementations(table: Any) -> list[str]:
    """Implementations with at least one finite time in the table, in IMPLS order."""
    return [impl for impl in IMPLS if any(math.isfinite(t) for t in _times(table, impl))]


def _times(table: Any, impl: str) -> list[float]:
    """An implementation's kernel times (µs) per row, NaN where absent."""
    if f"{impl}_us" not in table:
        return [math.nan] * len(table)
    return [_number(v) for v in table[f"{impl}_us"]]


def _column(table: Any, name: str) -> list[float]:
    if name not in table:
        return [math.nan] * len(table)
    return [_number(v) for v in table[name]]


def table_margin(table: Any) -> float | None:
    """The verdict margin the table records (its `margin` column), None for tables without one,
    whose intervals are the min-max envelope of the launches."""
    values = [m for m in _column(table, "margin") if math.isfinite(m)]
    return values[0] if values else None


def interval_label(table: Any) -> str:
    """What the table's intervals are, in the words of a legend."""
    if table_margin(table) is not None:
        placed = any(math.isfinite(p) and p > 1 for p in _column(table, "placements"))
        return PLACED_LABEL if placed else BOOTSTRAP_LABEL
    return ENVELOPE_LABEL if any(str(c).endswith("_lo") for c in table.columns) else NO_INTERVAL_LABEL


def ratio_series(table: Any, impl: str, control: str) -> tuple[list[float], list[float], list[float]]:
    """(ratio, lo, hi) of impl over control per row: the table's `<impl>_over_<control>` columns
    with their interval where it has them; else the ratio of the two kernel times, without an
    interval (lo and hi NaN)."""
    name = f"{impl}_over_{control}"
    if name in table:
        return _column(table, name), _column(table, f"{name}_lo"), _column(table, f"{name}_hi")
    ratios = [t / b if math.isfinite(t) and math.isfinite(b) and b > 0 else math.nan
              for t, b in zip(_times(table, impl), _times(table, control), strict=True)]
    return ratios, [math.nan] * len(ratios), [math.nan] * len(ratios)


_GEOMETRY = re.compile(r'(\s(?:d|transform|x|y|x1|x2|y1|y2|width|height|points)=")([^"]*)(")')
"""An SVG attribute that holds coordinates (not text a reader sees, not a style)."""

_LONG = re.compile(r"-?\d+\.\d{3,}")

_INDENT = re.compile(r"\n[ \t]+<")
"""The indentation before a tag, which an SVG viewer ignores."""


_DEFS = re.compile(r"(<defs>.*?</defs>)", re.DOTALL)

_STYLED = re.compile(r'<(?![/!?])[^>]*?\sstyle="([^"]*)"[^>]*>')
"""A start tag that carries a style attribute."""

_ID = re.compile(r'\sid="([^"]+)"')


def rounded(svg: str) -> str:
    """The SVG with its coordinates at 0.01 of a point, each path on one line and no indentation
    before its tags (compact's first step)."""
    def short(m: re.Match[str]) -> str:
        text = f"{float(m.group(0)):.2f}".rstrip("0").rstrip(".")
        return "0" if text in ("-0", "") else text

    def attribute(m: re.Match[str]) -> str:
        return m.group(1) + " ".join(_LONG.sub(short, m.group(2)).split()) + m.group(3)

    return _INDENT.sub("\n<", _GEOMETRY.sub(attribute, svg))


def compact(svg: str) -> str:
    """The SVG with its coordinates at 0.01 of a point, each path on one line and no indentation
    before its tags; each distinct style of an element outside `<defs>` written once, as a class
    (`s0`, `s1`, ...) of the SVG's own stylesheet, instead of on every element that has it; and no
    id that nothing in the SVG refers to. The figure looks the same (a point is 1/72 inch), and the
    classes and ids change no pixel of it in Chromium (a class rule outranks matplotlib's `*` rule
    as the style attribute did), in about half the room matplotlib's SVG takes, in every committed
    report. Elements inside `<defs>` (what `<use>` clones) keep their styles. Text a reader sees is
    left as matplotlib wrote it. compact(compact(s)) == compact(s)."""
    text = rounded(svg)
    classes: dict[str, str] = {}

    def to_class(m: re.Match[str]) -> str:
        tag = m.group(0)
        if " class=" in tag:
            return tag
        name = classes.setdefault(m.group(1), f"s{len(classes)}")
        return tag.replace(f' style="{m.group(1)}"', f' class="{name}"', 1)

    text = "".join(part if _DEFS.fullmatch(part) else _STYLED.sub(to_class, part) for part in _DEFS.split(text))
    if classes:
        rules = "".join(f".{name}{{{style}}}" for style, name in classes.items())
        if "</style>" in text:
            text = text.replace("</style>", rules + "</style>", 1)
        else:
            text = re.sub(r"(<svg\b[^>]*>)", lambda m: f'{m.group(1)}\n<defs><style type="text/css">{rules}</style></defs>',
                          text, count=1)
    referred = set(re.findall(r'href="#([^"]+)"', text)) | set(re.findall(r"url\(#([^)]+)\)", text))
    return _ID.sub(lambda m: m.group(0) if m.group(1) in referred else "", text)


def _save(fig: Any, out_svg: Path | str) -> None:
    out = Path(out_svg)
    out.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    write_text(compact(buffer.getvalue()), out)


@contextlib.contextmanager
def _figure(figsize: tuple[float, float]) -> Iterator[Any]:
    """A matplotlib Figure of this size drawn under STYLE, without pyplot (no backend, no figure
    manager, a third of a second less of the render's start)."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(cast(Any, STYLE)):
        yield Figure(figsize=figsize)


@dataclass(frozen=True)
class _Point:
    """One operation of the overview: its label, ratio, interval (NaN where none) and verdict."""

    label: str
    ratio: float
    lo: float
    hi: float
    verdict: str
    ranked: bool


FONT_PT = 11.0
"""The smallest text of a figure, in points (tick labels and legends; titles are larger)."""

SWEEP_SIZE_IN = (11.0, 13.5)
"""The sweep figure's size: the page's width (at most 1192 px of content, the page's 1240 px less
its padding) holds its 11 in (792 pt) at full size, so 11 pt text is 14.7 px high there."""

PAGE_CONTENT_PX = 1192.0
"""The width of the page's content at a 1400 px window (report/templates/page.html.j2: a body of at
most 1240 px, 24 px padding either side); a figure wider than this is scaled down to it."""

LEGIBLE_PX = 11.0
"""The least height of a figure's text on the page (CSS px) that a test accepts as legible."""

STYLE = {"svg.hashsalt": HASH_SALT, "svg.fonttype": "none", "font.family": "DejaVu Sans", "font.size": FONT_PT,
         "axes.titlesize": FONT_PT + 1, "axes.labelsize": FONT_PT, "xtick.labelsize": FONT_PT,
         "ytick.labelsize": FONT_PT, "legend.fontsize": FONT_PT, "legend.title_fontsize": FONT_PT}


def page_scale(width_pt: float, content_px: float = PAGE_CONTENT_PX) -> float:
    """CSS px per point of a figure `width_pt` wide on the page: an SVG's natural size is 4/3 px
    per pt, scaled down (max-width: 100%) where that is wider than the content."""
    natural = width_pt * 4.0 / 3.0
    return min(natural, content_px) / width_pt


def plain_log_ticks(lo: float, hi: float) -> list[float]:
    """Tick positions for a log axis from lo to hi, each a plain number: the 1-2-5 series where
    three of it fall inside, else 1-9 times the powers of ten where three to ten of those do, else
    evenly spaced round numbers (a step of 1, 2 or 5 times a power of
    ten, four to ten of them) for an axis that spans too little for that series."""
    if not (lo > 0 and hi > lo):
        return []
    first, last = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1
    for subs in ((1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)):
        ticks = sorted({round(m * 10.0 ** e, 12) for e in range(first, last + 1) for m in subs
                        if lo <= m * 10.0 ** e <= hi})
        if 3 <= len(ticks) <= 10:
            return ticks
    raw = (hi - lo) / 6
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)
    start = math.ceil(lo / step)
    return [round(k * step, 12) for k in range(start, math.floor(hi / step + 1e-9) + 1)]


def _plain_log_axis(ax: Any, lo: float, hi: float) -> None:
    """A log y axis from lo to hi labelled in plain numbers ('0.5', '2', '100'), never '6×10⁻¹'."""
    from matplotlib import ticker

    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ax.yaxis.set_major_locator(ticker.FixedLocator(plain_log_ticks(lo, hi)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def svg_text_px(svg: str, display_px: float | None = None) -> float | None:
    """The height in CSS px of the smallest text of an SVG as the page shows it: the least
    font-size of its text (in viewBox units) times the displayed width over the viewBox width.
    `display_px` is the width the page gives the figure (measured in a browser); without it, the
    SVG's natural width (its width in pt, 4/3 px each) scaled down to PAGE_CONTENT_PX. None for an
    SVG without text."""
    head = re.search(r"<svg\b[^>]*>", svg)
    sizes = [float(v) for v in re.findall(r"font-size:\s*([0-9.]+)px", svg)]
    if head is None or not sizes:
        return None
    box = re.search(r'viewBox="[-0-9.]+ [-0-9.]+ ([0-9.]+) [0-9.]+"', head.group(0))
    width = re.search(r'width="([0-9.]+)pt"', head.group(0))
    if box is None or width is None:
        raise EvidenceError("The figure's SVG names no viewBox or width in pt, so its text size on the page is unknown.")
    shown = display_px if display_px is not None else min(float(width.group(1)) * 4.0 / 3.0, PAGE_CONTENT_PX)
    return min(sizes) * shown / float(box.group(1))


def layout(fig: Any, drawn: bool = False) -> dict[str, Any]:
    """What a legibility check needs of a drawn figure: its width in points, its smallest text in
    points, and per axes its y scale, limits, tick labels and the 'same' band (None without one) on
    its axis (`band_axis`, 'y' or 'x'). `drawn`: the figure was just saved, so its ticks are those
    drawn (a second draw, about 0.1 s a figure, would give the same)."""
    from matplotlib.text import Text

    if not drawn:
        fig.draw_without_rendering()
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    panels = []
    for ax in fig.axes:
        band, axis = None, "y"
        for p in ax.patches:
            if str(p.get_label()).startswith("same:"):
                across = abs(p.get_x()) < 1e-9 and abs(p.get_width() - 1.0) < 1e-9  # axhspan: x spans the axes
                band, axis = ((p.get_y(), p.get_y() + p.get_height()) if across
                              else (p.get_x(), p.get_x() + p.get_width())), ("y" if across else "x")
        lo, hi = ax.get_ylim()
        panels.append({"title": ax.get_title(), "yscale": ax.get_yscale(), "ylim": (lo, hi), "xlim": ax.get_xlim(),
                       "band": band, "band_axis": axis,
                       "yticklabels": [t.get_text() for t in ax.get_yticklabels()
                                       if t.get_text() and lo <= t.get_position()[1] <= hi]})
    return {"width_pt": fig.get_figwidth() * 72.0, "min_font_pt": min(sizes) if sizes else None, "panels": panels}


OURS = "cuda"


def sweep_figure(sweep: Any, op: str, out_svg: Path | str, control: str = "triton",
                 cache_mode: str = "hot") -> dict[str, Any]:
    """One SVG for one operation, three panels one above the other, over the shapes (in table
    order): kernel time per implementation (log µs); ours over the control, its axis zoomed to the
    intervals so that the band of 'same' (1 +/- the table's margin) shows; and every other ratio of
    the table (ours over the library, an external kernel over the control) on a log axis that holds
    the band too. Each ratio carries its interval as error bars where the table has one, and is
    drawn hollow, '(no interval)', where it has none. Implementations without any time are left
    out. Returns the figure's `layout`. EvidenceError (one sentence) where the table has no rows or
    no times for `op`."""
    table = sweep[sweep["op"] == op].reset_index(drop=True)
    if table.empty:
        raise EvidenceError(f"The sweep table has no rows for operation {op!r}.")
    impls = implementations(table)
    if not impls:
        raise EvidenceError(f"The sweep table has no kernel times for operation {op!r}.")
    shapes = [str(s) for s in table["shape"]]
    with _figure(SWEEP_SIZE_IN) as fig:
        left, middle, right = fig.subplots(3, 1)
        _time_panel(left, table, shapes, impls, op, cache_mode)
        _control_panel(middle, table, shapes, impls, control, op, cache_mode)
        _other_panel(right, table, shapes, impls, control, op, cache_mode)
        fig.tight_layout()
        _save(fig, out_svg)
        return layout(fig, drawn=True)


def _bar_offsets(count: int, width: float) -> list[float]:
    return [(i - (count - 1) / 2) * width for i in range(count)]


def _time_panel(ax: Any, table: Any, shapes: list[str], impls: list[str], op: str,
                cache_mode: str) -> None:
    width = 0.8 / len(impls)
    for impl, offset in zip(impls, _bar_offsets(len(impls), width), strict=True):
        times = _times(table, impl)
        xs = [i + offset for i, t in enumerate(times) if math.isfinite(t) and t > 0]
        ys = [t for t in times if math.isfinite(t) and t > 0]
        ax.bar(xs, ys, width=width, label=impl, color=COLORS[impl])
    drawn = [t for impl in impls for t in _times(table, impl) if math.isfinite(t) and t > 0]
    if drawn:
        _plain_log_axis(ax, min(drawn) / 1.6, max(drawn) * 1.6)
    ax.set_xticks(range(len(shapes)), shapes, rotation=15, ha="right")
    ax.set_ylabel("kernel time (µs, log scale)")
    ax.set_xlabel("shape")
    ax.set_title(f"{op}: kernel time (Nsight Systems), {cache_mode} cache")
    ax.legend(title="implementation", ncols=min(len(impls), 4))
    ax.grid(axis="y", which="both", alpha=0.3)


def _band(ax: Any, margin: float | None, vertical: bool = False) -> None:
    if margin is None:
        return
    label = f"same: 1 ± {margin * 100:g}%"
    if vertical:
        ax.axvspan(1 - margin, 1 + margin, color="#0969da", alpha=0.15, linewidth=0, label=label)
    else:
        ax.axhspan(1 - margin, 1 + margin, color="#0969da", alpha=0.15, linewidth=0, label=label)


def _series(ax: Any, table: Any, a: str, b: str, offset: float, color: str, kind: str) -> list[float]:
    """Draw a/b per shape at x + offset, with its interval where the table has one; returns every
    finite value drawn (ratios and interval ends)."""
    ratio, lo, hi = ratio_series(table, a, b)
    points = [(i + offset, r, lo[i], hi[i]) for i, r in enumerate(ratio) if math.isfinite(r)]
    with_interval = [p for p in points if math.isfinite(p[2]) and math.isfinite(p[3])]
    without = [p for p in points if p not in with_interval]
    if with_interval:
        ax.errorbar([p[0] for p in with_interval], [p[1] for p in with_interval],
                    yerr=[[max(p[1] - p[2], 0.0) for p in with_interval], [max(p[3] - p[1], 0.0) for p in with_interval]],
                    fmt="o", color=color, capsize=4, markersize=5, label=f"{a}/{b} ({kind})")
    if without:
        ax.plot([p[0] for p in without], [p[1] for p in without], "D", color=color, markersize=5,
                fillstyle="none", linestyle="none", label=f"{a}/{b} (no interval)")
    return [v for p in points for v in (p[1], p[2], p[3]) if math.isfinite(v)]


def _control_panel(ax: Any, table: Any, shapes: list[str], impls: list[str], control: str, op: str,
                   cache_mode: str) -> None:
    margin = table_margin(table)
    kind = "interval" if margin is not None else "envelope"
    _band(ax, margin)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label=f"{control} (= 1.0)")
    drawn: list[float] = []
    if OURS in impls and control in impls and OURS != control:
        drawn = _series(ax, table, OURS, control, 0.0, COLORS.get(OURS, "#1f77b4"), kind)
    if not any(math.isfinite(b) and b > 0 for b in _times(table, control)):
        ax.text(0.5, 0.5, f"no {control} times to compare against", transform=ax.transAxes, ha="center", va="center")
    low = min([*drawn, 1.0 - (margin or 0.0)])
    high = max([*drawn, 1.0 + (margin or 0.0)])
    pad = max((high - low) * 0.12, 0.005)
    ax.set_ylim(low - pad, high + pad)
    ax.set_xticks(range(len(shapes)), shapes, rotation=15, ha="right")
    ax.set_xlim(-0.6, len(shapes) - 0.4)
    ax.set_ylabel(f"{OURS} / {control} (< 1: faster)")
    ax.set_xlabel("shape")
    ax.set_title(f"{op}: ours over the control, {cache_mode} cache; error bars: {interval_label(table)}")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)


def _other_panel(ax: Any, table: Any, shapes: list[str], impls: list[str], control: str, op: str,
                 cache_mode: str) -> None:
    margin = table_margin(table)
    kind = "interval" if margin is not None else "envelope"
    pairs = [(a, b) for a, b in SWEEP_PAIRS if (a, b) != (OURS, control) and a in impls and b in impls]
    _band(ax, margin)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
    width = 0.5 / max(len(pairs), 1)
    drawn = []
    for (a, b), offset in zip(pairs, _bar_offsets(len(pairs), width), strict=True):
        drawn += _series(ax, table, a, b, offset, COLORS.get(a if b == "triton" else b, "#6e7781"), kind)
    if not drawn:
        ax.text(0.5, 0.5, "no other ratio in the table", transform=ax.transAxes, ha="center", va="center")
    else:
        # the axis holds every ratio drawn and the band of "same", with room in log space
        positive = [v for v in drawn if v > 0]
        low = min([*positive, 1.0 - (margin or 0.0)])
        high = max([*positive, 1.0 + (margin or 0.0)])
        _plain_log_axis(ax, low / 1.15, high * 1.15)
        ax.legend()
    ax.set_xticks(range(len(shapes)), shapes, rotation=15, ha="right")
    ax.set_xlim(-0.6, len(shapes) - 0.4)
    ax.set_ylabel("ratio (log scale; < 1: first faster)")
    ax.set_xlabel("shape")
    ax.set_title(f"{op}: other ratios, {cache_mode} cache; error bars: {interval_label(table)}")
    ax.grid(axis="y", which="both", alpha=0.3)


def overview_figure(sweep: Any, defaults: Mapping[str, str], out_svg: Path | str, control: str = "triton",
                    ours: str = "cuda", cache_mode: str = "hot",
                    not_ranked: Collection[tuple[str, str]] = ()) -> dict[str, Any]:
    """One SVG of every operation in `defaults` (op -> its default shape), top to bottom in that
    order: ours over the control at the default shape with its interval, a line at 1 and the band
    of 'same' where the table records a margin. An (op, shape) in `not_ranked` (its control was not
    rankable there) is drawn hollow and grey and labelled 'not ranked'; one without a ratio is
    named 'no ratio'. EvidenceError (one sentence) for no operation."""
    if not defaults:
        raise EvidenceError("The overview figure needs at least one operation.")
    rows: list[_Point] = []
    for op, shape in defaults.items():
        here = sweep[(sweep["op"] == op) & (sweep["shape"].astype(str) == str(shape))].reset_index(drop=True)
        r, lo, hi = ratio_series(here, ours, control) if not here.empty else ([math.nan], [math.nan], [math.nan])
        column = f"{ours}_vs_{control}"
        recorded = here[column].iloc[0] if not here.empty and column in here else None
        verdict = recorded if isinstance(recorded, str) else ""
        rows.append(_Point(label=f"{op}\n{shape}", ratio=r[0], lo=lo[0], hi=hi[0],
                           verdict="can't tell" if verdict == "no difference" else verdict,
                           ranked=(op, str(shape)) not in not_ranked))
    margin = table_margin(sweep)
    with _figure((11, 1.4 + 0.8 * len(rows))) as fig:
        ax = fig.subplots()
        _band(ax, margin, vertical=True)
        ax.axvline(1.0, color="black", linewidth=1, linestyle="--")
        finite = [v for row in rows for v in (row.ratio, row.lo, row.hi) if math.isfinite(v)]
        lo_x = min([*finite, 1.0 - (margin or 0.0)]) if finite else 0.9
        hi_x = max([*finite, 1.0 + (margin or 0.0)]) if finite else 1.1
        pad = max((hi_x - lo_x) * 0.15, 0.02)
        for y, row in enumerate(rows):
            value = row.ratio
            color = VERDICT_COLORS.get(row.verdict, "#6e7781") if row.ranked else "#8c959f"
            if math.isfinite(value):
                has = math.isfinite(row.lo) and math.isfinite(row.hi)
                err = [[max(value - row.lo, 0.0)], [max(row.hi - value, 0.0)]] if has else None
                ax.errorbar([value], [y], xerr=err, fmt="o", color=color, capsize=4, markersize=7,
                            fillstyle="full" if row.ranked else "none")
                text = f"{value:.3f}" + (f" [{row.lo:.3f}, {row.hi:.3f}]" if has else "")
                text += f" {row.verdict}" if row.ranked and row.verdict else ""
                text += "" if row.ranked else " not ranked"
            else:
                text = "no ratio"
            ax.annotate(text, xy=(1.03, y), xycoords=("axes fraction", "data"), va="center", fontsize=FONT_PT,
                        color=color, annotation_clip=False)
        ax.set_yticks(range(len(rows)), [row.label for row in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(lo_x - pad, hi_x + pad)
        ax.set_xlabel(f"{ours} kernel time / {control} kernel time (< 1: faster)")
        ax.set_title(f"Ours over the control at each default shape, {cache_mode} cache\n"
                     f"error bars: {interval_label(sweep)}"
                     + (f"; band: same within 1 ± {margin * 100:g}%" if margin is not None else ""))
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        fig.subplots_adjust(right=0.68)
        _save(fig, out_svg)
        return layout(fig, drawn=True)
