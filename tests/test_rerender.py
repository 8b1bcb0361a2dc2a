"""`python -m harness rerender`: committed namespaces' reports rendered again from their own tables,
every table left byte for byte, the command added to provenance and to the report's history.
Real retained namespaces stand in (copied to a temporary folder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness import ROOT
from harness.__main__ import main as cli
from harness.errors import EvidenceError
from harness.evidence import rerender
from harness.report import summary
from harness.report.render import output_paths, render_namespace, table_inputs

REPORTED, OTHER, ONE_SWEEP = "h200-ops-solo-1", "h200-ops-1", "h200-matmul-tile128-1"


def copy(tmp: Path, *names: str) -> tuple[Path, Path]:
    art, rep = tmp / "artifacts", tmp / "report"
    for name in names:
        shutil.copytree(ROOT / "artifacts" / name, art / name)
        if (ROOT / "report" / name).is_dir():
            shutil.copytree(ROOT / "report" / name, rep / name)
    return art, rep


def files(*roots: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for root in roots for p in sorted(root.rglob("*")) if p.is_file()}


def with_commands(art: Path, name: str, *entries: object) -> list[object]:
    """Make `entries` the records of the namespace's provenance; return them."""
    path = art / name / "provenance.json"
    prov = json.loads(path.read_text())
    prov["commands"] = list(entries)
    path.write_text(json.dumps(prov, indent=1) + "\n")
    return list(entries)


SNAKEMAKE = {"command": "snakemake report --cores 1", "start": "2026-12-01T10:00:00+00:00", "jobs": 16,
             "end": "2026-12-01T10:02:00+00:00", "status": "success", "seconds": 120.0}


def test_reports_are_rendered_from_the_tables_and_the_tables_stay(tmp_path: Path) -> None:
    art, rep = copy(tmp_path, REPORTED)
    tables = files(art / REPORTED / "tables")
    before = with_commands(art, REPORTED, SNAKEMAKE)
    (rep / REPORTED / "field_note.md").write_text("stale\n")
    (rep / REPORTED / "issue_comment.md").unlink()
    assert cli(["rerender", REPORTED, "--artifacts", str(art), "--reports", str(rep), "--rewrite-retained"]) == 0
    assert files(art / REPORTED / "tables") == tables
    commands = json.loads((art / REPORTED / "provenance.json").read_text())["commands"]
    assert commands[:-1] == before
    added = commands[-1]
    assert added["command"] == f"python -m harness rerender {REPORTED} --rewrite-retained"
    assert "no table changed" in added["note"]
    note = (rep / REPORTED / "field_note.md").read_text()
    assert note != "stale\n" and f"- {added['command']} (started {added['start']})" in note
    assert (rep / REPORTED / "issue_comment.md").is_file()


def test_the_same_rerender_in_a_row_is_one_record_counted(tmp_path: Path) -> None:
    """Each re-render rewrites everything the one before it wrote: run again in a row, it replaces
    that record (`times` 2) instead of adding one, and the history says so; a snakemake command
    before it stays as it was."""
    art, rep = copy(tmp_path, REPORTED)
    before = with_commands(art, REPORTED, SNAKEMAKE)
    args = ["rerender", REPORTED, "--artifacts", str(art), "--reports", str(rep), "--rewrite-retained"]
    for _ in range(2):
        (rep / REPORTED / "field_note.md").write_text("stale\n")
        assert cli(args) == 0
    commands = json.loads((art / REPORTED / "provenance.json").read_text())["commands"]
    assert commands[:-1] == before and commands[-2] == SNAKEMAKE
    assert commands[-1]["command"] == f"python -m harness rerender {REPORTED} --rewrite-retained"
    assert commands[-1]["times"] == 2
    note = (rep / REPORTED / "field_note.md").read_text()
    assert f"- {commands[-1]['command']} (2 times in a row, the last started {commands[-1]['start']})" in note
    written = json.loads((art / REPORTED / "summary.json").read_text())
    assert written["provenance"]["commands"][-1]["times"] == 2
    assert written["provenance"]["commands"][-2]["times"] == 1


def test_records_in_a_row_already_kept_are_counted_when_the_provenance_is_written(tmp_path: Path) -> None:
    """Re-renders written before records were counted (one record each) become one record too, at
    the next write; the report shows them as one before that."""
    art, rep = copy(tmp_path, REPORTED)
    command = f"python -m harness rerender {REPORTED} --rewrite-retained"
    old = [{"command": command, "start": f"2026-12-0{d}T10:00:00+00:00", "host": "vm",
            "note": "reports re-rendered from the namespace's own tables; no table changed"} for d in (1, 2, 3)]
    with_commands(art, REPORTED, SNAKEMAKE, *old)
    shown = summary.commands({"commands": [SNAKEMAKE, *old]})  # what the report lists before any write
    assert [c["times"] for c in shown] == [1, 3] and shown[1]["start"] == old[-1]["start"]
    (rep / REPORTED / "field_note.md").write_text("stale\n")
    assert cli(["rerender", REPORTED, "--artifacts", str(art), "--reports", str(rep), "--rewrite-retained"]) == 0
    commands = json.loads((art / REPORTED / "provenance.json").read_text())["commands"]
    assert len(commands) == 2 and commands[0] == SNAKEMAKE
    assert commands[1]["times"] == 4 and commands[1]["start"] > old[-1]["start"]


def test_a_namespace_whose_reports_are_current_is_left_alone(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Rendered once, a namespace renders the same again: the second rerender writes nothing, not
    even a line of provenance."""
    art, rep = copy(tmp_path, REPORTED)
    (rep / REPORTED / "field_note.md").write_text("stale\n")
    args = ["rerender", REPORTED, "--artifacts", str(art), "--reports", str(rep), "--rewrite-retained"]
    assert cli(args) == 0
    assert capsys.readouterr().out.strip() == f"rerender: {REPORTED}: rendered from its tables."
    before = files(art, rep)
    assert cli(args) == 0
    assert capsys.readouterr().out.strip() == f"rerender: {REPORTED}: unchanged."
    assert files(art, rep) == before


def test_all_renders_every_reported_namespace_and_names_those_passed_over(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    art, rep = copy(tmp_path, REPORTED, OTHER, ONE_SWEEP)
    for name in (REPORTED, OTHER):
        (rep / name / "field_note.md").write_text("stale\n")
    one_sweep = files(art / ONE_SWEEP)
    assert cli(["rerender", "--all", "--artifacts", str(art), "--reports", str(rep), "--rewrite-retained"]) == 0
    out = capsys.readouterr().out
    assert f"passed over 1 without a report (one sweep each): {ONE_SWEEP}." in out
    for name in (REPORTED, OTHER):
        assert f"rerender: {name}: rendered from its tables." in out
        assert (rep / name / "field_note.md").read_text() != "stale\n"
    assert files(art / ONE_SWEEP) == one_sweep and not (rep / ONE_SWEEP).exists()


def test_namespaces_render_side_by_side_into_what_one_process_writes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two worker processes (--jobs 2): both stale namespaces rewritten, the lines in the
    namespaces' order, and each ends as this code renders it from its tables and its new provenance,
    its figures too (drawn once, in the temporary folder, then moved into place)."""
    art, rep = copy(tmp_path, REPORTED, OTHER)
    for name in (REPORTED, OTHER):
        (rep / name / "field_note.md").write_text("stale\n")
        next((rep / name / "figures").glob("*_sweep.svg")).write_text("<svg/>\n")
    assert cli(["rerender", OTHER, REPORTED, "--artifacts", str(art), "--reports", str(rep), "--rewrite-retained",
                "--jobs", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"rerender: {OTHER}: rendered from its tables.",
                                                    f"rerender: {REPORTED}: rendered from its tables."]
    for name in (REPORTED, OTHER):
        provenance = json.loads((art / name / "provenance.json").read_text())
        assert provenance["commands"][-1]["command"] == f"python -m harness rerender {name} --rewrite-retained"
        assert rerender.renders_as_it_is(name, art / name, provenance, rep)
        assert all(f.read_text() != "<svg/>\n" for f in (rep / name / "figures").glob("*.svg"))


def test_figures_said_to_be_drawn_must_be_there(tmp_path: Path) -> None:
    """A render that links figures already drawn (draw=False) stops in one sentence where one is
    not there, before writing anything."""
    art, rep = copy(tmp_path, REPORTED)
    cfg = json.loads((art / REPORTED / "provenance.json").read_text())["config"]
    out = output_paths(REPORTED, list(cfg["operations"]), tmp_path / "out" / "artifacts", tmp_path / "out" / "report")
    with pytest.raises(EvidenceError) as err:
        render_namespace(cfg, table_inputs(art / REPORTED), out, draw=False)
    assert str(err.value).startswith("Asked to link figures already drawn, but none is at ")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, says", [
    ([REPORTED], f"namespace {REPORTED} is retained evidence"),  # no --rewrite-retained
    ([REPORTED, ONE_SWEEP, "--rewrite-retained"], f"{ONE_SWEEP} has no tables/sweep.csv"),
    (["--rewrite-retained"], "name the namespaces to render, or pass --all"),
    ([REPORTED, "--all", "--rewrite-retained"], "name the namespaces to render, or pass --all"),
    ([REPORTED, "--rewrite-retained", "--jobs", "0"], "--jobs 0 renders nothing"),
])
def test_a_refusal_is_one_sentence_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:
    art, rep = copy(tmp_path, REPORTED, ONE_SWEEP)
    before = files(art, rep)
    assert cli(["rerender", *args, "--artifacts", str(art), "--reports", str(rep)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith(".") and says in err, err
    assert files(art, rep) == before
