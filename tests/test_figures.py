"""The figures: valid SVGs drawn from the sweep table only, each ratio with the table's interval as
error bars (ours over the control on an axis zoomed so the band of "same" shows, where the table
records a margin), reproducible byte for byte for the same table, different for a different one;
and the overview of every operation's default shape."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from harness import ROOT
from harness.errors import EvidenceError
from harness.report import figures
from harness.report import html as page_tool
from harness.report.figures import overview_figure, sweep_figure
from harness.tables import history

NAN = math.nan
SHAPES = ["4096x768", "8192x768", "1024x2048", "4096x4096"]
SVG = "{http://www.w3.org/2000/svg}"


def table(external: bool = True, scale: float = 1.0, margin: float | None = 0.01) -> pd.DataFrame:
    """A sweep table of the current format (bootstrap intervals and a margin), or with margin None
    one of the older format (envelopes, no margin column)."""
    rows = []
    for i, shape in enumerate(SHAPES):
        cuda, triton = scale * (10.0 + 7 * i), 11.0 + 6 * i
        r = cuda / triton
        rows.append({"namespace": "t", "op": "layernorm", "shape": shape, "cache_mode": "hot",
                     "cuda_us": cuda, "triton_us": triton, "torch_us": 15.0 + 9 * i,
                     "external_us": 30.0 + i if external else NAN,
                     "cuda_over_triton": r, "cuda_over_triton_lo": r * (0.97 - 0.01 * i), "cuda_over_triton_hi": r * 1.02,
                     "cuda_vs_triton": "faster" if r * 1.02 < 1 else "can't tell",
                     "external_over_triton": (30.0 + i) / triton if external else NAN,
                     "external_over_triton_lo": (29.0 + i) / triton if external else NAN,
                     "external_over_triton_hi": (31.0 + i) / triton if external else NAN,
                     "margin": margin})
    rows.append({"namespace": "t", "op": "softmax", "shape": "1x1", "cache_mode": "hot", "cuda_us": 1.0, "triton_us": 1.0,
                 "torch_us": 1.0, "external_us": NAN, "cuda_over_triton": 1.0, "cuda_over_triton_lo": 0.995,
                 "cuda_over_triton_hi": 1.004, "cuda_vs_triton": "same", "margin": margin})
    frame = pd.DataFrame(rows)
    if margin is None:
        frame = frame.drop(columns=["margin"])
        frame["cuda_vs_triton"] = frame["cuda_vs_triton"].replace({"can't tell": "no difference", "same": "no difference"})
    return frame


def texts(svg: Path) -> list[str]:
    """The text of every <text> element (and its <tspan>s) of an SVG, which must parse as XML."""
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    return ["".join(el.itertext()) for el in root.iter() if el.tag.endswith("}text")]


def render(frame: pd.DataFrame, path: Path, **kwargs: Any) -> bytes:
    sweep_figure(frame, "layernorm", path, **kwargs)
    return path.read_bytes()


def test_svg_names_shapes_and_implementations(tmp_path: Path) -> None:
    svg = tmp_path / "figures" / "layernorm_sweep.svg"
    render(table(), svg, cache_mode="hot")
    found = texts(svg)
    for label in [*SHAPES, "cuda", "triton", "torch", "external"]:
        assert label in found, label
    assert "1x1" not in found  # another operation's shape
    titles = [t for t in found if "kernel time (Nsight Systems), hot cache" in t]
    assert titles and all(t.startswith("layernorm") for t in titles)
    tick_order = [t for t in found if t in SHAPES]
    assert tick_order[: len(SHAPES)] == SHAPES  # table order, left panel first


def test_ratios_carry_the_tables_interval_and_the_band_of_same(tmp_path: Path) -> None:
    svg = tmp_path / "new.svg"
    render(table(), svg)
    found = texts(svg)
    assert "same: 1 ± 1%" in found
    assert "cuda/triton (interval)" in found and "external/triton (interval)" in found
    assert "cuda/torch (no interval)" in found  # the table has no interval of it: drawn hollow, never estimated
    assert any("ours over the control" in t for t in found)
    assert any("error bars: 95% bootstrap interval over interleaved rounds" in t for t in found)
    ratio, lo, hi = figures.ratio_series(table()[table()["op"] == "layernorm"], "cuda", "triton")
    expected = table()[table()["op"] == "layernorm"]
    assert ratio == list(expected["cuda_over_triton"]) and lo == list(expected["cuda_over_triton_lo"])
    assert hi == list(expected["cuda_over_triton_hi"])
    old = tmp_path / "old.svg"
    render(table(margin=None), old)
    found = texts(old)
    assert not any(t.startswith("same:") for t in found)  # no margin in the table, no band
    assert "cuda/triton (envelope)" in found
    assert any("error bars: min-max envelope of the launches" in t for t in found)


def test_the_band_is_drawn_at_one_plus_and_minus_the_margin_and_shows(tmp_path: Path) -> None:
    """The band's rectangle spans 1 - margin to 1 + margin on the ratio axis, and the axis of ours
    over the control is zoomed to the intervals, so the band takes a visible part of it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.patches import Rectangle

    fig, ax = plt.subplots()
    try:
        figures._band(ax, 0.05)
        patch = ax.patches[0]
        assert isinstance(patch, Rectangle)
        assert patch.get_y() == pytest.approx(0.95) and patch.get_y() + patch.get_height() == pytest.approx(1.05)
    finally:
        plt.close(fig)
    fig, ax = plt.subplots()
    try:
        frame = table()
        frame = frame[frame["op"] == "layernorm"].reset_index(drop=True)
        figures._control_panel(ax, frame, SHAPES, ["cuda", "triton"], "triton", "layernorm", "hot")
        low, high = ax.get_ylim()
        assert (0.02 / (high - low)) > 0.05  # the 2% band is over a twentieth of the axis
        assert low < min(frame["cuda_over_triton_lo"]) and high > max(frame["cuda_over_triton_hi"])
    finally:
        plt.close(fig)


def test_same_table_same_bytes(tmp_path: Path) -> None:
    first = render(table(), tmp_path / "a.svg")
    second = render(table(), tmp_path / "b.svg")
    assert first == second
    assert b"<dc:date>" not in first


def test_different_table_different_bytes(tmp_path: Path) -> None:
    base = render(table(), tmp_path / "a.svg")
    assert render(table(scale=2.0), tmp_path / "b.svg") != base
    assert render(table(), tmp_path / "c.svg", cache_mode="cold") != base
    assert render(table(), tmp_path / "d.svg", control="torch") != base
    assert render(table(margin=0.02), tmp_path / "e.svg") != base


def test_missing_implementation_still_renders(tmp_path: Path) -> None:
    svg = tmp_path / "no_external.svg"
    render(table(external=False), svg)
    found = texts(svg)
    assert "external" not in found and "cuda" in found and "4096x4096" in found
    frame = table().drop(columns=["external_us"])
    frame.loc[frame["shape"] == "8192x768", "torch_us"] = NAN  # one missing time
    render(frame, tmp_path / "partial.svg")
    assert "torch" in texts(tmp_path / "partial.svg")


def test_missing_control_renders_a_note(tmp_path: Path) -> None:
    frame = table().assign(triton_us=NAN)
    svg = tmp_path / "no_control.svg"
    render(frame, svg, control="torch")
    render(frame.assign(torch_us=NAN), svg, control="torch")
    assert any("no torch times" in t for t in texts(svg))


def test_unknown_operation_refused(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="no rows for operation 'matmul'"):
        sweep_figure(table(), "matmul", tmp_path / "x.svg")


def test_overview_has_every_operation_at_its_default_shape(tmp_path: Path) -> None:
    svg = tmp_path / "overview.svg"
    frame = table()
    overview_figure(frame, {"layernorm": "8192x768", "softmax": "1x1"}, svg, not_ranked={("softmax", "1x1")})
    found = texts(svg)
    assert "layernorm\n8192x768" in found or ("layernorm" in found and "8192x768" in found)
    r = frame[frame["shape"] == "8192x768"].iloc[0]
    label = f"{r['cuda_over_triton']:.3f} [{r['cuda_over_triton_lo']:.3f}, {r['cuda_over_triton_hi']:.3f}] {r['cuda_vs_triton']}"
    assert label in found
    assert "1.000 [0.995, 1.004] not ranked" in found  # not ranked: its verdict is not shown
    assert any("band: same within 1 ± 1%" in t for t in found)
    text = svg.read_text()
    assert re.search(r"<dc:date>", text) is None
    again = tmp_path / "again.svg"
    overview_figure(frame, {"layernorm": "8192x768", "softmax": "1x1"}, again, not_ranked={("softmax", "1x1")})
    assert again.read_bytes() == svg.read_bytes()


def test_overview_of_an_older_table_and_a_missing_ratio(tmp_path: Path) -> None:
    svg = tmp_path / "old.svg"
    overview_figure(table(margin=None), {"layernorm": SHAPES[3], "softmax": "9x9"}, svg)
    found = texts(svg)
    assert "no ratio" in found
    assert any("error bars: min-max envelope of the launches" in t for t in found)
    assert not any("band:" in t for t in found)
    assert any(t.endswith("can't tell") for t in found)  # an older 'no difference' is read as can't tell
    with pytest.raises(EvidenceError, match="at least one operation"):
        overview_figure(table(), {}, tmp_path / "none.svg")


# ------------------------------------------------------------------------------ legible at the page's width


PLAIN = re.compile(r"^-?\d+(\.\d+)?$")


def assert_legible(lay: dict, svg: Path) -> None:
    """The text of the figure is at least figures.LEGIBLE_PX high on the page at a 1400 px window,
    every log axis is labelled in plain numbers (two or more inside its range), and the band of
    'same' lies inside the axis of every panel that draws one."""
    px = lay["min_font_pt"] * figures.page_scale(lay["width_pt"])
    assert px >= figures.LEGIBLE_PX, f"{svg.name}: smallest text {px:.1f} px at the page's width"
    assert figures.svg_text_px(svg.read_text()) == pytest.approx(px, rel=0.01)  # the SVG itself says the same
    for panel in lay["panels"]:
        lo, hi = panel["ylim"]
        if panel["yscale"] == "log":
            labels = panel["yticklabels"]
            assert len(labels) >= 2 and all(PLAIN.match(t) for t in labels), (svg.name, panel["title"], labels)
        if panel["band"] is not None:
            a, b = sorted(panel["ylim"] if panel["band_axis"] == "y" else panel["xlim"])
            assert a <= panel["band"][0] and panel["band"][1] <= b, (svg.name, panel["title"], (a, b))


COMMITTED_SWEEPS = sorted(p.parent.parent.name for p in (ROOT / "artifacts").glob("*/tables/sweep.csv"))


@pytest.mark.parametrize("name", COMMITTED_SWEEPS)
def test_every_committed_sweep_figure_is_legible_at_the_page_width(name: str, tmp_path: Path) -> None:
    sweep = history.read_table(ROOT / "artifacts" / name / "tables" / "sweep.csv")
    for op in dict.fromkeys(sweep["op"].astype(str)):
        svg = tmp_path / f"{op}.svg"
        if not any(sweep.loc[sweep["op"] == op, f"{i}_us"].notna().any() for i in figures.IMPLS if f"{i}_us" in sweep):
            continue
        assert_legible(sweep_figure(sweep, op, svg), svg)


def test_the_synthetic_and_overview_figures_are_legible(tmp_path: Path) -> None:
    svg = tmp_path / "sweep.svg"
    assert_legible(sweep_figure(table(), "layernorm", svg), svg)
    over = tmp_path / "overview.svg"
    assert_legible(overview_figure(table(), {"layernorm": SHAPES[0], "softmax": "1x1"}, over), over)


def test_the_legibility_check_fails_on_the_old_layout(tmp_path: Path) -> None:
    """Three panels across 17 in with 8 pt text, as the figures were drawn before: about 8 px at the
    page's width, which the check refuses; a log axis spanning less than a decade gets plain labels."""
    assert 8 * figures.page_scale(17 * 72) < figures.LEGIBLE_PX
    assert all(PLAIN.match(f"{t:g}") for t in figures.plain_log_ticks(0.55, 0.65))
    assert len(figures.plain_log_ticks(0.55, 0.65)) >= 3


def test_compact_rounds_coordinates_gives_each_style_once_and_drops_ids_nothing_names() -> None:
    svg = ('<svg width="10pt">\n <defs>\n  <style type="text/css">*{stroke-linecap: butt}</style>\n </defs>\n'
           ' <g id="a">\n  <path d="M 98.727273 111049.625696 \nL 134.779798 -0.0004 \nz\n" '
           'style="stroke-width: 1.234567"/>\n  <text transform="translate(98.511417 298.403786) rotate(-15)" '
           'style="font-size: 11px">1.03456</text>\n  <path d="M 0 0" style="stroke-width: 1.234567" clip-path="url(#c)"/>\n'
           '  <use xlink:href="#m1" x="12.5" y="7.123456" style="fill: red"/>\n </g>\n'
           ' <defs>\n  <path id="m1" d="M 0 0" style="stroke: blue"/>\n  <clipPath id="c"><rect/></clipPath>\n'
           '  <g id="unused"/>\n </defs>\n</svg>\n')
    out = figures.compact(svg)
    assert '<path d="M 98.73 111049.63 L 134.78 0 z" class="s0"/>' in out
    assert '<path d="M 0 0" class="s0" clip-path="url(#c)"/>' in out  # the same style, the same class
    assert '<text transform="translate(98.51 298.4) rotate(-15)" class="s1">1.03456</text>' in out
    assert '<use xlink:href="#m1" x="12.5" y="7.12" class="s2"/>' in out
    assert "<style type=\"text/css\">*{stroke-linecap: butt}.s0{stroke-width: 1.234567}.s1{font-size: 11px}" \
           ".s2{fill: red}</style>" in out
    assert '<path id="m1" d="M 0 0" style="stroke: blue"/>' in out  # what <use> clones keeps its style
    assert 'id="c"' in out and 'id="a"' not in out and 'id="unused"' not in out
    assert "\n <" not in out and figures.compact(out) == out
    # without a stylesheet of its own, the SVG gets one
    assert figures.compact('<svg a="1">\n<g style="fill: red"/>\n</svg>') == \
        '<svg a="1">\n<defs><style type="text/css">.s0{fill: red}</style></defs>\n<g class="s0"/>\n</svg>'


@pytest.mark.skipif(page_tool.chromium() is None, reason="Chromium is not installed (no chromium or chromium-browser "
                    "on PATH); apt-get install chromium to run this test")
def test_classes_and_ids_change_no_pixel_of_a_figure(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image, ImageChops

    shots = []
    for name, shrink in (("rounded", figures.rounded), ("compact", figures.compact)):
        monkeypatch.setattr(figures, "compact", shrink)
        svg = tmp_path / f"{name}.svg"
        render(table(), svg)
        shots.append(Image.open(page_tool.screenshot(svg, tmp_path / f"{name}.png", 1100, 1400)).convert("RGB"))
    assert len(svg.read_text()) < 0.8 * len((tmp_path / "rounded.svg").read_text())
    assert ImageChops.difference(*shots).getbbox() is None


def test_a_written_figure_is_compact_and_parses(tmp_path: Path) -> None:
    import xml.dom.minidom

    text = render(table(), tmp_path / "f.svg").decode()
    xml.dom.minidom.parseString(text)
    assert figures.compact(text) == text and not re.search(r'd="[^"]*\d\.\d{3}', text)
