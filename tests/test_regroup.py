"""`python -m harness regroup`: the groups of a namespace captured on more than one GPU are cleared
for re-measuring, everything else is kept (CPU only)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.__main__ import main as harness_main
from harness.evidence import regroup

NS = "split-ns"
GROUPS = {("matmul", "1024x1024x1024"): {"cuda": "GPU-b", "triton": "GPU-a", "torch": "GPU-a"},
          ("softmax", "4096x1024"): {"cuda": "GPU-a", "triton": "GPU-a", "torch": "GPU-a"}}


def make_namespace(root: Path) -> tuple[Path, Path]:
    art, rep = root / "artifacts", root / "report"
    ns = art / NS
    rows = []
    for (op, shape), impls in GROUPS.items():
        for impl, uuid in impls.items():
            for folder, suffix in (("check", "json"), ("capture", "json"), ("capture", "sqlite"),
                                   ("kernel_time", "csv")):
                path = ns / folder / op / shape / f"{impl}.{suffix}"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("x")
            rows.append({"op": op, "shape": shape, "impl": impl, "kernel_time_us": 1.0, "gpu_uuid": uuid})
        for suffix in ("csv", "samples.csv", "graph.csv"):
            path = ns / "span" / op / f"{shape}.{suffix}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")
        record = ns / "logs" / "gpu" / op / f"{shape}.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"gpu_uuids": sorted(set(impls.values()))}))
    (ns / "tables").mkdir()
    pd.DataFrame(rows).to_csv(ns / "tables" / "kernel_time.csv", index=False)
    for name in ("ceilings.csv", "sweep.csv", "span.csv"):
        (ns / "tables" / name).write_text("x")
    (ns / "provenance.json").write_text("{}")
    (rep / NS / "figures").mkdir(parents=True)
    (rep / NS / "field_note.md").write_text("x")
    return art, rep


def test_split_groups_are_found_in_the_table_and_the_gpu_records(tmp_path: Path) -> None:
    art, _ = make_namespace(tmp_path)
    assert regroup.split_groups(art / NS) == [("matmul", "1024x1024x1024", ["GPU-a", "GPU-b"])]
    # a group split only in its GPU record (a check on one GPU, the capture not yet taken)
    record = art / NS / "logs" / "gpu" / "softmax" / "4096x1024.json"
    record.write_text(json.dumps({"gpu_uuids": ["GPU-a", "GPU-c"]}))
    assert [g[:2] for g in regroup.split_groups(art / NS)] == [("matmul", "1024x1024x1024"), ("softmax", "4096x1024")]


def test_regroup_removes_the_split_group_and_the_derived_outputs_only(tmp_path: Path) -> None:
    art, rep = make_namespace(tmp_path)
    ns = art / NS
    groups, paths = regroup.regroup(NS, art, rep, dry_run=True)
    assert groups and all(p.exists() for p in paths)  # a dry run removes nothing
    regroup.regroup(NS, art, rep)
    assert not list((ns / "capture" / "matmul").rglob("*.*"))
    assert not list((ns / "span" / "matmul").glob("*"))
    assert not (ns / "logs" / "gpu" / "matmul" / "1024x1024x1024.json").exists()
    assert not (ns / "tables" / "kernel_time.csv").exists() and not (ns / "provenance.json").exists()
    assert not (rep / NS).exists()
    # kept: the other group, whose three implementations share one GPU, and the session's ceilings
    assert len(list((ns / "capture" / "softmax" / "4096x1024").glob("*"))) == 6
    assert (ns / "span" / "softmax" / "4096x1024.csv").is_file()
    assert (ns / "logs" / "gpu" / "softmax" / "4096x1024.json").is_file()
    assert (ns / "tables" / "ceilings.csv").is_file()


def test_command_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    art, rep = make_namespace(tmp_path)
    assert harness_main(["regroup", NS, "--artifacts", str(art), "--reports", str(rep), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "split: matmul 1024x1024x1024 on GPU-a, GPU-b" in out and "would remove" in out
    assert f"--config namespace={NS}" in out
    assert harness_main(["regroup", "no-such", "--artifacts", str(art)]) == 2
    assert "no namespace no-such" in capsys.readouterr().err
    regroup.regroup(NS, art, rep)
    assert harness_main(["regroup", NS, "--artifacts", str(art), "--reports", str(rep)]) == 0
    assert "nothing to do" in capsys.readouterr().out
