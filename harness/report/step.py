"""The report stage's workflow step that renders: the two reports, the page, the figures and the
summary. workflow/scripts/render.py calls it; the provenance rule calls
harness.report.provenance.write, which needs none of the rendering's imports (a second of a
job's start)."""

from __future__ import annotations

from typing import Any

from harness.report.render import render_namespace


def render(cfg: dict[str, Any], inputs: dict[str, str], outputs: dict[str, Any]) -> None:
    """Both reports, the page, the figures and the summary (render.output_paths' keys)."""
    render_namespace(cfg, inputs, outputs)
