"""Our transpose kernels on a CUDA GPU: bit-exact at every dispatch path and edge-tile case,
every output element written, and the offline census describing the code that runs.

GPU tests carry the `gpu` marker (conftest.py skips them without a GPU); the check of the
operation's reference against plain indexing runs anywhere.
"""

from __future__ import annotations

import pytest

import torch  # noqa: E402

from harness.build import census, toolchain
from harness.build.build import device_arch
from harness.errors import EvidenceError  # noqa: E402
from harness.ops.transpose.kernels import (  # noqa: E402
    cuda_instance,
    launch_cuda,
    launch_triton,
    triton_instance,
)


# Full tiles, partial tiles at the right / bottom / both edges, one-row and one-column matrices,
# vec4 (both dimensions % 4 == 0) and scalar shapes, and the configured sweep.
SHAPES = [(4096, 4096), (1024, 16384), (8192, 8192), (64, 64), (128, 192), (100, 36), (36, 100),
          (68, 132), (4, 4), (4, 8), (37, 100), (100, 37), (129, 67), (1, 1), (1, 1000),
          (1000, 1), (33, 31), (3, 5)]
LAUNCHERS = {"cuda": launch_cuda, "triton": launch_triton}
ATOL = 1e-12  # a transpose moves bits only: the tolerance schema needs atol > 0
RTOL = 1e-12


def _input(r: int, c: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(r, c, device="cuda", generator=gen)


def _run(impl: str, x):
    """Launch into a NaN-poisoned output and wait for it."""
    if impl == "torch":
        out = x.t().contiguous()
    else:
        out = torch.full((x.shape[1], x.shape[0]), float("nan"), device=x.device)
        LAUNCHERS[impl](x, out)
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("impl", ["cuda", "triton", "torch"])
@pytest.mark.parametrize(("r", "c"), SHAPES)
def test_bit_exact(impl: str, r: int, c: int) -> None:
    x = _input(r, c, seed=r * 100003 + c)
    out = _run(impl, x)
    assert not torch.isnan(out).any(), f"{int(torch.isnan(out).sum())} output elements not written"
    assert tuple(out.shape) == (c, r) and out.is_contiguous()
    assert torch.equal(out, x.t()), f"{int((out != x.t()).sum())} elements differ"


# Every switch of the vec4 path (the variants of config.yaml), at the vec4 shapes with full and cut tiles.
SWITCHES = {
    "narrow_rows": ("-DTP_LANES_C=8",),
    "block128": ("-DTP_BLOCK=128", "-DTP_LANES_C=8"),
    "triton_layout": ("-DTP_BLOCK=128",),
    "column_order": ("-DTP_ORDER=1", "-DTP_LANES_C=8"),
    "grouped_order": ("-DTP_ORDER=2", "-DTP_LANES_C=8"),
    "column_order_wide": ("-DTP_ORDER=1",),
    "async_copy": ("-DTP_ASYNC=1", "-DTP_LANES_C=8"),
    "async_copy128": ("-DTP_ASYNC=1", "-DTP_LANES_C=8", "-DTP_BLOCK=128"),
}
VEC4_SHAPES = [s for s in SHAPES if s[0] % 4 == 0 and s[1] % 4 == 0 and s[0] * s[1] <= 2**24] + [(520, 1096)]


@pytest.mark.parametrize("switch", sorted(SWITCHES))
@pytest.mark.parametrize(("r", "c"), VEC4_SHAPES)
def test_every_switch_is_bit_exact(switch: str, r: int, c: int) -> None:
    from harness.launch import cuda as cuda_module

    x = _input(r, c, seed=r * 7919 + c + len(switch))
    with cuda_module.variant_options(SWITCHES[switch]):
        assert cuda_instance(r, c).vec == 4
        out = _run("cuda", x)
    assert not torch.isnan(out).any(), f"{int(torch.isnan(out).sum())} output elements not written"
    assert torch.equal(out, x.t()), f"{int((out != x.t()).sum())} elements differ"


@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_every_element_lands_in_its_place(impl: str) -> None:
    """Each element holds its own flat index (exact in float32 below 2^24): a misplaced element
    shows where it came from."""
    r, c = 200, 132
    x = torch.arange(r * c, device="cuda", dtype=torch.float32).view(r, c)
    out = _run(impl, x)
    rows = torch.arange(r, device="cuda").view(1, r)
    cols = torch.arange(c, device="cuda").view(c, 1)
    assert torch.equal(out, (rows * c + cols).float())


@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_runs_on_torchs_current_stream(impl: str) -> None:
    x = _input(512, 768, seed=3)
    out = torch.full((768, 512), float("nan"), device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        LAUNCHERS[impl](x, out)
    stream.synchronize()
    assert torch.equal(out, x.t())


@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_bad_arguments_are_refused_in_one_sentence(impl: str) -> None:
    x = _input(8, 64, seed=5)
    out = torch.empty(64, 8, device="cuda")
    launch = LAUNCHERS[impl]
    with pytest.raises(EvidenceError, match="float32"):
        launch(x.double(), out)
    with pytest.raises(EvidenceError, match="contiguous"):
        launch(x.t(), out)
    with pytest.raises(EvidenceError, match="aligned"):
        flat = torch.randn(8 * 64 + 1, device="cuda")
        launch(flat[1:].view(8, 64), out)
    with pytest.raises(EvidenceError, match="transposed"):
        launch(x, torch.empty(8, 64, device="cuda"))
    with pytest.raises(EvidenceError, match="overlaps"):
        launch(x, x.view(64, 8))


# ----------------------------------------------------------------------------- reference (CPU)


def test_reference_matches_plain_indexing() -> None:
    from harness.ops import get

    x = torch.randn(7, 4, generator=torch.Generator().manual_seed(1))
    ref = get("transpose").reference({"x": x}, {})
    assert ref.dtype == torch.float64 and tuple(ref.shape) == (4, 7)
    for i in range(7):
        for j in range(4):
            assert ref[j, i].item() == x[i, j].item()


# ----------------------------------------------------------------------------- census vs run time




@pytest.mark.parametrize(("r", "c"), [(4096, 4096), (37, 100)])
def test_cuda_census_matches_the_loaded_kernel(r: int, c: int) -> None:
    """The offline census (same NVRTC options) reports what CuPy compiled and loaded."""
    from harness.launch import cuda as cuda_module
    from harness.ops.transpose.kernels import CUDA_SOURCE

    v = cuda_instance(r, c)
    x = _input(r, c, seed=1)
    _run("cuda", x)  # compile and load at run time
    with cuda_module.on_device(x.device):
        kernel = cuda_module.get_function(CUDA_SOURCE, v.kernel)
        runtime_regs, runtime_local = kernel.num_regs, kernel.local_size_bytes
    build = toolchain.compile_offline(CUDA_SOURCE, [v.kernel], arch=device_arch(),
                                        compiler="nvrtc")
    info = census.parse_ptxas_log(build.ptxas_log)[build.lowered[v.kernel]]
    assert runtime_regs == info.registers
    assert runtime_local == 0 and info.spill_stores == 0


@pytest.mark.parametrize(("r", "c"), [(4096, 4096), (37, 100)])
def test_triton_census_matches_the_jit_kernel(r: int, c: int) -> None:
    """The offline Triton compile has the registers and PTX of the JIT's kernel."""
    from harness.build.build import compile_triton

    v = triton_instance(r, c)
    x = _input(r, c, seed=2)
    out = torch.empty(c, r, device="cuda")
    jit = v.jit_function()[(1,)](x, out, **v.constexprs(), **v.compile_options())
    torch.cuda.synchronize()
    offline, log = compile_triton(v, device_arch())
    jit._init_handles()  # done by the launch already (idempotent); it sets n_regs and n_spills
    offline_regs = census.parse_res_usage(toolchain.resource_usage(offline.asm["cubin"]))
    assert jit.n_regs == offline_regs[v.kernel].registers
    assert jit.n_regs == census.parse_ptxas_log(log)[v.kernel].registers
    assert census.ptx_code(jit.asm["ptx"]) == census.ptx_code(offline.asm["ptx"])
    assert jit.n_spills == 0
