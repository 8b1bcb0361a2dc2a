"""harness.gpu.device.require_visible_gpu, the check a process makes before it starts GPU work in
a child (the run's preflight, the measure step before nsys): it answers as torch would, without
importing torch where torch's version module and NVML can answer, and asks torch where they cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ToolMissing
from harness.gpu import device, preflight


def _package(tmp_path: Path, text: str | None) -> Path:
    package = tmp_path / "torch"
    package.mkdir()
    if text is not None:
        (package / "version.py").write_text(text)
    return package


@pytest.mark.parametrize(("text", "build"), [
    ("from typing import Optional\ncuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n", "13.0"),
    ("cuda = None\nhip = None\n", None),
    ("cuda = None\nhip = '6.2'\n", False),  # a ROCm build: torch itself is asked
    ("cuda = 13\n", False),
    ("this is not python\n", False),
    (None, False),
])
def test_the_build_is_read_from_torchs_version_module_alone(tmp_path: Path, text: str | None,
                                                            build: str | None | bool) -> None:
    assert device.torch_cuda_build(_package(tmp_path, text)) == build


@pytest.mark.parametrize(("build", "count", "asks_torch", "refused"), [
    ("13.0", 1, False, False),
    ("13.0", 0, False, True),
    (None, 1, False, True),
    (False, 1, True, False),
    ("13.0", None, True, False),
])
def test_torch_is_asked_only_where_nvml_or_the_version_module_cannot_answer(
        monkeypatch: pytest.MonkeyPatch, build: str | None | bool, count: int | None, asks_torch: bool,
        refused: bool) -> None:
    asked: list[bool] = []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(device, "torch_cuda_build", lambda package: build)
    monkeypatch.setattr(device, "nvml_device_count", lambda: count)
    monkeypatch.setattr(device, "require_gpu", lambda: asked.append(True))
    if refused:
        with pytest.raises(ToolMissing, match=r"^no CUDA GPU is visible here"):
            device.require_visible_gpu()
    else:
        device.require_visible_gpu()
    assert asked == ([True] if asks_torch else [])


def test_cuda_visible_devices_sends_the_question_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bool] = []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(device, "torch_cuda_build", lambda package: "13.0")
    monkeypatch.setattr(device, "nvml_device_count", lambda: 1)
    monkeypatch.setattr(device, "require_gpu", lambda: asked.append(True))
    device.require_visible_gpu()
    assert asked == [True]
    assert device.nvml_smallest_memory() is None  # NVML's devices are not this process's


def test_it_answers_as_torch_does_here() -> None:
    """On this machine, whatever it has: CPU CI (a build without CUDA) and the GPU machine alike."""
    try:
        device.require_visible_gpu()
        visible = True
    except ToolMissing:
        visible = False
    assert visible == device.has_gpu()


def test_a_run_needing_no_gpu_is_not_asked_for_one() -> None:
    assert preflight.problems([("tables", 0), ("render", 0)], {"nsys": {"path": "nsys"}, "operations": {}}) == []
