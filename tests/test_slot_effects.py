"""scripts/slot_effects.py on a namespace of known slot effects: a slow round is marked where it
was, and a first call's extra time shows at its place in the slot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness import ROOT

SCRIPT = ROOT / "scripts" / "slot_effects.py"


def _namespace(root: Path) -> Path:
    ns = root / "ns-1"
    (ns / "tables").mkdir(parents=True)
    rows = ["namespace,op,shape,impl,round,calls,kernel_time_us"]
    for r in range(6):
        rows.append(f"ns-1,softmax,64x64,cuda,{r},3,{10.5 if r == 2 else 10.0}")
        rows.append(f"ns-1,softmax,64x64,triton,{r},3,10.0")
    (ns / "tables" / "rounds.csv").write_text("\n".join(rows) + "\n")
    measure = ns / "measure" / "softmax" / "64x64"
    measure.mkdir(parents=True)
    lines = ["op,shape,impl,round,kernel,short_name,duration_ns,grid,block,registers,static_smem,dynamic_smem"]
    for r in range(6):
        for place in range(3):
            ns_ = 1100 if place == 0 else 1000
            lines.append(f"softmax,64x64,triton,{r},k,k,{ns_},1x1x1,1x1x1,1,0,0")
            lines.append(f"softmax,64x64,cuda,{r},c,c,1000,1x1x1,1x1x1,1,0,0")
    (measure / "launches.csv").write_text("\n".join(lines) + "\n")
    return ns


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


def test_a_slow_round_and_a_slow_first_call_are_shown_where_they_were(tmp_path: Path) -> None:
    _namespace(tmp_path)
    done = run("ns-1", "--op", "softmax", "--artifacts", str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0] == "ns-1 softmax 64x64: calls per round [3]"
    assert any(line.split()[0] == "cuda" and line.split()[1] == "..#..." for line in out)
    assert any(line.split()[0] == "triton" and line.split()[1] == "......" for line in out)
    placed = next(line for line in out if "triton by place" in line)
    assert placed.split(":")[1].split() == ["+10.0", "+0.0", "+0.0"]
    dropped = run("ns-1", "--op", "softmax", "--drop", "1", "--artifacts", str(tmp_path)).stdout
    # triton's mean over every call is 1033.3 ns, 1000 without each slot's first
    assert "cuda/triton: 0.9677 over every call, 1.0000 without the first 1 of each slot" in dropped


def test_a_namespace_without_rounds_is_refused(tmp_path: Path) -> None:
    done = run("nope", "--op", "softmax", "--artifacts", str(tmp_path))
    assert done.returncode == 2 and "nope" in done.stderr
