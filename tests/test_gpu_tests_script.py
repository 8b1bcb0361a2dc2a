"""scripts/gpu_tests.py, the GPU test tiers' runner, on the CPU: it reads pytest's summary line,
and writes the evidence file named by the commit with the tier, wall time and that line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import ROOT
from script_module import load_script

SCRIPT = ROOT / "scripts" / "gpu_tests.py"


def test_the_summary_line_is_pytests_last_one() -> None:
    gpu_tests = load_script("gpu_tests")
    out = "....F\nFAILED tests/x.py::t - boom\n= 1 failed, 857 passed, 3 skipped in 171.20s (0:02:51) =\n"
    assert gpu_tests.summary_line(out) == "1 failed, 857 passed, 3 skipped in 171.20s (0:02:51)"
    assert gpu_tests.summary_line("24 passed in 41.07s\n") == "24 passed in 41.07s"
    assert gpu_tests.summary_line("no tests here\n") == ""


def test_a_tier_run_writes_its_evidence_file_under_the_commit(tmp_path: Path) -> None:
    commit = "a" * 40
    env = {"PATH": "/usr/bin:/bin", "EVIDENCE_GIT_COMMIT": commit, "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "smoke", "--evidence-dir", str(tmp_path / "ev"),
                           "--out", str(tmp_path / "out"), "--", "tests/test_gpu_watch.py"],
                          capture_output=True, text=True, env={**env, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 5, proc.stdout[-2000:]  # every test of the file deselected by the tier's marker
    assert "gpu tests, smoke tier:" in proc.stdout
    text = (tmp_path / "ev" / f"{commit}.txt").read_text()
    assert text.startswith(f"commit: {commit}\n")
    assert "tier: smoke (pytest -m 'gpu and smoke'" in text and "wall time: " in text
    assert "pytest exit status: 5" in text and "deselected" in text.split("pytest: ")[-1]
    assert (tmp_path / "out" / f"{commit}.txt").read_text() == text


def test_the_slowest_phases_are_pytests_durations_slowest_first() -> None:
    gpu_tests = load_script("gpu_tests")
    out = ("============ slowest 5 durations ============\n"
           "3.21s setup    tests/a.py::t1\n41.07s call     tests/test_end_to_end_gpu.py::test_main[x]\n"
           "0.52s teardown tests/a.py::t1\n= 2 passed in 45.0s =\n")
    assert gpu_tests.slowest(out) == ["41.1 s tests/test_end_to_end_gpu.py::test_main[x] (call)",
                                      "3.2 s tests/a.py::t1 (setup)", "0.5 s tests/a.py::t1 (teardown)"]
    assert gpu_tests.slowest(out, 1) == ["41.1 s tests/test_end_to_end_gpu.py::test_main[x] (call)"]
    assert gpu_tests.slowest("no durations\n") == []


def _collected(tier: str, *args: str) -> set[str]:
    marker = {"smoke": "gpu and smoke", "full": "gpu"}[tier]
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", marker, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {line for line in proc.stdout.splitlines() if "::" in line}


@pytest.mark.parametrize("tier", ["smoke", "full"])
def test_a_tiers_files_hold_every_test_of_the_tier_and_the_end_to_end_run_comes_last(tier: str) -> None:
    gpu_tests = load_script("gpu_tests")
    files = gpu_tests.tier_files(tier)
    assert files[-1] == "tests/test_end_to_end_gpu.py" and "tests/test_ops_gpu.py" in files
    everywhere = _collected(tier)
    assert everywhere and _collected(tier, *files) == everywhere
    if tier == "full":  # fewer files than tests/ holds: the CPU test modules are not imported
        assert len(files) < len(list((ROOT / "tests").glob("test_*.py")))


def test_test_paths_after_the_separator_replace_the_tiers_files() -> None:
    gpu_tests = load_script("gpu_tests")
    assert gpu_tests.names_paths(["tests/test_gpu_watch.py"])
    assert gpu_tests.names_paths(["-x", "tests/test_ops_gpu.py::test_every_implementation_matches_its_reference"])
    assert not gpu_tests.names_paths(["-x", "-k", "layernorm"])
    assert not gpu_tests.names_paths(["tests/no_such_file.py"])


def test_prime_times_the_bytecode_and_each_tools_first_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--prime compiles the packages on PYTHONPATH that lack bytecode and starts nsys and ncu once,
    each timed; a tool that is missing or fails is said to be, and the tier still runs."""
    gpu_tests = load_script("gpu_tests")
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("X = 1\n")
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "nsys").write_text("#!/bin/sh\nexit 0\n")
    (tools / "ncu").write_text("#!/bin/sh\nexit 3\n")
    for tool in ("nsys", "ncu"):
        (tools / tool).chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{site}")
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin:/bin")
    line = gpu_tests.prime(tmp_path)
    assert re.fullmatch(rf"bytecode of {re.escape(str(site))} \d+\.\d s; first nsys start \d+\.\d s; "
                        r"first ncu start \d+\.\d s, exit status 3", line), line
    assert list((site / "pkg" / "__pycache__").glob("__init__.*.pyc"))
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    assert gpu_tests.prime(tmp_path) == ("no package folder on PYTHONPATH to compile; "
                                         "first nsys start skipped (not found); first ncu start skipped (not found)")


def test_a_primed_tier_says_so_in_its_section() -> None:
    gpu_tests = load_script("gpu_tests")
    facts = {"gpu": "g", "driver": "d", "nsys": "n", "ncu": "c"}
    text = gpu_tests.section("smoke", facts, 50.0, "1 passed in 49.0s", 0, [], "first nsys start 4.0 s")
    assert "primed before the tier, outside its wall time: first nsys start 4.0 s\nwall time: 50.0 s\n" in text
    assert "primed" not in gpu_tests.section("smoke", facts, 50.0, "", 0)


def test_a_narrowed_tier_says_so_in_its_section() -> None:
    gpu_tests = load_script("gpu_tests")
    facts = {"gpu": "g", "driver": "d", "nsys": "n", "ncu": "c"}
    text = gpu_tests.section("full", facts, 50.0, "3 passed in 49.0s", 0, [], "", ["tests/test_baseline_gpu.py"])
    assert "narrowed to (not the whole tier): tests/test_baseline_gpu.py\n" in text
    assert "narrowed" not in gpu_tests.section("full", facts, 50.0, "", 0)
