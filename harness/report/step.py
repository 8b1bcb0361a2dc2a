"""The report stage's workflow steps: the namespace's provenance and its two rendered reports.

workflow/scripts/ call these, one function per rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.io import write_json
from harness.report.provenance import collect
from harness.report.render import render_namespace


def provenance(cfg: dict[str, Any], records: list[str], commands_file: str, out: str) -> None:
    write_json(collect(cfg, [json.loads(Path(p).read_text()) for p in records], commands_file), out)


def render(cfg: dict[str, Any], inputs: dict[str, str], outputs: dict[str, Any]) -> None:
    """Both reports, the page, the figures and the summary (render.output_paths' keys)."""
    render_namespace(cfg, inputs, outputs)
