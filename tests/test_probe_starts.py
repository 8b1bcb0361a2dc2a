"""scripts/probe_starts.py on the CPU: every start it would time is a command whose Python code
compiles (a probe that cannot run wastes a GPU call), with nsys and ncu found or not, and
`--only` times just the starts it names."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from script_module import load_script


def load() -> Any:
    return load_script("probe_starts")


@pytest.mark.parametrize("tools", [True, False], ids=["with nsys and ncu", "without"])
def test_every_start_is_a_command_whose_code_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      tools: bool) -> None:
    probe = load()
    monkeypatch.setattr(shutil, "which", lambda tool: f"/opt/{tool}" if tools else None)
    commands = probe.commands(tmp_path)
    names = [name for name, _ in commands]
    assert len(names) == len(set(names))
    assert any("capture-range" in name for name in names) == tools
    for name, argv in commands:
        if "-c" in argv:
            compile(argv[argv.index("-c") + 1], name, "exec")


def test_a_range_that_is_not_stopped_is_left_to_the_exit() -> None:
    probe = load()
    assert "profiler.stop()" in probe.ranged(3) and "profiler.stop()" not in probe.ranged(3, stop=False)
    assert "before = spans()" in probe.ranged(3, spans=True)


def test_only_times_the_starts_it_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    probe = load()
    assert probe.main(["--repeat", "1", "--only", "nothing imported", "--out", str(tmp_path)]) == 0
    lines = (tmp_path / "starts.txt").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python, nothing imported")
