"""The between-run component (harness.evidence.between_runs, harness.tables.stats.widen): the
Paule-Mandel estimate on runs of known spread, the lookup a pair falls back on, the widened
interval and verdict the tables write, the command, and the config's block against the committed
runs it names."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import ROOT
from harness.errors import EvidenceError
from harness.evidence import between_runs
from harness.measure.order import round_placements
from harness.tables import derive, stats


def test_runs_that_spread_as_their_intervals_say_add_nothing() -> None:
    # x spread with sd 0.001 and every run's own se 0.002: the runs hold each other, tau is 0
    runs = [(0.001, 0.002), (-0.001, 0.002), (0.0005, 0.002), (-0.0005, 0.002)]
    assert between_runs.paule_mandel([runs]) == (0.0, 3)


def test_a_spread_beyond_the_intervals_is_the_component() -> None:
    xs = [0.01, -0.01, 0.012, -0.012, 0.0]
    se = 0.001
    tau, df = between_runs.paule_mandel([[(x, se) for x in xs]])
    assert df == 4
    # equal weights: sum (x - mean)^2 / (se^2 + tau^2) = df, solved for tau
    ss = sum(x * x for x in xs)
    assert tau == pytest.approx(math.sqrt(ss / df - se * se), rel=1e-6)


def test_only_the_spread_inside_a_session_counts() -> None:
    # two sessions far apart, each tight: no component; one session of one run adds nothing
    a = [(0.10, 0.001), (0.1001, 0.001)]
    b = [(-0.10, 0.001), (-0.1001, 0.001)]
    assert between_runs.paule_mandel([a, b, [(0.5, 0.001)]]) == (0.0, 2)
    assert between_runs.paule_mandel([[(0.5, 0.001)]]) == (0.0, 0)


def test_a_pair_takes_its_own_component_else_its_operations_largest_else_the_largest() -> None:
    block = {"softmax": {"cuda/triton": {"sd": 0.002, "df": 12}, "cuda.twin/cuda": {"sd": 0.0005, "df": 8}},
             "matmul": {"cuda/triton": {"sd": 0.0004, "df": 4}}}
    assert stats.between_run(block, "softmax", "cuda.twin", "cuda") == (0.0005, 8)
    assert stats.between_run(block, "softmax", "cuda", "cuda@HEAD") == (0.002, 12)
    assert stats.between_run(block, "layernorm", "cuda", "triton") == (0.002, 12)
    assert stats.between_run(None, "softmax", "cuda", "triton") == (0.0, 0)
    assert stats.between_run({}, "softmax", "cuda", "triton") == (0.0, 0)


def test_the_interval_widens_by_the_component_in_quadrature() -> None:
    assert stats.widen(1.0, 0.99, 1.01, 0.0, 12) == (0.99, 1.01, 0.0)
    lo, hi, added = stats.widen(1.02, 1.01, 1.04, 0.003, 12)
    t12 = stats.t_quantile(0.975, 12)
    assert added == pytest.approx(t12 * 0.003)
    assert lo == pytest.approx(1.02 - math.hypot(0.01, t12 * 0.003 * 1.02))
    assert hi == pytest.approx(1.02 + math.hypot(0.02, t12 * 0.003 * 1.02))


def test_the_tables_verdict_reads_the_widened_interval() -> None:
    # ours 0.7% slower on every placement, within-run spread small: "same" alone; a component of
    # 0.3% widens the interval past 1 + margin (still above 1), so the verdict becomes "slower"
    rounds = 30
    where = round_placements(rounds, 6, 1)
    per_round = {"cuda": [10.07 + 0.01 * (where[r] % 2) for r in range(rounds)], "triton": [10.0] * rounds}
    alone = derive.ratio(per_round, "cuda", "triton", ("softmax", "64x64"), 0.01, where)
    assert alone["verdict"] == stats.SAME and alone["between_runs"] == 0.0
    block = {"softmax": {"cuda/triton": {"sd": 0.003, "df": 12}}}
    wide = derive.ratio(per_round, "cuda", "triton", ("softmax", "64x64"), 0.01, where, block)
    assert wide["ratio"] == alone["ratio"]
    assert wide["ratio_lo"] > 1.0 and wide["ratio_hi"] > 1.01 and wide["verdict"] == stats.SLOWER
    assert wide["between_runs"] == pytest.approx(stats.t_quantile(0.975, 12) * 0.003)
    assert wide["half_width"] > alone["half_width"]


def _namespace(root: Path, name: str, commit: str, effect: float, seed: int = 3, rounds: int = 12,
               placed: int = 3) -> Path:
    """A namespace whose cuda takes 10*effect*(1 + 0.002*placement) µs, triton 10 µs, twin = cuda."""
    ns_dir = root / name
    (ns_dir / "tables").mkdir(parents=True)
    cfg = {"namespace": name, "seed": seed, "cache_mode": "hot", "capture": {"placements": placed}}
    (ns_dir / "provenance.json").write_text(json.dumps({"config": cfg, "git": {"commit": commit}}))
    where = round_placements(rounds, placed, seed)
    lines = ["namespace,op,shape,impl,round,calls,kernel_time_us"]
    for r in range(rounds):
        ours = 10.0 * effect * (1 + 0.002 * where[r])
        for impl, value in (("cuda", ours), ("cuda.twin", ours), ("triton", 10.0)):
            lines.append(f"{name},softmax,64x64,{impl},{r},10,{value!r}")
    (ns_dir / "tables" / "rounds.csv").write_text("\n".join(lines) + "\n")
    return ns_dir


def test_runs_that_move_between_them_give_the_pairs_component(tmp_path: Path) -> None:
    effects = [1.00, 1.01, 0.99, 1.005]
    dirs = [_namespace(tmp_path, f"r-{i}", "c1", e) for i, e in enumerate(effects)]
    comp = between_runs.estimate(dirs)["softmax"]
    assert set(comp) == {"cuda/triton", "cuda.twin/cuda"}
    assert comp["cuda.twin/cuda"]["sd"] == 0.0  # the twin is ours, round for round
    assert comp["cuda/triton"]["df"] == 3 and comp["cuda/triton"]["runs"] == 4
    logs = [math.log(e) for e in effects]
    mean = sum(logs) / len(logs)
    spread = math.sqrt(sum((x - mean) ** 2 for x in logs) / 3)
    assert 0.5 * spread < comp["cuda/triton"]["sd"] <= spread  # the runs' own intervals take a little of it


def test_runs_at_two_commits_are_two_sessions(tmp_path: Path) -> None:
    # each session tight, the two far apart: nothing between runs of one session
    dirs = [_namespace(tmp_path, "a-1", "c1", 1.00), _namespace(tmp_path, "a-2", "c1", 1.00),
            _namespace(tmp_path, "b-1", "c2", 1.05), _namespace(tmp_path, "b-2", "c2", 1.05)]
    comp = between_runs.estimate(dirs)["softmax"]["cuda/triton"]
    assert comp["sd"] == 0.0 and comp["df"] == 2


RUNS = [f"h200-resolution-{i}" for i in range(13, 28)]
"""The committed runs the config's block was estimated from (docs/method.md#between-runs names them)."""


def test_the_configs_block_is_what_the_command_gives_from_its_runs() -> None:
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    assert between_runs.estimate([ROOT / "artifacts" / name for name in RUNS]) == cfg["verdict"]["between_runs"]
    assert all(entry["runs"] >= 10 for pairs in cfg["verdict"]["between_runs"].values() for entry in pairs.values())


def test_the_command_prints_the_block_and_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    for i in range(2):
        _namespace(tmp_path, f"r-{i}", "c1", 1.0 + 0.01 * i)
    done = subprocess.run([sys.executable, "-m", "harness", "between-runs", "r-0", "r-1", "--artifacts", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    printed = yaml.safe_load(done.stdout)["between_runs"]
    assert printed["softmax"]["cuda/triton"]["runs"] == 2
    bad = subprocess.run([sys.executable, "-m", "harness", "between-runs", "nope", "--artifacts", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "nope" in bad.stderr
    one = subprocess.run([sys.executable, "-m", "harness", "between-runs", "r-0", "--artifacts", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT)
    assert one.returncode == 2 and "two runs" in one.stderr


def test_a_run_without_rounds_is_refused(tmp_path: Path) -> None:
    ns_dir = _namespace(tmp_path, "r-0", "c1", 1.0)
    (ns_dir / "tables" / "rounds.csv").unlink()
    with pytest.raises(EvidenceError, match="rounds.csv"):
        between_runs.run_ratios(ns_dir)


def test_the_pairs_are_those_the_tables_give_a_ratio_of() -> None:
    """The sweep's pairs present, each variant over its base, ours over each of its baselines; a
    variant whose base was not measured has none."""
    from harness.tables import derive

    got = derive.ratio_pairs(["cuda", "triton", "torch", "cuda.twin", "triton.x", "cuda@main"])
    assert got[:2] == [("cuda", "triton"), ("cuda", "torch")]  # no external: its pair is left out
    assert set(got[2:]) == {("cuda.twin", "cuda"), ("triton.x", "triton"), ("cuda", "cuda@main")}
    assert derive.ratio_pairs(["cuda.twin", "triton"]) == []
