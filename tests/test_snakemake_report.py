"""Snakemake's own report after the stand-in CPU run of the main command (the `pipeline` fixture,
tests/repo_copy.py): `snakemake --report report.html` and `--report report.zip` give the field
note, the page, the figures, the summary and the main tables as its results (declared with
`report()` in the rules, harness/report/results.py), the rule graph and every job's run time."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest
import repo_copy

from harness.report import results

NS = repo_copy.PIPELINE_NS
RESULTS = {
    "field_note.md": f"report/{NS}/field_note.md", "index.html": f"report/{NS}/index.html",
    "overview.svg": f"report/{NS}/figures/overview.svg", "layernorm_sweep.svg": f"report/{NS}/figures/layernorm_sweep.svg",
    "summary.json": f"artifacts/{NS}/summary.json",
    **{f"{t}.csv": f"artifacts/{NS}/tables/{t}.csv" for t in (*results.TABLES, "controls", "drift")},
}
"""Every result the report must hold: its file name in the report -> the file the run wrote."""


@pytest.fixture(scope="module")
def run(pipeline):  # type: ignore[no-untyped-def]
    copy, env, proc = pipeline
    assert proc.returncode == 0, proc.stderr[-3000:]
    return copy, env


def _spec(page: str, name: str) -> dict:
    """The Vega spec Snakemake embeds as `var <name>_spec = {...};`."""
    m = re.search(rf"var {name}_spec = (\{{.*?\}});\n", page, flags=re.DOTALL)
    assert m, f"no {name} in the report"
    return json.loads(m.group(1))


def test_the_html_report_holds_the_results_the_rule_graph_and_the_run_times(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    copy, env = run
    out = tmp_path / "report.html"
    proc = repo_copy.snakemake(copy, env, "--report", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = out.read_text()
    runtimes = {v["rule"] for v in _spec(page, "runtimes")["data"]["values"]}
    assert {"build", "measure", "tables", "trust", "render"} <= runtimes
    graph = json.dumps(_spec(page, "rulegraph"))
    for rule in ("measure", "tables", "trust", "render"):
        assert f'"{rule}"' in graph, rule
    for name in RESULTS:
        assert name in page, name
    assert NS in page  # workflow.rst names the namespace


def test_the_zip_report_carries_every_result_as_the_run_wrote_it(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    copy, env = run
    out = tmp_path / "report.zip"
    proc = repo_copy.snakemake(copy, env, "--report", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    with zipfile.ZipFile(out) as z:
        raw = {Path(n).name: n for n in z.namelist() if "/data/raw/" in n}
        assert set(RESULTS) <= set(raw), sorted(set(RESULTS) - set(raw))
        for name, path in RESULTS.items():
            assert z.read(raw[name]) == (copy / path).read_bytes(), name
        assert any(n.endswith("report.html") for n in z.namelist())


def test_every_result_has_a_caption_and_a_category() -> None:
    for name in results.CATEGORY:
        assert Path(results.caption(name)).is_file(), name
    assert Path(results.WORKFLOW_CAPTION).is_file()
    with pytest.raises(KeyError):
        results.caption("nothing")
