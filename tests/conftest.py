"""Shared test set-up: GPU tests (marked `gpu`, and every test of a file named test_*_gpu.py) skip
cleanly on machines without a CUDA GPU, and hold the GPU's lock where there is one."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from harness.gpu.device import has_gpu

# The build cache of the whole test run (and of every Snakemake it starts) lies in a folder of its
# own, never the user's: tests see builds of their own making only.
if "EVIDENCE_BUILD_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["EVIDENCE_BUILD_CACHE"] = tempfile.mkdtemp(prefix="evidence-build-cache-")
    atexit.register(shutil.rmtree, os.environ["EVIDENCE_BUILD_CACHE"], True)  # removed when the run ends


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # a file named test_*_gpu.py holds GPU tests only
        if item.path.name.endswith("_gpu.py") and item.get_closest_marker("gpu") is None:
            item.add_marker(pytest.mark.gpu)
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _hold_the_gpu(request: pytest.FixtureRequest) -> Iterator[None]:
    """GPU tests hold the GPU's lock, so a test never measures while a pipeline run does, and
    leave no process behind: one the test started and left running is killed, and the test fails
    naming it."""
    if request.node.get_closest_marker("gpu") is None or not has_gpu():
        yield
        return
    from harness.gpu.lock import gpu_lock
    from harness.gpu.watch import descendants

    before = descendants()
    with gpu_lock(f"test {request.node.nodeid}"):
        yield
    left = sorted(descendants() - before)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"the test left processes running: pids {left} (killed)"


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], CompletedProcess[str]]:
    """One run of the main command on the CPU (tests/repo_copy.py's pipeline_run), shared by the
    tests that read what it left: (the repository copy, its environment, the finished process)."""
    import repo_copy

    return repo_copy.pipeline_run(tmp_path_factory.mktemp("pipeline"))
