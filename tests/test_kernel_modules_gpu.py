"""The build's cubins at run time, on the GPU, through the pipeline's own check
(harness.measure.check.run_check, as a group process binds and calls ours): with nothing built,
every operation's CUDA kernel is compiled through CuPy; after the build (harness.build.build,
the build job's call) the same check loads the build's cubin instead, and that is the code CuPy
compiled: the same registers and local memory, and bit for bit the same output on the same
inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import config
from harness.build.build import build_census, device_arch
from harness.launch import cuda, modules
from harness.measure.check import run_check
from harness.shapes import parse_shape

CFG = config.load(config.ROOT / "config.yaml")


def _check(op: str, shape: str) -> tuple[dict, list[dict[str, str]], list[tuple[int, int]]]:
    """The check record of ours, where its modules came from, and their kernels' (registers,
    local bytes), in a process whose module cache was emptied first."""
    cuda._raw_module.cache_clear()
    cuda._LOADED.clear()
    record = run_check(op, shape, "cuda", config.operation_block(CFG, op), 7)
    loaded = cuda.loaded()
    kernels = []
    for m in loaded:
        function = cuda.get_function(m["source"], m["kernel"])
        kernels.append((function.num_regs, function.local_size_bytes))
    return record, loaded, kernels


@pytest.mark.parametrize("op", sorted(CFG["operations"]))
def test_the_check_loads_the_builds_cubin_and_it_is_what_cupy_compiles(op: str, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(modules.ENV, str(tmp_path / "cache"))
    shape = CFG["operations"][op]["default"]
    compiled, how, kernels = _check(op, shape)
    assert compiled["passed"] and how and {m["module"] for m in how} == {"compiled"}
    build_census(op, "cuda", [parse_shape(shape)], arch=device_arch(), outdir=tmp_path / "build")
    built, how_built, kernels_built = _check(op, shape)
    assert built["passed"] and how_built and all(m["module"].startswith("build cache") for m in how_built)
    assert [(m["source"], m["kernel"]) for m in how_built] == [(m["source"], m["kernel"]) for m in how]
    assert kernels_built == kernels
    for figure in ("max_abs_err", "max_rel_err", "rel_l2_err"):
        assert built[figure] == compiled[figure]
