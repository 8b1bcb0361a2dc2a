"""scripts/bench_render.py times the render step over a committed namespace and says whether it
wrote the files committed; by default over the newest full run, whose page is not committed."""

from __future__ import annotations

import re
import subprocess
import sys

from harness import ROOT, namespaces

SCRIPT = ROOT / "scripts" / "bench_render.py"


def test_it_renders_the_newest_full_run_into_the_files_committed() -> None:
    committed = [p.parent.name for p in (ROOT / "report").glob("*/field_note.md")]
    ns = namespaces.newest(committed, "h200-ops-")
    assert ns is not None
    proc = subprocess.run([sys.executable, str(SCRIPT), "--repeat", "1"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(rf"{re.escape(str(ns))}: render \d+\.\d\d s \(best of 1, in one process, imports aside\); "
                        r"the same files as committed\n", proc.stdout), proc.stdout


def test_the_newest_of_a_prefix_is_the_highest_number_not_the_last_in_order() -> None:
    names = ["h200-ops-9", "h200-ops-10", "h200-ops-2", "h200-ops-x", "h200-ops-defaults-1", "h200-resolution-40"]
    assert namespaces.newest(names, "h200-ops-") == "h200-ops-10"
    assert namespaces.newest(names, "h200-resolution-") == "h200-resolution-40"
    assert namespaces.newest(names, "h100-") is None
