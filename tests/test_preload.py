"""harness.jobs.preload: the heavy libraries a GPU step needs after its group process are imported
while that process runs, in a thread; an import that fails there is left to the step's own."""

from __future__ import annotations

import subprocess
import sys

from harness.jobs import preload

CODE = """
import sys, time
from harness.jobs import preload
from harness.measure import step  # the measure step's module pulls in neither library itself
assert "pandas" not in sys.modules and "sqlite_utils" not in sys.modules, sorted(sys.modules)
thread = preload("pandas", "sqlite_utils", "no_such_library_here")
thread.join(60)
assert not thread.is_alive() and "pandas" in sys.modules and "sqlite_utils" in sys.modules
assert "no_such_library_here" not in sys.modules
print("ok")
"""


def test_the_measure_step_imports_its_libraries_only_when_preloaded() -> None:
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_a_library_that_fails_to_import_is_left_to_the_step() -> None:
    thread = preload("no_such_library_here")
    thread.join(10)
    assert not thread.is_alive() and thread.daemon
