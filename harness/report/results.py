"""What Snakemake's own report (`snakemake --report report.html`) shows as a run's results: the
rules declare these outputs with `report(...)`, each with its caption (workflow/report/*.rst) and
category, so the choice lives here and the rules only name it."""

from __future__ import annotations

from harness import ROOT

CAPTIONS = ROOT / "workflow" / "report"
"""The captions (reStructuredText), one per result, and workflow.rst for the report's front page."""

TABLES = ("kernel_time", "sweep", "check")
"""The main tables of the tables rule shown as results; the trust rule adds controls and drift, the
targets rule targets."""

CATEGORY = {"field_note": "Report", "page": "Report", "summary": "Report", "overview": "Figures",
            "sweep_figure": "Figures", "kernel_time": "Tables", "sweep": "Tables", "check": "Tables",
            "controls": "Tables", "drift": "Tables", "targets": "Tables"}


def caption(name: str) -> str:
    """The caption file of a result (a path relative to nothing: Snakemake reads it as given)."""
    if name not in CATEGORY:
        raise KeyError(f"no result named {name!r}")
    return str(CAPTIONS / f"{name}.rst")


def category(name: str) -> str:
    return CATEGORY[name]


WORKFLOW_CAPTION = str(CAPTIONS / "workflow.rst")
