"""Shared test set-up: GPU tests skip cleanly on machines without a CUDA GPU."""

from __future__ import annotations

import pytest

from harness.gpu import has_gpu


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
