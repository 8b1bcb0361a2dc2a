"""Shared test set-up: GPU tests skip cleanly on machines without a CUDA GPU."""

from __future__ import annotations

import pytest

from harness.gpu.device import has_gpu


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _hold_the_gpu(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """GPU tests hold the GPU's lock, so a test never measures while a pipeline run does."""
    if request.node.get_closest_marker("gpu") is None or not has_gpu():
        yield
        return
    from harness.gpu.lock import gpu_lock

    with gpu_lock(f"test {request.node.nodeid}"):
        yield
