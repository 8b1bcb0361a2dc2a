"""scripts/bench_trust.py runs the trust step on a copy of the committed namespaces and refuses a
name that is none in one sentence."""

from __future__ import annotations

import re
import subprocess
import sys

from harness import ROOT

SCRIPT = ROOT / "scripts" / "bench_trust.py"


def test_it_times_the_trust_step_of_a_committed_namespace() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "h200-resolution-12", "--repeat", "1"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"h200-resolution-12: trust step \d+\.\d\d s \(best of 1, process start and imports included\), "
                        r"\d+ namespaces retained before it\n", proc.stdout)


def test_a_name_that_is_no_namespace_is_one_sentence() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "nosuch-1", "--repeat", "1"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "nosuch-1" in proc.stderr
