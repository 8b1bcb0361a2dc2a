"""The report stage's workflow steps: the namespace's provenance and its two rendered reports.

workflow/scripts/ call these, one function per rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.io import write_json
from harness.report.provenance import collect
from harness.report.render import render_reports
from harness.tables import derive


def provenance(cfg: dict[str, Any], capture_metas: list[str], commands_file: str, out: str) -> None:

    write_json(collect(cfg, [json.loads(Path(p).read_text()) for p in capture_metas if derive.measured_file(p)], commands_file), out)


def render(cfg: dict[str, Any], inputs: dict[str, str], field_note: str, issue_comment: str, figures: list[str]) -> None:

    render_reports(cfg, inputs, field_note, issue_comment, figures)
