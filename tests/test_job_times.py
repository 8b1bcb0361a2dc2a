"""`python -m harness job-times <ns>` on the committed namespaces, as a fresh clone has them: no
benchmarks/ (git-ignored), so the committed tables/job_times.csv is the answer, read and never
rewritten; a namespace with neither says so and still lists its commands."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness import ROOT
from harness.__main__ import main as cli
from harness.tables import job_times

COMMITTED = sorted(p.name for p in (ROOT / "artifacts").iterdir() if (p / "tables").is_dir())


def clone_of(name: str, tmp_path: Path) -> Path:
    """The namespace as a fresh clone holds it: its tables, commands and provenance, no benchmarks/."""
    src, dst = ROOT / "artifacts" / name, tmp_path / "artifacts" / name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("benchmarks"))
    return tmp_path / "artifacts"


@pytest.mark.parametrize("name", COMMITTED)
def test_job_times_works_on_every_committed_namespace(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    art = clone_of(name, tmp_path)
    table = art / name / "tables" / "job_times.csv"
    before = table.read_bytes() if table.is_file() else None
    assert cli(["job-times", name, "--artifacts", str(art)]) == 0
    out = capsys.readouterr().out
    if before is None:
        assert "recorded no job times" in out and not table.exists()
        return
    assert table.read_bytes() == before  # read, never rewritten
    rows = pd.read_csv(table)
    printed = printed_totals(out)
    expected = {"all jobs": (len(rows), float(rows["seconds"].sum()))}
    expected |= {str(rule): (len(grp), float(grp["seconds"].sum())) for rule, grp in rows.groupby("rule")}
    assert set(printed) == set(expected)
    for rule, (jobs, seconds) in expected.items():
        assert printed[rule][0] == jobs, rule
        # printed to 0.1 s: a total of hundredths that ends in 5 may round either way
        assert abs(printed[rule][1] - seconds) <= 0.05 + 1e-9, rule


def printed_totals(out: str) -> dict[str, tuple[int, float]]:
    """{rule: (jobs, seconds)} of the table job-times printed, 'all jobs' included."""
    found = {}
    for line in out.splitlines():
        m = re.fullmatch(r"(\S+(?: jobs)?)\s+(\d+)\s+(\d+\.\d)", line)
        if m:
            found[m.group(1)] = (int(m.group(2)), float(m.group(3)))
    return found


def test_a_committed_table_is_read_back_as_written(tmp_path: Path) -> None:
    rows = [{"rule": "measure", "job": "layernorm", "seconds": 2.5, "cpu_seconds": 1.0, "max_rss_mb": None},
            {"rule": "build", "job": "", "seconds": 1.0, "cpu_seconds": None, "max_rss_mb": 10.0}]
    job_times.write_csv(rows, job_times.COLUMNS, tmp_path / "job_times.csv")
    assert job_times.read_rows(tmp_path / "job_times.csv") == rows


def test_an_unknown_namespace_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "artifacts").mkdir()
    assert cli(["job-times", "nosuch-1", "--artifacts", str(tmp_path / "artifacts")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nosuch-1" in err and err.endswith(".")


def test_a_benchmark_that_is_not_utf8_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = tmp_path / "artifacts" / "ns-1" / "benchmarks" / "measure"
    bench.mkdir(parents=True)
    (bench / "layernorm.tsv").write_bytes(b"s\th:m:s\n\xff\xfe1.0\t0:00:01\n")
    code = cli(["job-times", "ns-1", "--artifacts", str(tmp_path / "artifacts")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "layernorm.tsv is not UTF-8" in err, err


def test_a_job_without_its_benchmark_file_here_keeps_its_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A copy that left some benchmark files out (an archive that dropped benchmarks/build/) does not
    shrink the table: the jobs found are updated, the others kept, and the sentence says so."""
    ns = tmp_path / "artifacts" / "ns-1"
    (ns / "benchmarks" / "measure").mkdir(parents=True)
    (ns / "benchmarks" / "measure" / "layernorm.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n4.5\t0:00:04\t100\t3.0\n")
    (ns / "tables").mkdir()
    recorded = [{"rule": "build", "job": "layernorm", "seconds": 9.0, "cpu_seconds": 8.0, "max_rss_mb": 50.0},
                {"rule": "measure", "job": "layernorm", "seconds": 2.5, "cpu_seconds": 1.0, "max_rss_mb": None}]
    job_times.write_csv(recorded, job_times.COLUMNS, ns / "tables" / "job_times.csv")
    assert cli(["job-times", "ns-1", "--artifacts", str(tmp_path / "artifacts")]) == 0
    assert job_times.read_rows(ns / "tables" / "job_times.csv") == [
        recorded[0], {"rule": "measure", "job": "layernorm", "seconds": 4.5, "cpu_seconds": 3.0, "max_rss_mb": 100.0}]
    out = capsys.readouterr().out
    assert "1 job(s) of ns-1's job_times.csv have no benchmark file here; their rows are kept." in out
    assert f"{'all jobs':<16} {2:>5} {13.5:>9.1f}" in out


def _record(folder: Path, seconds: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "record.json").write_text(json.dumps({"op": folder.parent.name, "seconds": seconds}))


def test_where_each_groups_time_went_is_written_and_read_back_from_a_clone(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    ns = tmp_path / "artifacts" / "ns"
    seconds = {"start_up": 0.5, "gpu_init": 2.0, "checks": 1.0, "spans": 0.25, "capture": 0.25, "total": 1.5,
               "profile nsys": 6.0, "job": 7.0}
    _record(ns / "measure" / "layernorm" / "8x8", seconds)
    _record(ns / "measure" / "softmax" / "8x8", {**seconds, "job": 8.0, "graph_replay": 0.5, "checks": 1.5})
    _record(ns / "measure" / "matmul" / "8x8x8", {"total": 1.0})  # an older record: no job, no nsys: no row
    (ns / "benchmarks" / "measure").mkdir(parents=True)
    assert cli(["job-times", "ns", "--artifacts", str(tmp_path / "artifacts")]) == 0
    out = capsys.readouterr().out
    rows = job_times.read_group_rows(ns / "tables" / "group_seconds.csv")
    assert [(r["op"], r["job"]) for r in rows] == [("layernorm", 7.0), ("softmax", 8.0)]
    # nsys's end: its wall time less the process's start, GPU start and phases; outside: the step less nsys
    assert rows[0]["nsys_end"] == 6.0 - (0.5 + 2.0 + 1.5) and rows[1]["outside"] == 2.0
    assert rows[0]["graph_replay"] is None and rows[1]["graph_replay"] == 0.5
    assert "measure groups: 2, 15.0 s in the measure step" in out and "nsys_end 4.0" in out and "outside 3.0" in out
    assert "checks per group: median 1.25 s, most 1.50 s (softmax 8x8)" in out
    shutil.rmtree(ns / "measure")
    shutil.rmtree(ns / "benchmarks")  # a fresh clone: the committed table answers
    assert cli(["job-times", "ns", "--artifacts", str(tmp_path / "artifacts")]) == 0
    assert "measure groups: 2, 15.0 s in the measure step" in capsys.readouterr().out


def test_group_rows_do_not_depend_on_the_order_of_phases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The phases worked out (nsys_end, outside) and those read from the record land under their own
    names whatever the order of PHASES: reversed, every value is the same."""
    seconds = {"start_up": 0.5, "gpu_init": 2.0, "checks": 1.0, "spans": 0.25, "graph_replay": 0.5, "capture": 0.25,
               "total": 2.0, "profile nsys": 6.0, "job": 7.5}
    _record(tmp_path / "measure" / "softmax" / "8x8", seconds)
    rows = job_times.group_rows(tmp_path / "measure")
    assert rows[0]["nsys_end"] == 1.5 and rows[0]["outside"] == 1.5 and rows[0]["start_up"] == 0.5
    assert rows[0]["idle_starts"] is None
    monkeypatch.setattr(job_times, "PHASES", list(reversed(job_times.PHASES)))
    assert job_times.group_rows(tmp_path / "measure") == rows
