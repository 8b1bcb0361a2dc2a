"""scripts/bench_render.py times the render step over a committed namespace and says whether it
wrote the files committed; by default over the newest full run, whose page is not committed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from harness import ROOT, namespaces

SCRIPT = ROOT / "scripts" / "bench_render.py"


def test_it_renders_the_newest_full_run_into_the_files_committed() -> None:
    ns = namespaces.newest(namespaces.reported(ROOT), "h200-ops-")
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


def test_the_reported_namespaces_are_those_with_a_finished_field_note(tmp_path: Path) -> None:
    for name, files in {"b-run": ["field_note.md"], "a-run": ["field_note.md", "issue_comment.md"],
                        "unfinished": ["issue_comment.md"]}.items():
        for f in files:
            (tmp_path / "report" / name).mkdir(parents=True, exist_ok=True)
            (tmp_path / "report" / name / f).write_text("x")
    (tmp_path / "artifacts" / "c-run").mkdir(parents=True)
    assert namespaces.reported(tmp_path) == ["a-run", "b-run"]
    assert namespaces.reported(tmp_path / "absent") == []
