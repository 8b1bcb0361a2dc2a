"""A namespace's page (`report/<ns>/index.html`) rendered on its own, and looked at in headless
Chromium: its DOM, and a screenshot.

    python -m harness.report.html NAMESPACE [--artifacts DIR] [--out DIR] [--screenshot PNG]
                                            [--width 1280] [--height 2000]

renders the page of `artifacts/NAMESPACE/` (its tables and provenance, with the configuration the
provenance records) into `--out` (default: a new temporary folder, printed; never the committed
report/ folder), with its figures inlined, and with `--screenshot` saves a PNG of it as headless
Chromium draws it at that window size. The page itself is written by
harness.report.render.render_reports (`html=`); nothing here changes what it holds.

Chromium runs headless with no sandbox, no GPU, no background networking, no component updates,
no sync, no first-run setup and a throw-away profile; the page's own Content-Security-Policy
forbids it to fetch anything.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import ROOT
from harness.errors import EvidenceError
from harness.report import render

BROWSERS = ("chromium", "chromium-browser")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars")
TIMEOUT_S = 120.0


def chromium() -> str | None:
    """The path of a Chromium on PATH, or None."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(page: Path, *args: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    browser = chromium()
    if browser is None:
        raise EvidenceError("No Chromium on PATH (looked for chromium and chromium-browser); install it, e.g. "
                            "apt-get install chromium, to look at a page.")
    if not Path(page).is_file():
        raise EvidenceError(f"There is no page at {page}.")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        try:
            done = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args,
                                   Path(page).resolve().as_uri()],
                                  capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise EvidenceError(f"Chromium did not finish with {page} within {timeout:g} s.") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise EvidenceError(f"Chromium exited with status {done.returncode} on {page} ({last[:200]}).")
    return done


def dump_dom(page: str | Path, width: int | None = None, height: int = 2000) -> str:
    """The DOM of the page as headless Chromium parsed it (serialised HTML), its scripts run; with
    `width`, laid out in a window of width x height."""
    size = [f"--window-size={width},{height}"] if width else []
    return _run(Path(page), "--dump-dom", *size).stdout


def screenshot(page: str | Path, png: str | Path, width: int = 1280, height: int = 2000) -> Path:
    """A PNG of the page at width x height as headless Chromium draws it; EvidenceError (one
    sentence) where Chromium is missing or writes no image."""
    out = Path(png).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    _run(Path(page), f"--screenshot={out}", f"--window-size={width},{height}")
    if not out.is_file() or out.stat().st_size == 0:
        raise EvidenceError(f"Chromium wrote no screenshot of {page} to {out}.")
    return out


def render_page(ns_dir: str | Path, out_dir: str | Path) -> Path:
    """Render the namespace folder's reports into `out_dir` (field note, issue comment, figures and
    index.html) with the configuration its provenance records; returns the page's path."""
    ns_dir, out_dir = Path(ns_dir), Path(out_dir)
    prov = ns_dir / "provenance.json"
    if not prov.is_file():
        raise EvidenceError(f"{ns_dir} has no provenance.json, so the configuration of its tables is unknown.")
    cfg = json.loads(prov.read_text()).get("config")
    if not isinstance(cfg, dict) or "operations" not in cfg:
        raise EvidenceError(f"The provenance of {ns_dir.name} holds no configuration with operations.")
    figures = [str(out_dir / "figures" / f"{op}_sweep.svg") for op in cfg["operations"]]
    page = out_dir / "index.html"
    render.render_reports(cfg, render.table_inputs(ns_dir), out_dir / "field_note.md", out_dir / "issue_comment.md",
                          figures, html=page, overview=out_dir / "figures" / "overview.svg")
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report.html", description=__doc__.splitlines()[0])
    parser.add_argument("namespace")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    parser.add_argument("--out", default=None, help="folder to render into (default: a new temporary folder)")
    parser.add_argument("--screenshot", default=None, help="PNG to save the page's screenshot to")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=2000)
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix=f"page-{args.namespace}-"))
    try:
        page = render_page(Path(args.artifacts) / args.namespace, out)
        print(page)
        if args.screenshot:
            print(screenshot(page, args.screenshot, args.width, args.height))
    except EvidenceError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
