"""Table files (harness.tables.table_files): the compressed tables are written as '<name>.csv.gz',
the same bytes for the same rows, read back by pandas by their name; a namespace written before
keeps its plain '<name>.csv', which readers still find, and scripts/compress_tables.py turns into
the compressed file without changing a byte inside. Every committed namespace holds its
compressed tables compressed (the tree that travels to a lent GPU machine has a limit)."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from script_module import load_script

from harness import ROOT
from harness.io import write_csv
from harness.tables import history, table_files
from harness.tables.derive import TABLES

ROWS = [{"namespace": "n", "op": "layernorm", "shape": "4096x768", "impl": impl, "round": r, "calls": 21,
         "kernel_time_us": 5.8 + r / 100} for impl in ("cuda", "triton") for r in range(3)]
COLUMNS = list(ROWS[0])


def test_names_paths_and_the_table_a_file_holds(tmp_path: Path) -> None:
    assert table_files.table_file("rounds") == "rounds.csv.gz" and table_files.table_file("sweep") == "sweep.csv"
    assert set(table_files.COMPRESSED) <= set(TABLES)
    assert table_files.table_path(tmp_path, "rounds") == tmp_path / "rounds.csv.gz"  # neither there
    (tmp_path / "rounds.csv").write_text("a\n1\n")
    assert table_files.table_path(tmp_path, "rounds") == tmp_path / "rounds.csv"  # only the plain one
    (tmp_path / "rounds.csv.gz").write_bytes(gzip.compress(b"a\n1\n"))
    assert table_files.table_path(tmp_path, "rounds") == tmp_path / "rounds.csv.gz"
    assert [table_files.table_name(n) for n in ("rounds.csv.gz", "sweep.csv", "notes.txt")] == ["rounds", "sweep", None]
    (tmp_path / "notes.txt").write_text("x")
    assert [(n, p.name) for n, p in table_files.in_folder(tmp_path)] == [("rounds", "rounds.csv"),
                                                                          ("rounds", "rounds.csv.gz")]
    assert table_files.in_folder(tmp_path / "none") == []


def test_a_compressed_table_is_the_same_bytes_for_the_same_rows(tmp_path: Path) -> None:
    write_csv(ROWS, COLUMNS, tmp_path / "a.csv")
    write_csv(ROWS, COLUMNS, tmp_path / "a.csv.gz")
    write_csv(ROWS, COLUMNS, tmp_path / "b" / "a.csv.gz")
    packed = (tmp_path / "a.csv.gz").read_bytes()
    assert packed == (tmp_path / "b" / "a.csv.gz").read_bytes()  # no time or name in the header
    assert gzip.decompress(packed) == (tmp_path / "a.csv").read_bytes()
    assert pd.read_csv(tmp_path / "a.csv.gz").equals(pd.read_csv(tmp_path / "a.csv"))
    assert len(packed) < (tmp_path / "a.csv").stat().st_size


def test_the_history_index_reads_a_compressed_table_under_its_name(tmp_path: Path) -> None:
    tables = tmp_path / "artifacts" / "n" / "tables"
    write_csv(ROWS, COLUMNS, tables / "rounds.csv.gz")
    write_csv(ROWS[:1], COLUMNS, tables / "sweep.csv")
    row = history.namespace_row(tmp_path / "artifacts" / "n", 0)
    assert row["tables"] == "rounds;sweep"


def test_the_script_compresses_an_earlier_namespace_byte_for_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                                  ) -> None:
    script = load_script("compress_tables")
    write_csv(ROWS, COLUMNS, tmp_path / "old" / "tables" / "rounds.csv")
    write_csv(ROWS, COLUMNS, tmp_path / "old" / "tables" / "sweep.csv")
    before = (tmp_path / "old" / "tables" / "rounds.csv").read_bytes()
    assert script.main(["--artifacts", str(tmp_path)]) == 0
    assert "rounds.csv.gz" in capsys.readouterr().out
    assert not (tmp_path / "old" / "tables" / "rounds.csv").exists()
    assert gzip.decompress((tmp_path / "old" / "tables" / "rounds.csv.gz").read_bytes()) == before
    assert (tmp_path / "old" / "tables" / "sweep.csv").is_file()  # not a compressed table
    assert script.main(["--artifacts", str(tmp_path)]) == 0 and capsys.readouterr().out == ""  # nothing left to do
    (tmp_path / "old" / "tables" / "rounds.csv").write_bytes(before)
    assert script.main(["--artifacts", str(tmp_path), "old"]) == 2
    assert "has both tables/rounds.csv and tables/rounds.csv.gz" in capsys.readouterr().err
    assert script.main(["--artifacts", str(tmp_path), "nosuch"]) == 2
    assert script.main(["--artifacts", str(tmp_path / "none"), "old"]) == 2  # a name, and no such folder
    assert script.main(["--artifacts", str(tmp_path / "none")]) == 0  # nothing to do


def test_every_committed_namespace_holds_its_compressed_tables_compressed() -> None:
    tracked = subprocess.run(["git", "ls-files", "artifacts"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("no git checkout with committed namespaces here")
    plain = [p for p in tracked if Path(p).parent.name == "tables"
             and Path(p).name in {f"{name}.csv" for name in table_files.COMPRESSED}]
    assert not plain, f"run scripts/compress_tables.py: {plain[:3]}"
    assert any(Path(p).name == "rounds.csv.gz" for p in tracked)
