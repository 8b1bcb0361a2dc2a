"""The external implementation kind on the GPU: the committed PTX fixtures loaded through
cupy.RawModule(path=...) and launched on torch tensors, compared with torch exactly."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness import ROOT
from harness.build import toolchain
from harness.launch import external


FIXTURES = Path(__file__).parent / "fixtures" / "external"
TRANSPOSE = {"path": str((FIXTURES / "transpose_naive.ptx").relative_to(ROOT)),
             "entry": "transpose_naive", "grid": ["cdiv(cols, 32)", "cdiv(rows, 32)"],
             "block": [32, 8], "args": ["x", "out", "rows:int32", "cols:int32"]}
OP = SimpleNamespace(name="transpose", dim_names=("rows", "cols"))


@pytest.fixture(autouse=True)
def _needs_sm90() -> None:
    """The fixtures are PTX for sm_90, which the driver cannot load on an older GPU."""
    import torch

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the fixture PTX targets sm_90")


def _random(shape: tuple[int, ...], seed: int):  # noqa: ANN202
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", dtype=torch.float32, generator=gen) + 0.25


@pytest.mark.parametrize("shape", [(300, 500), (1024, 4096), (1, 1), (33, 31), (4097, 3)])
def test_transpose_fixture_equals_torch(shape: tuple[int, int]) -> None:
    import torch

    x = _random(shape, seed=sum(shape))
    out = torch.full((shape[1], shape[0]), float("nan"), device="cuda")
    launch = external.make_launcher(OP, TRANSPOSE)
    result = launch({"x": x}, out, {})
    torch.cuda.synchronize()
    assert result is out
    assert not torch.isnan(out).any()  # every element written
    assert torch.equal(out, x.t())


def test_dims_explicit_and_from_dims_of() -> None:
    import torch

    x = _random((64, 96), seed=3)
    expected = x.t().contiguous()
    seen: list[tuple[int, ...]] = []

    def dims_of(inputs: Mapping[str, Any], out: object) -> dict[str, int]:
        seen.append(tuple(inputs["x"].shape))
        return {"rows": inputs["x"].shape[0], "cols": inputs["x"].shape[1]}

    out = torch.full((96, 64), float("nan"), device="cuda")
    external.make_launcher(OP, TRANSPOSE, dims_of=dims_of)({"x": x}, out, {})
    torch.cuda.synchronize()
    assert seen == [(64, 96)] and torch.equal(out, expected)
    out.fill_(float("nan"))
    external.make_launcher(OP, TRANSPOSE)({"x": x}, out, {}, dims={"rows": 64, "cols": 96})
    torch.cuda.synchronize()
    assert torch.equal(out, expected)


def test_launch_runs_on_torchs_current_stream() -> None:
    import torch

    x = _random((2048, 2048), seed=5)
    out = torch.full((2048, 2048), float("nan"), device="cuda")
    launch = external.make_launcher(OP, TRANSPOSE)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)  # keep the stream busy: a launch elsewhere would overtake
        launch({"x": x}, out, {})
        done = torch.cuda.Event()
        done.record(stream)
    done.synchronize()
    assert torch.equal(out, x.t())


@pytest.mark.parametrize("shared_bytes", [16 * 1024, 96 * 1024])
def test_dynamic_shared_memory_reaches_the_launch(shared_bytes: int) -> None:
    """reverse_chunks reverses x in chunks of shared_bytes / 4 floats held in dynamic shared
    memory; 96 KB is over the 48 KB a kernel gets without raising its limit."""
    import torch

    chunk = shared_bytes // 4
    cfg = {"path": str((FIXTURES / "reverse_chunks.ptx").relative_to(ROOT)),
           "entry": "reverse_chunks", "grid": [f"cdiv(n, {chunk})"],
           "block": [256], "shared_bytes": shared_bytes,
           "args": ["x", "out", "n:int32", "chunk:int32"]}
    op = SimpleNamespace(name="reverse", dim_names=("n",))
    n = 5 * chunk + 123
    x = _random((n,), seed=7)
    out = torch.full_like(x, float("nan"))
    external.make_launcher(op, cfg)({"x": x}, out, {"chunk": chunk})
    torch.cuda.synchronize()
    expected = torch.cat([piece.flip(0) for piece in x.split(chunk)])
    assert torch.equal(out, expected)


def test_cubin_loads_and_runs(tmp_path: Path) -> None:
    import torch

    ptxas = toolchain.find_tool("ptxas")
    if ptxas is None:
        pytest.skip("ptxas not found")
    major, minor = torch.cuda.get_device_capability()
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run([str(ptxas), f"-arch=sm_{major}{minor}", str(FIXTURES / "transpose_naive.ptx"),
                    "-o", str(root / "t.cubin")], check=True)
    cfg = {**TRANSPOSE, "path": "t.cubin"}
    x = _random((300, 500), seed=11)
    out = torch.full((500, 300), float("nan"), device="cuda")
    external.make_launcher(OP, cfg, root=root)({"x": x}, out, {})
    torch.cuda.synchronize()
    assert torch.equal(out, x.t())
