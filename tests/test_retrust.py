"""`python -m harness retrust`: a namespace's control bands and drift re-derived on the CPU once an
earlier namespace is retained, with the reports re-rendered and the command added to provenance.
Real H200 namespaces stand in: h200-ops-solo-1 was measured minutes after h200-ops-1, on a copy
of the tree that lacked h200-ops-1's tables. Each has a finished report, so it is retained evidence:
retrust rewrites it only with --rewrite-retained, and without it refuses in one sentence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness import ROOT
from harness.__main__ import main as cli
from harness.evidence import targets

LATER, EARLIER, OLDER = "h200-ops-solo-1", "h200-ops-1", "h200-validate-1"


def retrust(name: str, art: Path, rep: Path) -> int:
    return cli(["retrust", name, "--artifacts", str(art), "--reports", str(rep), "--rewrite-retained"])


def retained_copy(tmp: Path, *names: str) -> tuple[Path, Path]:
    art, rep = tmp / "artifacts", tmp / "report"
    for name in names:
        shutil.copytree(ROOT / "artifacts" / name, art / name)
        shutil.copytree(ROOT / "report" / name, rep / name)
    return art, rep


def test_a_namespace_retained_later_enters_the_bands_and_the_drift(tmp_path: Path) -> None:
    art, rep = retained_copy(tmp_path, OLDER, LATER)
    prov_path = art / LATER / "provenance.json"
    prov = json.loads(prov_path.read_text())
    before = prov["commands"] = prov["commands"][:1]  # the run's own command alone
    prov_path.write_text(json.dumps(prov, indent=1) + "\n")
    assert retrust(LATER, art, rep) == 0
    without = pd.read_csv(art / LATER / "tables" / "controls.csv")
    assert not without["namespaces"].fillna("").str.contains(EARLIER).any()
    assert set(pd.read_csv(art / LATER / "tables" / "drift.csv")["earlier"]) == {OLDER}
    assert f"Drift between {OLDER} and {LATER} is at most" in (rep / LATER / "field_note.md").read_text()

    shutil.copytree(ROOT / "artifacts" / EARLIER, art / EARLIER)
    assert retrust(LATER, art, rep) == 0
    controls = pd.read_csv(art / LATER / "tables" / "controls.csv")
    assert controls["namespaces"].str.contains(EARLIER).all()  # every default shape was measured there too
    drift = pd.read_csv(art / LATER / "tables" / "drift.csv")
    assert set(drift["earlier"]) == {EARLIER}
    note = (rep / LATER / "field_note.md").read_text()
    assert f"Drift between {EARLIER} and {LATER} is at most" in note
    assert f"Drift between {OLDER} and {LATER}" not in note
    commands = json.loads((art / LATER / "provenance.json").read_text())["commands"]
    assert commands[0].split(" ", 1)[1].startswith("snakemake report")  # the run's own command stays first
    assert commands[:-1] == before  # the two retrusts in a row are one record, counted
    added = commands[-1]
    assert added["command"] == f"python -m harness retrust {LATER} --rewrite-retained" and added["times"] == 2
    assert "no measurement changed" in added["note"]
    # the report's history names it
    assert f"- python -m harness retrust {LATER} --rewrite-retained (2 times in a row, the last started {added['start']})" in note


def test_the_targets_are_judged_again_from_the_controls_derived_again(tmp_path: Path) -> None:
    """targets.csv reads which pairings controls.csv ranks, so retrust judges it again, with the
    run's own targets (its provenance): here a copy alone, whose controls lose every band."""
    name = "h200-ops-37"
    art, rep = retained_copy(tmp_path, name)
    stale = pd.read_csv(art / name / "tables" / "targets.csv")
    stale.assign(status="met", reason="").to_csv(art / name / "tables" / "targets.csv", index=False)
    assert retrust(name, art, rep) == 0
    cfg = json.loads((art / name / "provenance.json").read_text())["config"]
    again = pd.read_csv(art / name / "tables" / "targets.csv")
    judged = targets.judge(name, cfg, art)
    for column in ("op", "shape", "target", "status", "reason"):
        assert again[column].fillna("").astype(str).tolist() == judged[column].fillna("").astype(str).tolist()
    assert (again["status"] == "not judged").any() and (again["status"] == "missed").any()
    assert "controls, drift and targets re-derived" in json.loads((art / name / "provenance.json").read_text())["commands"][-1]["note"]


def test_measured_tables_are_left_as_they_were(tmp_path: Path) -> None:
    art, rep = retained_copy(tmp_path, EARLIER, LATER)
    before = {p.name: p.read_bytes() for p in (art / LATER / "tables").glob("*.csv")}
    assert retrust(LATER, art, rep) == 0
    after = {p.name: p.read_bytes() for p in (art / LATER / "tables").glob("*.csv")}
    changed = {name for name in before if before[name] != after[name]}
    assert changed <= {"controls.csv", "drift.csv"}


def test_a_retained_namespace_is_refused_in_one_sentence_without_the_flag(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    art, rep = retained_copy(tmp_path, OLDER, LATER)
    before = {p: p.read_bytes() for root in (art, rep) for p in root.rglob("*") if p.is_file()}
    assert cli(["retrust", LATER, "--artifacts", str(art), "--reports", str(rep)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith(".") and "Traceback" not in err
    assert err.startswith(f"namespace {LATER} is retained evidence") and "--rewrite-retained" in err
    assert {p: p.read_bytes() for root in (art, rep) for p in root.rglob("*") if p.is_file()} == before


def test_a_namespace_without_provenance_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "artifacts" / "bare" / "tables").mkdir(parents=True)
    assert cli(["retrust", "bare", "--artifacts", str(tmp_path / "artifacts")]) == 2
    assert "bare has no provenance.json" in capsys.readouterr().err


def test_a_namespace_of_one_sweep_is_one_sentence_and_left_unchanged(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """h200-matmul-tile128-1 holds one operation's sweep tables and no report: there is nothing to
    re-render, and retrust says so before it writes a table or a line of provenance."""
    name = "h200-matmul-tile128-1"
    art = tmp_path / "artifacts"
    shutil.copytree(ROOT / "artifacts" / name, art / name)
    before = {p: p.read_bytes() for p in sorted((art / name).rglob("*")) if p.is_file()}
    assert retrust(name, art, tmp_path / "report") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{name} has no tables/sweep.csv" in err and "nothing was rewritten" in err, err
    assert {p: p.read_bytes() for p in sorted((art / name).rglob("*")) if p.is_file()} == before


def test_retrust_does_not_depend_on_the_order_namespaces_are_retrusted(tmp_path: Path) -> None:
    """Trust tables are derived from what each namespace measured (its kernel times, census and NVML
    record), never from another namespace's possibly stale controls.csv: retrusting h200-loaded-1
    before or after h200-ops-2 gives h200-ops-2 the same tables, where h200-loaded-1 (NVML saw
    another process at each capture) is named among the namespaces left out of the band."""
    names = (OLDER, EARLIER, LATER, "h200-loaded-1", "h200-ops-2")
    got = []
    for order in (("h200-ops-2", "h200-loaded-1"), ("h200-loaded-1", "h200-ops-2")):
        art, rep = retained_copy(tmp_path / "-".join(order), *names)
        for name in order:
            assert retrust(name, art, rep) == 0
        got.append({t: (art / "h200-ops-2" / "tables" / t).read_bytes() for t in ("controls.csv", "drift.csv")})
    assert got[0] == got[1]
    controls = pd.read_csv(art / "h200-ops-2" / "tables" / "controls.csv").set_index(["op", "shape"])
    row = controls.loc[("layernorm", "4096x768")]
    assert "h200-loaded-1" not in row["namespaces"]
    assert ("h200-loaded-1 (NVML flagged its captures there: another compute process ran beside the captured one)"
            in row["set_aside"])
    loaded = pd.read_csv(art / "h200-loaded-1" / "tables" / "controls.csv").iloc[0]
    assert (loaded["status"], loaded["nvml"], bool(loaded["rankable"])) == ("inside", "disturbed", False)


@pytest.mark.parametrize("damage, says", [
    (lambda t: t.drop(columns=["kernel_time_us"]), "lacks the column kernel_time_us"),
    (lambda t: t.assign(kernel_time_us=["fast"] + list(t["kernel_time_us"][1:])), "holds 'fast' in its number column"),
])
def test_a_bad_kernel_time_table_is_one_sentence_before_anything_is_rewritten(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], damage, says: str) -> None:  # type: ignore[no-untyped-def]
    """A table without a column, or with text for a number, anywhere the trust step reads: a
    KeyError traceback (missing) or a silent run (text) before; one sentence and exit 2 now."""
    art, rep = retained_copy(tmp_path, LATER, EARLIER)
    table = art / EARLIER / "tables" / "kernel_time.csv"
    damage(pd.read_csv(table)).to_csv(table, index=False)
    before = (rep / LATER / "field_note.md").read_bytes()
    assert retrust(LATER, art, rep) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and str(table) in err
    assert (rep / LATER / "field_note.md").read_bytes() == before
