"""harness.evidence.placements and scripts/placement_spread.py on committed namespaces and on a
namespace of known placement effects: the rounds are put back on their placements from the seed,
and the t interval over placements the module draws is the one sweep.csv reports."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness import ROOT
from harness.errors import EvidenceError
from harness.evidence import placements
from harness.measure.order import round_placements

PLACED = sorted(p.parent.parent.name for p in (ROOT / "artifacts").glob("*/tables/sweep.csv")
                if "placements" in pd.read_csv(p, nrows=1).columns)


@pytest.mark.parametrize("name", PLACED)
def test_the_half_width_at_the_runs_placements_is_the_one_sweep_reports(name: str) -> None:
    ns_dir = ROOT / "artifacts" / name
    sweep = pd.read_csv(ns_dir / "tables" / "sweep.csv", dtype={"shape": str})
    found = placements.spreads(ns_dir, shapes=placements.defaults(ns_dir))
    assert found
    for s in found:
        row = sweep[(sweep["op"] == s.op) & (sweep["shape"] == s.shape)].iloc[0]
        reported = (row["cuda_over_triton_hi"] - row["cuda_over_triton_lo"]) / 2 / row["cuda_over_triton"]
        between = float(row["between_runs"]) if "between_runs" in row and row["between_runs"] == row["between_runs"] else 0.0
        reported = math.sqrt(reported ** 2 - between ** 2)  # the interval within the run, without the component between runs
        # the same interval up to the ratio estimator's weighting of the placements
        assert s.half_width() == pytest.approx(reported, rel=0.02), (s.op, s.shape)
        assert s.half_width(2 * len(s.by_placement)) < s.half_width()


def known(tmp_path: Path, effect: list[float], rounds: int = 12, seed: int = 7, placed: int = 3) -> Path:
    """A namespace whose cuda kernel takes 10·effect[p] µs on placement p, triton 10 µs."""
    ns_dir = tmp_path / "ns-1"
    (ns_dir / "tables").mkdir(parents=True)
    cfg = {"namespace": "ns-1", "seed": seed, "cache_mode": "hot", "capture": {"placements": placed},
           "operations": {"softmax": {"default": "64x64"}}}
    (ns_dir / "provenance.json").write_text(json.dumps({"config": cfg}))
    where = round_placements(rounds, placed, seed)
    rows = [{"namespace": "ns-1", "op": "softmax", "shape": "64x64", "impl": impl, "round": r, "calls": 10,
             "kernel_time_us": 10.0 * (effect[where[r]] if impl == "cuda" else 1.0)}
            for r in range(rounds) for impl in ("cuda", "triton")]
    pd.DataFrame(rows).to_csv(ns_dir / "tables" / "rounds.csv", index=False)
    return ns_dir


def test_each_round_is_put_back_on_its_placement(tmp_path: Path) -> None:
    (s,) = placements.spreads(known(tmp_path, [1.0, 1.02, 1.04]))
    assert s.by_placement == pytest.approx((1.0, 1.02, 1.04))
    assert s.rounds == 12 and s.sd == pytest.approx(0.02)
    t2 = 4.302652729911275  # Student's t at 0.975, 2 degrees of freedom
    assert s.half_width() == pytest.approx(t2 * 0.02 / math.sqrt(3) / 1.02, rel=1e-3)


def test_a_run_on_one_placement_has_no_spread(tmp_path: Path) -> None:
    ns_dir = known(tmp_path, [1.0], placed=1)
    with pytest.raises(EvidenceError, match="one placement"):
        placements.spreads(ns_dir)


def test_the_script_prints_each_default_shape_and_refuses_in_one_sentence(tmp_path: Path) -> None:
    script = ROOT / "scripts" / "placement_spread.py"
    known(tmp_path, [1.0, 1.02, 1.04])
    ok = subprocess.run([sys.executable, str(script), "ns-1", "--artifacts", str(tmp_path), "--placements", "3", "6"],
                        capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "ns-1 softmax 64x64 cuda/triton by placement: 1.000 1.020 1.040 | sd 2.00%" in ok.stdout
    bad = subprocess.run([sys.executable, str(script), "nosuch-1", "--artifacts", str(tmp_path)],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "no namespace nosuch-1" in bad.stderr


def test_the_documented_command_runs_on_the_committed_namespaces() -> None:
    line = next(ln for ln in (ROOT / "docs" / "method.md").read_text().splitlines()
                if ln.startswith("python3 scripts/placement_spread.py "))
    proc = subprocess.run([sys.executable, *line.split()[1:]], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    names = line.split()[2:]
    assert len(proc.stdout.splitlines()) == 5 * len(names)  # the five operations at their default shapes
    assert all(any(ln.startswith(f"{n} softmax 4096x1024 cuda/triton") for ln in proc.stdout.splitlines()) for n in names)
