"""`python -m harness retrust`: a namespace's control bands and drift re-derived on the CPU once an
earlier namespace is retained, with the reports re-rendered and the command added to provenance.
Real H200 namespaces stand in: h200-ops-solo-1 was measured minutes after h200-ops-1, on a copy
of the tree that lacked h200-ops-1's tables."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness import ROOT
from harness.__main__ import main as cli

LATER, EARLIER, OLDER = "h200-ops-solo-1", "h200-ops-1", "h200-validate-1"


def retained_copy(tmp: Path, *names: str) -> tuple[Path, Path]:
    art, rep = tmp / "artifacts", tmp / "report"
    for name in names:
        shutil.copytree(ROOT / "artifacts" / name, art / name)
        shutil.copytree(ROOT / "report" / name, rep / name)
    return art, rep


def test_a_namespace_retained_later_enters_the_bands_and_the_drift(tmp_path: Path) -> None:
    art, rep = retained_copy(tmp_path, OLDER, LATER)
    before = json.loads((art / LATER / "provenance.json").read_text())["commands"]
    assert cli(["retrust", LATER, "--artifacts", str(art), "--reports", str(rep)]) == 0
    without = pd.read_csv(art / LATER / "tables" / "controls.csv")
    assert not without["namespaces"].fillna("").str.contains(EARLIER).any()
    assert set(pd.read_csv(art / LATER / "tables" / "drift.csv")["earlier"]) == {OLDER}

    shutil.copytree(ROOT / "artifacts" / EARLIER, art / EARLIER)
    assert cli(["retrust", LATER, "--artifacts", str(art), "--reports", str(rep)]) == 0
    controls = pd.read_csv(art / LATER / "tables" / "controls.csv")
    assert controls["namespaces"].str.contains(EARLIER).all()  # every default shape was measured there too
    drift = pd.read_csv(art / LATER / "tables" / "drift.csv")
    assert set(drift["earlier"]) == {EARLIER}
    note = (rep / LATER / "field_note.md").read_text()
    assert f"Drift against `{EARLIER}`" in note
    commands = json.loads((art / LATER / "provenance.json").read_text())["commands"]
    assert commands[0].split(" ", 1)[1].startswith("snakemake report")  # the run's own command stays first
    assert commands[:len(before)] == before and len(commands) == len(before) + 2
    assert all(f"python -m harness retrust {LATER}" in c for c in commands[len(before):])


def test_measured_tables_are_left_as_they_were(tmp_path: Path) -> None:
    art, rep = retained_copy(tmp_path, EARLIER, LATER)
    before = {p.name: p.read_bytes() for p in (art / LATER / "tables").glob("*.csv")}
    cli(["retrust", LATER, "--artifacts", str(art), "--reports", str(rep)])
    after = {p.name: p.read_bytes() for p in (art / LATER / "tables").glob("*.csv")}
    changed = {name for name in before if before[name] != after[name]}
    assert changed <= {"controls.csv", "drift.csv"}


def test_a_namespace_without_provenance_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "artifacts" / "bare" / "tables").mkdir(parents=True)
    assert cli(["retrust", "bare", "--artifacts", str(tmp_path / "artifacts")]) == 2
    assert "bare has no provenance.json" in capsys.readouterr().err
