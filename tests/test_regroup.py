"""`python -m harness regroup`: the groups of a namespace measured on more than one GPU are cleared
for re-measuring (the group's folder under measure/, its counters and its GPU record), with the
namespace's derived tables, provenance and reports; everything else is kept. A finished namespace
is retained evidence: regroup leaves it alone, in one sentence, unless told --rewrite-retained
(CPU only)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.__main__ import main as harness_main
from harness.errors import ConfigError
from harness.evidence import regroup
from harness.tables import derive

NS = "split-ns"
GROUPS = {("matmul", "1024x1024x1024"): {"cuda": "GPU-b", "triton": "GPU-a", "torch": "GPU-a"},
          ("softmax", "4096x1024"): {"cuda": "GPU-a", "triton": "GPU-a", "torch": "GPU-a"}}


def make_namespace(root: Path) -> tuple[Path, Path]:
    """A finished namespace (its report written) of two groups, matmul's split over two GPUs."""
    art, rep = root / "artifacts", root / "report"
    ns = art / NS
    rows = []
    for (op, shape), impls in GROUPS.items():
        for path in derive.group_files(ns / "measure" / op / shape).values():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")
        for suffix in ("csv", "raw.csv", "ncu-rep"):
            path = ns / "counters" / op / f"{shape}.{suffix}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")
        rows += [{"op": op, "shape": shape, "impl": impl, "kernel_time_us": 1.0, "gpu_uuid": uuid}
                 for impl, uuid in impls.items()]
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


def files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_split_groups_are_found_in_the_table_and_the_gpu_records(tmp_path: Path) -> None:
    art, _ = make_namespace(tmp_path)
    assert regroup.split_groups(art / NS) == [("matmul", "1024x1024x1024", ["GPU-a", "GPU-b"])]
    # a group split only in its GPU record (its measure job on one GPU, its counters on another)
    record = art / NS / "logs" / "gpu" / "softmax" / "4096x1024.json"
    record.write_text(json.dumps({"gpu_uuids": ["GPU-a", "GPU-c"]}))
    assert [g[:2] for g in regroup.split_groups(art / NS)] == [("matmul", "1024x1024x1024"), ("softmax", "4096x1024")]


def test_regroup_removes_the_split_group_and_the_derived_outputs_only(tmp_path: Path) -> None:
    art, rep = make_namespace(tmp_path)
    ns = art / NS
    groups, paths = regroup.regroup(NS, art, rep, dry_run=True)  # a retained namespace may be looked at
    assert groups and paths and all(p.exists() for p in paths)  # a dry run removes nothing
    regroup.regroup(NS, art, rep, rewrite_retained=True)
    assert not [p for p in (ns / "measure" / "matmul").rglob("*") if p.is_file()]
    assert not list((ns / "counters" / "matmul").glob("*"))
    assert not (ns / "logs" / "gpu" / "matmul" / "1024x1024x1024.json").exists()
    assert not (ns / "tables" / "kernel_time.csv").exists() and not (ns / "provenance.json").exists()
    assert not (rep / NS).exists()
    # kept: the other group, whose jobs all ran on one GPU, and the session's ceilings
    assert all(p.is_file() for p in derive.group_files(ns / "measure" / "softmax" / "4096x1024").values())
    assert len(list((ns / "counters" / "softmax").glob("4096x1024.*"))) == 3
    assert (ns / "logs" / "gpu" / "softmax" / "4096x1024.json").is_file()
    assert (ns / "tables" / "ceilings.csv").is_file()


def test_a_retained_namespace_is_refused_in_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    art, rep = make_namespace(tmp_path)
    before = files(tmp_path)
    with pytest.raises(ConfigError, match=f"namespace {NS} is retained evidence .*--rewrite-retained"):
        regroup.regroup(NS, art, rep)
    assert harness_main(["regroup", NS, "--artifacts", str(art), "--reports", str(rep)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.strip().endswith(".") and "Traceback" not in err
    assert "--rewrite-retained" in err
    assert files(tmp_path) == before  # nothing removed


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    art, rep = make_namespace(tmp_path)
    assert harness_main(["regroup", NS, "--artifacts", str(art), "--reports", str(rep), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "split: matmul 1024x1024x1024 on GPU-a, GPU-b" in out and "would remove" in out
    assert f"--config namespace={NS}" in out
    assert harness_main(["regroup", "no-such", "--artifacts", str(art)]) == 2
    assert "no namespace no-such" in capsys.readouterr().err
    assert harness_main(["regroup", NS, "--artifacts", str(art), "--reports", str(rep), "--rewrite-retained"]) == 0
    out = capsys.readouterr().out
    # the rerun writes into retained evidence too, so it names the override (recorded in provenance)
    assert "removed" in out and f"--config namespace={NS} overwrite={NS}" in out
    assert harness_main(["regroup", NS, "--artifacts", str(art), "--reports", str(rep), "--rewrite-retained"]) == 0
    assert "nothing to do" in capsys.readouterr().out


@pytest.mark.parametrize("content, says", [(b"\xff\xfeop,shape\n", "is not UTF-8 text"), (b"", "is empty"),
                                           (b"impl,gpu_uuid\ncuda,GPU-a\n", "lacks the column")])
def test_a_bad_kernel_time_table_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes,
                                                 says: str) -> None:
    """UnicodeDecodeError and EmptyDataError tracebacks before."""
    art, rep = make_namespace(tmp_path)
    (art / NS / "tables" / "kernel_time.csv").write_bytes(content)
    assert harness_main(["regroup", NS, "--artifacts", str(art), "--reports", str(rep), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err
