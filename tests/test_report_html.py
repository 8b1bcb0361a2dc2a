"""The page (report/<ns>/index.html): one self-contained HTML file from the same context as the
markdown, its figures inlined, nothing fetched from anywhere, every measured string inert; and the
same page as a real headless Chromium parses and draws it."""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_report import HOSTILE, NS, SHAPES, build_namespace, copy_namespace, small_config

from harness.report import figures
from harness.report import html as page_tool
from harness.report import render as report

FETCHING = {"img", "script", "link", "iframe", "frame", "object", "embed", "audio", "video", "source", "track",
            "image", "picture", "base", "form", "input", "meta-refresh", "foreignobject", "use-external"}


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text of <style> elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.styles: list[str] = []
        self._in_style = False
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        (self.styles if self._in_style else self.text).append(data)


def parse(text: str) -> Elements:
    e = Elements()
    e.feed(text)
    return e


def render_page(root: Path, cfg: dict[str, Any] | None = None, **kw: Any) -> tuple[Path, dict[str, Any]]:
    cfg = cfg or small_config()
    inputs = build_namespace(root, cfg, **kw)
    out = root / "report" / NS
    report.render_reports(cfg, inputs, out / "field_note.md", out / "issue_comment.md",
                          [str(out / "figures" / f"{op}_sweep.svg") for op in cfg["operations"]],
                          html=out / "index.html", overview=out / "figures" / "overview.svg")
    return out / "index.html", cfg


def local_link(target: str) -> bool:
    """The only links a page may hold: its own anchors, the guide to reading it and the kernel
    notebooks, each relative to report/<namespace>/ in the checkout."""
    return (target.startswith("#") or target == report.READING_LINK
            or re.fullmatch(r"\.\./\.\./kernels/[a-z][a-z0-9_]*/notebook\.md", target) is not None)


def assert_self_contained(text: str) -> Elements:
    e = parse(text)
    for tag, attrs in e.tags:
        assert tag not in FETCHING, tag
        assert "src" not in attrs and "srcset" not in attrs, (tag, attrs)
        assert not re.search(r"url\((?!#)|@import|expression\(", " ".join(str(v) for v in attrs.values())), (tag, attrs)
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        for name in ("href", "xlink:href"):
            target = attrs.get(name)
            if target is not None:
                assert local_link(target), (tag, target)
    styles = "".join(e.styles)
    assert "url(" not in styles and "@import" not in styles and "@font-face" not in styles
    csp = [a for t, a in e.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    content = csp[0].get("content") if csp else None
    assert content is not None and content.startswith("default-src 'none'")
    assert "http://" not in text and "https://" not in text
    return e


def test_the_page_is_self_contained_and_holds_the_summary_and_every_figure(tmp_path: Path) -> None:
    page, cfg = render_page(tmp_path)
    text = page.read_text()
    e = assert_self_contained(text)
    ids = [a.get("id") for _, a in e.tags if a.get("id")]
    assert "summary" in ids and "figure-overview" in ids and "figure-layernorm" in ids
    assert len(ids) == len(set(ids)), "two elements share an id (the inlined figures must not)"
    assert text.count("<svg") == len(cfg["operations"]) + 1
    note = (page.parent / "field_note.md").read_text()
    claim = next(line for line in note.splitlines() if line.startswith(f"- **layernorm {SHAPES[0]}**"))
    found = re.search(r"cuda/triton (\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\])", claim)
    assert found is not None, claim
    ratio = found.group(1)
    assert f"cuda/triton {ratio}, <span class=\"verdict v-faster\">faster</span>" in text
    assert [t for t, _ in e.tags].count("details") == 1 + 6
    assert f'<a href="{report.READING_LINK}">docs/reading-a-report.md</a>' in text


def test_hostile_strings_are_text_in_the_page(tmp_path: Path) -> None:
    cfg = small_config()
    for block in cfg["operations"]["layernorm"]["variants"].values():
        block["description"] = HOSTILE
    page, _ = render_page(tmp_path, cfg, kernel=HOSTILE, specialization=HOSTILE, reason=HOSTILE, flags_text=HOSTILE,
                          failed={("layernorm", SHAPES[1], "triton"): HOSTILE}, disturbed=[("layernorm", SHAPES[2])])
    text = page.read_text()
    e = parse(text)
    assert not [t for t, _ in e.tags if t in ("img", "script")]
    links = [a.get("href") for t, a in e.tags if t == "a"]
    assert all(h is not None and local_link(h) for h in links)
    assert "\x1b" not in text and "\u202e" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "\\x1b[31m" in "".join(e.text) and "\\u202eevil" in "".join(e.text)
    assert "![x](https://evil.example/beacon.png)" in "".join(e.text)  # shown as the text it is, never fetched


def test_an_older_namespace_renders_a_page(tmp_path: Path) -> None:
    art = copy_namespace("h200-ops-3", tmp_path)
    page = page_tool.render_page(art, tmp_path / "page")
    text = page.read_text()
    assert_self_contained(text)
    assert "the min–max envelope of the launches" in text
    assert text.count("<svg") == 6


def _png_size(png: Path) -> tuple[int, int]:
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@pytest.mark.skipif(page_tool.chromium() is None, reason="Chromium is not installed (no chromium or chromium-browser "
                    "on PATH); apt-get install chromium to run this test")
def test_chromium_finds_the_summary_and_every_figure_and_draws_the_page(tmp_path: Path) -> None:
    page, cfg = render_page(tmp_path / "ns")
    dom = page_tool.dump_dom(page)
    e = parse(dom)
    ids = {a.get("id"): t for t, a in e.tags if a.get("id")}
    assert ids.get("summary") == "section"
    for op in [*cfg["operations"], "overview"]:
        fig = f"figure-{op}"
        assert ids.get(fig) == "figure", fig
        after = dom.split(f'id="{fig}"', 1)[1]
        assert after.index("<svg") < after.index("</figure>"), fig
    assert "img" not in {t for t, _ in e.tags}
    assert "Claims at the default shapes" in dom and "Verdicts across the shapes" in dom
    png = page_tool.screenshot(page, tmp_path / "shots" / "page.png", 1400, 2000)
    assert png.stat().st_size > 10_000
    assert _png_size(png) == (1400, 2000)
    assert_figures_legible_at(page, 1400, [*cfg["operations"], "overview"])


MEASURE = """<pre id="measured"></pre><script>
const out = {};
for (const fig of document.querySelectorAll("figure")) {
  const svg = fig.querySelector("svg");
  if (!svg) continue;
  const shown = svg.getBoundingClientRect().width, box = svg.viewBox.baseVal.width;
  const sizes = [...svg.querySelectorAll("text")].map(t => parseFloat(getComputedStyle(t).fontSize)).filter(v => v > 0);
  out[fig.id] = {shown: shown, box: box, min_font: Math.min(...sizes), text_px: Math.min(...sizes) * shown / box};
}
document.getElementById("measured").textContent = JSON.stringify(out);
</script>"""


def assert_figures_legible_at(page: Path, width: int, names: list[str]) -> None:
    """Every figure's smallest text as Chromium lays the page out in a window `width` px wide: its
    font size in the SVG's units times the width the page gives the SVG over its viewBox, at least
    figures.LEGIBLE_PX; and the same number figures.svg_text_px computes from the SVG alone."""
    probe = page.with_name("measure.html")
    text = page.read_text().replace("style-src 'unsafe-inline'", "style-src 'unsafe-inline'; script-src 'unsafe-inline'")
    probe.write_text(text.replace("</body>", MEASURE + "</body>"))  # the page runs no script: only this copy
    dom = page_tool.dump_dom(probe, width=width)
    measured = json.loads(html.unescape(dom.split('<pre id="measured">', 1)[1].split("</pre>", 1)[0]))
    for name in names:
        m = measured[f"figure-{name}"]
        assert m["text_px"] >= figures.LEGIBLE_PX, f"{name}: smallest text {m['text_px']:.1f} px at {width} px"
        svg = page.parent / "figures" / ("overview.svg" if name == "overview" else f"{name}_sweep.svg")
        assert figures.svg_text_px(svg.read_text(), m["shown"]) == pytest.approx(m["text_px"], rel=0.01)


@pytest.mark.skipif(page_tool.chromium() is None, reason="Chromium is not installed (no chromium or chromium-browser "
                    "on PATH); apt-get install chromium to run this test")
def test_the_command_line_renders_a_committed_namespace_and_its_screenshot(tmp_path: Path) -> None:
    art = copy_namespace("h200-ops-3", tmp_path)
    png = tmp_path / "ops-3.png"
    code = page_tool.main(["h200-ops-3", "--artifacts", str(art.parent), "--out", str(tmp_path / "out"),
                           "--screenshot", str(png)])
    assert code == 0 and (tmp_path / "out" / "index.html").is_file()
    assert _png_size(png) == (1280, 2000) and png.stat().st_size > 10_000


def test_a_missing_browser_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    (tmp_path / "p.html").write_text("<!DOCTYPE html><title>x</title>")
    with pytest.raises(page_tool.EvidenceError, match=r"^No Chromium on PATH .*\.$"):
        page_tool.screenshot(tmp_path / "p.html", tmp_path / "p.png")


def test_an_svg_that_reaches_outside_is_not_inlined() -> None:
    with pytest.raises(page_tool.EvidenceError, match="not inlined"):
        report.inline_svg('<svg><image href="https://evil.example/x.png"/></svg>', "f")
    with pytest.raises(page_tool.EvidenceError, match="not inlined"):
        report.inline_svg("<svg><script>alert(1)</script></svg>", "f")
    out = report.inline_svg('<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><g id="a"/>'
                            '<use xlink:href="#a"/><path clip-path="url(#a)"/></svg>', "f0")
    assert 'id="f0-a"' in out and 'href="#f0-a"' in out and "url(#f0-a)" in out and "http" not in out
    # a figure's classes and the rules that name them, prefixed: an inlined stylesheet holds for the whole page
    out = report.inline_svg('<svg><defs><style>*{stroke: none}.s0{fill: #ffffff}.s1{stroke-width: 0.8}</style></defs>'
                            '<g class="s0"/><path class="s1 s0"/></svg>', "f1")
    assert "*{stroke: none}.f1-s0{fill: #ffffff}.f1-s1{stroke-width: 0.8}" in out
    assert '<g class="f1-s0"/><path class="f1-s1 f1-s0"/>' in out
