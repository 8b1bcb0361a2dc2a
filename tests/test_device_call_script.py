"""scripts/device_call.sh on the CPU, with a stand-in for scripts/h200_run.sh that records what it
was asked: each word becomes one run with its own pack and settings, in order, and a run whose
budget the call no longer has is not started; and scripts/h200_run.sh itself, run with nothing to
run, for what it keeps out of the environment of what it starts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import ROOT

SCRIPT = ROOT / "scripts" / "device_call.sh"

STAND_IN = """#!/usr/bin/env bash
echo "PACK=$PACK RUN_TESTS=${RUN_TESTS:-} PIPELINE=${PIPELINE:-} AS_TYPED=${AS_TYPED:-} TIERS=${TIERS:-} \
CONFIGFILE=${CONFIGFILE:-} SNAKE_TIMEOUT=$SNAKE_TIMEOUT" >> "$RECORD"
sleep "${SLEEP:-0}"
echo "namespace: ns-$PACK"
echo "snakemake: 1 s, rc=0"
"""


def call(tmp_path: Path, *words: str, limit: int = 540, sleep: float = 0, only_on: str = "",
         gpu: str = "", commit: str = "") -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run the script on `words` with the stand-in; `gpu` is the name a stand-in nvidia-smi prints
    (nothing where empty), `only_on` the script's ONLY_ON and `commit` its EVIDENCE_GIT_COMMIT."""
    stand_in = tmp_path / "run.sh"
    stand_in.write_text(STAND_IN)
    record = tmp_path / "record.txt"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if gpu or only_on:  # a stand-in even for no GPU: a real nvidia-smi on PATH must not answer
        (bin_dir / "nvidia-smi").write_text(f'#!/usr/bin/env bash\n[ -n "{gpu}" ] && echo "{gpu}"\n')
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "H200_RUN": str(stand_in), "RECORD": str(record), "LIMIT": str(limit),
           "SLEEP": str(sleep), "ONLY_ON": only_on, "EVIDENCE_GIT_COMMIT": commit}
    proc = subprocess.run(["bash", str(SCRIPT), *words], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    return proc, record.read_text().splitlines() if record.is_file() else []


def test_each_word_is_one_run_packed_apart_in_order(tmp_path: Path) -> None:
    proc, runs = call(tmp_path, "suite", "main", "resolution", "cap-resolution:60", "resolution")
    assert proc.returncode == 0, proc.stderr
    assert runs == [
        "PACK=suite RUN_TESTS= PIPELINE=0 AS_TYPED= TIERS=full CONFIGFILE= SNAKE_TIMEOUT=240",
        "PACK=main RUN_TESTS=0 PIPELINE= AS_TYPED=1 TIERS= CONFIGFILE= SNAKE_TIMEOUT=180",
        "PACK=resolution RUN_TESTS=0 PIPELINE= AS_TYPED= TIERS= CONFIGFILE=workflow/configs/resolution.yaml SNAKE_TIMEOUT=75",
        "PACK=cap-resolution RUN_TESTS=0 PIPELINE= AS_TYPED= TIERS= CONFIGFILE=workflow/configs/cap-resolution.yaml "
        "SNAKE_TIMEOUT=60",
        "PACK=resolution-2 RUN_TESTS=0 PIPELINE= AS_TYPED= TIERS= CONFIGFILE=workflow/configs/resolution.yaml SNAKE_TIMEOUT=75",
    ]
    assert "namespace: ns-resolution-2" in proc.stdout and proc.stdout.rstrip().splitlines()[-1].startswith("call: ")


def test_a_run_whose_budget_is_no_longer_left_is_not_started(tmp_path: Path) -> None:
    proc, runs = call(tmp_path, "resolution:2", "resolution:2", limit=4, sleep=3)
    assert proc.returncode == 0, proc.stderr
    assert [r.split()[0] for r in runs] == ["PACK=resolution"]  # after 3 s, the second no longer had 2 s
    assert re.search(r"^resolution-2: not started, [01] s of the call left and its budget 2 s$", proc.stdout, re.M)


@pytest.mark.parametrize("gpu", ["NVIDIA H100 80GB HBM3", ""])
def test_only_on_runs_nothing_on_another_gpu_and_says_which_came(tmp_path: Path, gpu: str) -> None:
    proc, runs = call(tmp_path, "suite", "main", only_on="H200", gpu=gpu)
    assert proc.returncode == 2 and runs == []
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("device_call: the GPU here is ")
    assert (gpu or "none nvidia-smi can name") in proc.stderr and "not the H200" in proc.stderr


def test_only_on_runs_every_word_on_the_gpu_it_names(tmp_path: Path) -> None:
    proc, runs = call(tmp_path, "suite", "main", only_on="H200", gpu="NVIDIA H200")
    assert proc.returncode == 0, proc.stderr
    assert [r.split()[0] for r in runs] == ["PACK=suite", "PACK=main"]
    assert proc.stdout.startswith("device_call: NVIDIA H200, as ONLY_ON=H200 asks")


@pytest.mark.parametrize("commit", ["d315235", "D315235" + "0" * 33, "0" * 41])
def test_a_commit_that_is_not_a_full_hash_stops_it_before_any_run(tmp_path: Path, commit: str) -> None:
    proc, runs = call(tmp_path, "suite", commit=commit)
    assert proc.returncode == 2 and runs == [] and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"device_call: EVIDENCE_GIT_COMMIT is '{commit}', not a full commit hash")


def test_a_full_commit_hash_runs(tmp_path: Path) -> None:
    proc, runs = call(tmp_path, "suite", commit="0123456789abcdef" * 2 + "01234567")
    assert proc.returncode == 0 and [r.split()[0] for r in runs] == ["PACK=suite"]


@pytest.mark.parametrize("words", [[], ["main"] * 9, ["main", "no-such-config"], ["main:0"], ["main:"], ["../config"],
                                   ["suite", "main:ten"]])
def test_a_word_it_does_not_take_stops_it_in_one_sentence_before_any_run(tmp_path: Path, words: list[str]) -> None:
    proc, runs = call(tmp_path, *words)
    assert proc.returncode == 2 and runs == []
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("device_call: ")


def test_h200_run_takes_pack_and_namespace_out_of_the_environment_before_anything_runs(tmp_path: Path) -> None:
    """scripts/h200_run.sh itself, with nothing to run (no tests, no pipeline): the environment of
    what it starts (a stand-in nvidia-smi records it) holds neither PACK nor NAMESPACE, whose values
    a namespace's own name holds and which the capture and the bundle would withhold from its
    reports, and the run still comes back packed under PACK's name."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dump = tmp_path / "env.txt"
    (bin_dir / "nvidia-smi").write_text(f'#!/usr/bin/env bash\nenv > "{dump}"\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    out = tmp_path / "out"
    env = {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin", "OUT": str(out), "PACK": "cap-resolution",
           "NAMESPACE": "h200-cap-resolution-9", "RUN_TESTS": "0", "PIPELINE": "0", "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "h200_run.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    assert "PACK" not in seen and "NAMESPACE" not in seen
    assert seen["PACK_TO"] == str(out / "cap-resolution.tgz") and seen["OUT"] != str(out)
    assert "namespace: h200-cap-resolution-9" in proc.stdout
    listed = subprocess.run(["tar", "tzf", str(out / "cap-resolution.tgz")], capture_output=True, text=True, check=True)
    assert "./env.txt" in listed.stdout.splitlines()
