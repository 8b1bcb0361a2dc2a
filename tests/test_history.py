"""The history index: built from the retained namespaces' tables, rebuilt whole, same rows each time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import sqlite_utils

from harness import ROOT
from harness.errors import EvidenceError
from harness.tables import history

REAL = ROOT / "artifacts"
RETAINED = ["h200-layernorm-1", "h200-ops-defaults-1"]


def write_namespace(artifacts: Path, name: str, date: str | None, kernel_time: list[dict], census: list[dict] | None = None,
                    gpu: str = "NVIDIA H200", ceilings: bool = True, nsys: str = "2025.3.2.0") -> Path:
    """A small synthetic namespace: tables/kernel_time.csv, census.csv, optionally ceilings.csv, provenance.json."""
    ns = artifacts / name
    (ns / "tables").mkdir(parents=True)
    pd.DataFrame([{"namespace": name, "cache_mode": "hot", **r} for r in kernel_time]).to_csv(ns / "tables" / "kernel_time.csv", index=False)
    if census is not None:
        pd.DataFrame([{"namespace": name, **r} for r in census]).to_csv(ns / "tables" / "census.csv", index=False)
    if ceilings:
        pd.DataFrame([{"ceiling": "copy_bandwidth", "value": 4000.0, "unit": "GB/s"}]).to_csv(ns / "tables" / "ceilings.csv", index=False)
    if date is not None:
        prov = {"namespace": name, "date_utc": date, "git": {"commit": "abc1234", "dirty": False},
                "config_sha256": "f" * 64, "config": {"cache_mode": "hot"}, "gpus": [{"name": gpu, "uuid": f"uuid-{name}"}],
                "versions": {"nsys": nsys, "torch": "2.11.0", "triton": "3.6.0"}}
        (ns / "provenance.json").write_text(json.dumps(prov))
    return ns


def kt(op: str, shape: str, impl: str, us: float) -> dict:
    return {"op": op, "shape": shape, "impl": impl, "kernel_time_us": us}


def rows(db: sqlite_utils.Database) -> dict[str, list[dict]]:
    return {t: list(db[t].rows) for t in sorted(db.table_names())}


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    art = tmp_path / "artifacts"
    # Written out of date order on purpose; the index and the order come from provenance dates.
    write_namespace(art, "b-later", "2026-12-02T10:00:00+00:00", [kt("layernorm", "4096x768", "triton", 5.5)],
                    ceilings=True, nsys="NVIDIA Nsight Systems version 2025.3.1.0")
    write_namespace(art, "a-earlier", "2026-12-01T10:00:00+00:00",
                    [kt("layernorm", "4096x768", "triton", 5.4), kt("layernorm", "4096x768", "cuda", 5.8)],
                    census=[{"op": "layernorm", "impl": "cuda", "kernel": "k", "specialization": "s", "shapes": "4096x768",
                             "source_sha256": "0" * 64, "compiler": "NVRTC 13.0", "options": "-O3"}], ceilings=False)
    write_namespace(art, "c-undated", None, [kt("softmax", "4096x1024", "triton", 5.9)])
    (art / "not-a-namespace").mkdir()  # no tables/: ignored
    (art / "stray.txt").write_text("ignored\n")
    return art


def test_namespaces_in_order_by_provenance_date(synthetic: Path) -> None:
    assert history.namespaces_in_order(synthetic) == ["c-undated", "a-earlier", "b-later"]


def test_real_namespaces_in_order() -> None:
    dates = {n: history.provenance_date(history.read_provenance(REAL / n)) for n in RETAINED}
    known = {n: d for n, d in dates.items() if d is not None}
    assert set(known) == set(RETAINED), dates
    expected = sorted(RETAINED, key=lambda n: known[n])
    got = [n for n in history.namespaces_in_order(REAL) if n in RETAINED]
    assert got == expected


def test_index_contents(synthetic: Path, tmp_path: Path) -> None:
    out = history.build_index(synthetic, tmp_path / "index" / "history.sqlite")
    db = sqlite_utils.Database(out)
    assert {"namespaces", "files", "kernel_time", "census", "ceilings"} <= set(db.table_names())
    ns = {r["name"]: r for r in db["namespaces"].rows}
    assert set(ns) == {"a-earlier", "b-later", "c-undated"}
    assert [n for n, _ in sorted(((r["name"], r["position"]) for r in ns.values()), key=lambda x: x[1])] == \
        ["c-undated", "a-earlier", "b-later"]
    assert ns["b-later"]["nsys_version"] == "2025.3.1.0"  # version number out of nsys's sentence
    assert ns["a-earlier"]["gpu_name"] == "NVIDIA H200" and ns["a-earlier"]["gpu_uuid"] == "uuid-a-earlier"
    assert ns["a-earlier"]["dirty"] == 0 and ns["a-earlier"]["commit"] == "abc1234"
    assert ns["a-earlier"]["has_ceilings"] == 0 and ns["b-later"]["has_ceilings"] == 1
    assert ns["c-undated"]["date_utc"] is None and ns["c-undated"]["has_provenance"] == 0
    # every CSV row with its namespace first, shapes as text
    kt_rows = list(db["kernel_time"].rows)
    assert len(kt_rows) == 4 and list(kt_rows[0])[0] == "namespace"
    assert {(r["namespace"], r["impl"]) for r in kt_rows} == {("a-earlier", "triton"), ("a-earlier", "cuda"),
                                                             ("b-later", "triton"), ("c-undated", "triton")}
    assert db["kernel_time"].columns_dict["shape"] is str and db["kernel_time"].columns_dict["kernel_time_us"] is float
    # ceilings only where the namespace has them; a namespace without ceilings.csv is still indexed
    assert {r["namespace"] for r in db["ceilings"].rows} == {"b-later", "c-undated"}
    files = list(db["files"].rows)
    assert {f["path"] for f in files} >= {"a-earlier/tables/kernel_time.csv", "b-later/tables/ceilings.csv"}
    assert all(len(f["sha256"]) == 64 for f in files)
    assert not (out.parent / "history.sqlite.partial").exists()


def test_rebuild_is_idempotent_and_replaces_whole(synthetic: Path, tmp_path: Path) -> None:
    out = tmp_path / "history.sqlite"
    first = rows(sqlite_utils.Database(history.build_index(synthetic, out)))
    second = rows(sqlite_utils.Database(history.build_index(synthetic, out)))
    assert first == second
    # Removing a namespace and rebuilding drops its rows: the index is rebuilt, never updated.
    shutil.rmtree(synthetic / "b-later")
    third = rows(sqlite_utils.Database(history.build_index(synthetic, out)))
    assert "b-later" not in {r["name"] for r in third["namespaces"]}
    assert "b-later" not in {r["namespace"] for r in third["kernel_time"]}


def test_real_index_matches_retained_tables(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    for n in RETAINED:
        shutil.copytree(REAL / n, art / n)
    db = sqlite_utils.Database(history.build_index(art, tmp_path / "h.sqlite"))
    for n in RETAINED:
        for csv in sorted((art / n / "tables").glob("*.csv")):
            frame = pd.read_csv(csv)
            assert db[csv.stem].count_where("namespace = ?", [n]) == len(frame), csv
    ns = {r["name"]: r for r in db["namespaces"].rows}
    for n in RETAINED:
        prov = json.loads((art / n / "provenance.json").read_text())
        assert ns[n]["commit"] == prov["git"]["commit"]
        assert ns[n]["config_sha256"] == prov["config_sha256"]
        assert ns[n]["gpu_name"] == prov["gpus"][0]["name"]
        assert ns[n]["torch_version"] == prov["versions"]["torch"]
        assert ns[n]["has_ceilings"] == int((art / n / "tables" / "ceilings.csv").is_file())
    # the older namespace's kernel_time lacks the rate columns: they are empty there, not invented
    older = history.namespaces_in_order(art)[0]
    if "bytes_moved" not in pd.read_csv(art / older / "tables" / "kernel_time.csv").columns:
        assert all(r["bytes_moved"] is None for r in db["kernel_time"].rows_where("namespace = ?", [older]))


def test_cli_build(synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli.sqlite"
    assert history.main(["build", "--artifacts", str(synthetic), "--out", str(out)]) == 0
    assert "indexed 3 namespaces" in capsys.readouterr().out
    assert sqlite_utils.Database(out)["namespaces"].count == 3
    assert history.main(["build", "--artifacts", str(synthetic)]) == 0  # default: <artifacts>/history.sqlite
    assert (synthetic / "history.sqlite").is_file()
    assert history.main(["build", "--artifacts", str(synthetic)]) == 0  # its own default index: rebuilt freely
    assert history.main(["build", "--artifacts", str(tmp_path / "nowhere"), "--out", str(tmp_path / "new.sqlite")]) == 2
    assert "no artifacts folder" in capsys.readouterr().err
    assert history.main(["frobnicate"]) == 2


def test_an_out_is_never_evidence_and_never_an_existing_file_without_force(
        synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`history build --out report/<ns>/field_note.md` replaced the field note with SQLite, exit 0."""
    note = ROOT / "report" / "h200-ops-4" / "field_note.md"
    before = note.read_bytes()
    assert history.main(["build", "--artifacts", str(synthetic), "--out", str(note), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lies under report/" in err and note.read_bytes() == before
    mine = tmp_path / "mine.sqlite"
    mine.write_text("not an index\n")
    capsys.readouterr()
    assert history.main(["build", "--artifacts", str(synthetic), "--out", str(mine)]) == 2
    assert capsys.readouterr().err == f"history: {mine} already exists; pass --force to replace it.\n"
    assert mine.read_text() == "not an index\n"
    assert history.main(["build", "--artifacts", str(synthetic), "--out", str(mine), "--force"]) == 0
    assert sqlite_utils.Database(mine)["namespaces"].count == 3


def test_a_bad_table_is_one_sentence(synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (synthetic / "b-later" / "tables" / "kernel_time.csv").write_bytes(b"op,shape\n\xff\xfe,x\n")
    assert history.main(["build", "--artifacts", str(synthetic), "--out", str(tmp_path / "h.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "kernel_time.csv is not UTF-8 text" in err


def test_missing_artifacts_raises(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError):
        history.build_index(tmp_path / "absent", tmp_path / "h.sqlite")


def test_a_namespace_of_sweeps_only_is_dated_by_its_latest_sweep(tmp_path: Path) -> None:
    ns = tmp_path / "sweeps-only"
    (ns / "tables").mkdir(parents=True)
    (ns / "tables" / "sweep_matmul_provenance.json").write_text(json.dumps({"date_utc": "2026-11-29T12:34:50+00:00", "op": "m"}))
    (ns / "tables" / "sweep_softmax_provenance.json").write_text(json.dumps({"date_utc": "2026-11-29T13:00:00+00:00", "op": "s"}))
    (ns / "tables" / "sweep_transpose_provenance.json").write_text("{not json")
    assert history.read_provenance(ns)["op"] == "s"
    (ns / "provenance.json").write_text(json.dumps({"date_utc": "2026-11-29T09:00:00+00:00", "op": "whole"}))
    assert history.read_provenance(ns)["op"] == "whole"  # a report run's own provenance comes first
    assert history.read_provenance(tmp_path / "nothing") == {}
