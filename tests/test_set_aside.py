"""The `set_aside` column of controls.csv: each run of namespaces set aside for one reason is named
before it once (harness.tables.phrases.set_aside_cell), read back in order with the form tables
written before it have (set_aside_items); scripts/compact_set_aside.py rewrites committed tables
so, every other cell byte for byte, and every committed table is held to it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from script_module import load_script

from harness import ROOT
from harness.io import write_csv
from harness.tables.phrases import set_aside_cell, set_aside_items

H200 = "another GPU model: NVIDIA H200"
FLAG = "NVML flagged its captures there: the GPU throttled (software power cap); another compute process (pids seen: 7)"


def test_a_run_of_namespaces_with_one_reason_names_it_once_and_reads_back_in_order() -> None:
    items = [("h200-ops-1", H200), ("h200-ops-2", H200), ("h100-a-1", FLAG), ("h200-ops-3", H200)]
    cell = set_aside_cell(items)
    assert cell == f"h200-ops-1, h200-ops-2 ({H200}); h100-a-1 ({FLAG}); h200-ops-3 ({H200})"
    assert set_aside_items(cell) == items
    # the form of tables written before: one reason per namespace
    assert set_aside_items("; ".join(f"{n} ({why})" for n, why in items)) == items
    assert set_aside_cell([]) == "" and set_aside_items("") == []


def test_the_script_rewrites_only_the_set_aside_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = load_script("compact_set_aside")
    old = "; ".join(f"h200-ops-{i} ({H200})" for i in range(1, 5))
    rows = [{"op": "softmax", "shape": "4096x1024", "kernel_time_us": 7.35155, "set_aside": old,
             "note": 'a "quoted", note'},
            {"op": "softmax", "shape": "8192x4096", "kernel_time_us": 1.0, "set_aside": None, "note": "x"}]
    path = tmp_path / "n" / "tables" / "controls.csv"
    write_csv(rows, ["op", "shape", "kernel_time_us", "set_aside", "note"], path)
    before = path.read_text()
    assert script.main(["--artifacts", str(tmp_path)]) == 0
    after = path.read_text()
    assert after == before.replace(old, f'"h200-ops-1, h200-ops-2, h200-ops-3, h200-ops-4 ({H200})"')  # quoted: commas
    assert "controls.csv" in capsys.readouterr().out
    assert script.main(["--artifacts", str(tmp_path)]) == 0 and capsys.readouterr().out == "0 bytes saved\n"
    path.write_text(before.replace(old, "not a list of namespaces"))
    assert script.main(["--artifacts", str(tmp_path), "n"]) == 2
    assert "does not read back" in capsys.readouterr().err
    assert script.main(["--artifacts", str(tmp_path), "nosuch"]) == 2
    assert "there is no namespace nosuch under" in capsys.readouterr().err


def test_every_committed_controls_table_is_compact() -> None:
    tracked = subprocess.run(["git", "ls-files", "artifacts/*/tables/controls.csv"], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    if not tracked:
        pytest.skip("no git checkout with committed namespaces here")
    script = load_script("compact_set_aside")
    texts = {p: (ROOT / p).read_text(encoding="utf-8") for p in tracked}
    loose = [p for p, text in texts.items() if script.compacted(text) != text]
    assert not loose, f"run scripts/compact_set_aside.py: {loose[:3]}"
