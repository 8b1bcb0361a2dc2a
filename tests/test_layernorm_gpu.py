"""Our layer-norm kernels on a CUDA GPU: correct against a float64 reference at every dispatch
path, every output element written, and the offline census describing the code that runs.

Skipped cleanly without a GPU (conftest.py skips the `gpu` marker; the module also skips when
torch, cupy or triton cannot be imported or CUDA is not available).
"""

from __future__ import annotations

import pytest

import torch  # noqa: E402

from harness.build import census, toolchain
from harness.build.build import device_arch
from harness.errors import EvidenceError  # noqa: E402
from harness.ops.layernorm.kernels import (  # noqa: E402
    cuda_instance,
    launch_cuda,
    launch_triton,
    triton_instance,
)

WIDTHS = [768, 1024, 2048, 4096, 8192, 1000, 771, 33, 4]
ROWS = [1, 7, 300]
EPS = 1e-5
ATOL = 1e-4
RTOL = 1e-4
LAUNCHERS = {"cuda": launch_cuda, "triton": launch_triton}


def _inputs(rows: int, n: int, seed: int) -> tuple:
    """Fresh random inputs with a mean far from 0 and a spread far from 1 (never zeros)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(rows, n, device="cuda", generator=gen) * 2.5 + 0.75
    w = torch.randn(n, device="cuda", generator=gen)
    b = torch.randn(n, device="cuda", generator=gen)
    return x, w, b


def _reference(x, w, b, eps: float):
    """Float64 layer norm (biased variance), computed on the upcast inputs."""
    xd = x.double()
    mean = xd.mean(dim=-1, keepdim=True)
    var = ((xd - mean) ** 2).mean(dim=-1, keepdim=True)
    return (xd - mean) / torch.sqrt(var + eps) * w.double() + b.double()


def _run(impl: str, x, w, b, eps: float = EPS):
    """Launch into a NaN-poisoned output and wait for it."""
    out = torch.full_like(x, float("nan"))
    LAUNCHERS[impl](x, w, b, eps, out)
    torch.cuda.synchronize()
    return out


def _check(out, ref) -> None:
    assert not torch.isnan(out).any(), f"{int(torch.isnan(out).sum())} output elements not written"
    err = (out.double() - ref).abs()
    max_abs = float(err.max())
    max_rel = max_abs / max(float(ref.abs().max()), 1e-30)  # normwise: ref has elements near 0
    assert max_abs <= ATOL, f"max abs error {max_abs:.3g} > {ATOL}"
    assert max_rel <= RTOL, f"max rel error {max_rel:.3g} > {RTOL}"
    assert bool((err <= ATOL + RTOL * ref.abs()).all())


@pytest.mark.parametrize("impl", sorted(LAUNCHERS))
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("n", WIDTHS)
def test_matches_float64_reference(impl: str, rows: int, n: int) -> None:
    x, w, b = _inputs(rows, n, seed=1000 * n + rows)
    out = _run(impl, x, w, b)
    _check(out, _reference(x, w, b, EPS))


@pytest.mark.parametrize("switch", ["-DLN_LATE_WB=1", "-DLN_LATE_WB=0", "-DLN_WARP_ROWS=1",
                                    "-DLN_WARP_ROWS=0", "-DLN_NARROW_BLOCK=64", "-DLN_NARROW_BLOCK=256",
                                    "-DLN_BLOCK=64", "-DLN_FIXED_WIDTH=0"])
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("n", WIDTHS)
def test_every_dispatch_choice_matches_float64_reference(switch: str, rows: int, n: int) -> None:
    """Each of the dispatch's choices (w and b loaded early or late; the warp-per-row path, whose
    last block has idle warps when rows % 4 != 0; the threads per row of the narrow and wide paths,
    where a row leaves slots empty; the width read at run time, the default before it was compiled
    in) is right wherever it can be chosen."""
    from harness.launch import cuda as cuda_module

    x, w, b = _inputs(rows, n, seed=1000 * n + rows + 17)
    with cuda_module.variant_options((switch,)):
        out = _run("cuda", x, w, b)
    _check(out, _reference(x, w, b, EPS))


@pytest.mark.parametrize("impl", sorted(LAUNCHERS))
def test_repeated_runs_are_identical(impl: str) -> None:
    """No race: the same inputs give bitwise the same output every time."""
    x, w, b = _inputs(513, 4096, seed=7)
    first = _run(impl, x, w, b)
    for _ in range(3):
        assert torch.equal(_run(impl, x, w, b), first)


@pytest.mark.parametrize("impl", sorted(LAUNCHERS))
@pytest.mark.parametrize("n", [2048, 771])
def test_large_mean_small_spread(impl: str, n: int) -> None:
    """A mean 1000 times the spread: the kernels shift each row by its first element, so this is
    as accurate as a centred row (E[x^2] - E[x]^2, or sums of raw x, would lose ~1e-3)."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    x = 1000.0 + torch.randn(64, n, device="cuda", generator=gen)
    w = torch.randn(n, device="cuda", generator=gen)
    b = torch.randn(n, device="cuda", generator=gen)
    out = _run(impl, x, w, b)
    _check(out, _reference(x, w, b, EPS))


@pytest.mark.parametrize("impl", sorted(LAUNCHERS))
def test_runs_on_torchs_current_stream(impl: str) -> None:
    x, w, b = _inputs(257, 768, seed=3)
    out = torch.full_like(x, float("nan"))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        LAUNCHERS[impl](x, w, b, EPS, out)
    stream.synchronize()
    _check(out, _reference(x, w, b, EPS))


@pytest.mark.parametrize("impl", sorted(LAUNCHERS))
def test_bad_arguments_are_refused_in_one_sentence(impl: str) -> None:
    x, w, b = _inputs(8, 768, seed=5)
    out = torch.empty_like(x)
    launch = LAUNCHERS[impl]
    with pytest.raises(EvidenceError, match="float32"):
        launch(x.double(), w, b, EPS, out)
    with pytest.raises(EvidenceError, match="contiguous"):
        launch(x.t(), w, b, EPS, out.t())
    with pytest.raises(EvidenceError, match="aligned"):
        flat = torch.randn(8 * 768 + 1, device="cuda")
        launch(flat[1:].view(8, 768), w, b, EPS, out)
    with pytest.raises(EvidenceError, match="shapes"):
        launch(x, w[:-4], b[:-4], EPS, out)
    with pytest.raises(EvidenceError, match="output"):
        launch(x, w, b, EPS, out[:4])
    with pytest.raises(EvidenceError, match="overlaps"):
        launch(x, w, b, EPS, x)
    with pytest.raises(EvidenceError, match="outside the supported range"):
        wide = torch.randn(2, 8196, device="cuda")
        launch(wide, torch.randn(8196, device="cuda"), torch.randn(8196, device="cuda"), EPS,
               torch.empty_like(wide))


# ----------------------------------------------------------------------------- census vs run time




@pytest.mark.parametrize("n", [768, 4096, 8192, 771])
def test_cuda_census_matches_the_loaded_kernel(n: int) -> None:
    """The offline census (same NVRTC options) reports what CuPy compiled and loaded."""
    from harness.launch import cuda as cuda_module
    from harness.ops.layernorm.kernels import CUDA_SOURCE

    v = cuda_instance(n)
    x, w, b = _inputs(4, n, seed=n)
    _run("cuda", x, w, b)  # compile and load at run time
    with cuda_module.on_device(x.device):
        kernel = cuda_module.get_function(CUDA_SOURCE, v.kernel)
        runtime_regs, runtime_local = kernel.num_regs, kernel.local_size_bytes
    build = toolchain.compile_offline(CUDA_SOURCE, [v.kernel], arch=device_arch(),
                                        compiler="nvrtc")
    info = census.parse_ptxas_log(build.ptxas_log)[build.lowered[v.kernel]]
    assert runtime_regs == info.registers
    assert runtime_local == 0 and info.spill_stores == 0


@pytest.mark.parametrize("n", [768, 4096, 771])
def test_triton_census_matches_the_jit_kernel(n: int) -> None:
    """The offline Triton compile has the registers and load widths of the JIT's kernel."""
    from harness.build.build import compile_triton
    from kernels.layernorm.layernorm_triton import layernorm_fwd

    v = triton_instance(n)
    x, w, b = _inputs(4, n, seed=n)
    out = torch.empty_like(x)
    jit = layernorm_fwd[(4,)](x, w, b, out, EPS, N=n, BLOCK_N=v.block_n, num_warps=v.num_warps)
    torch.cuda.synchronize()
    offline, log = compile_triton(v, device_arch())
    jit._init_handles()  # done by the launch already (idempotent); it sets n_regs and n_spills
    offline_regs = census.parse_res_usage(toolchain.resource_usage(offline.asm["cubin"]))
    assert jit.n_regs == offline_regs["layernorm_fwd"].registers
    assert jit.n_regs == census.parse_ptxas_log(log)["layernorm_fwd"].registers
    jit_ptx = census.parse_ptx(jit.asm["ptx"])["layernorm_fwd"]
    off_ptx = census.parse_ptx(offline.asm["ptx"])["layernorm_fwd"]
    assert (jit_ptx.ld_global, jit_ptx.st_global) == (off_ptx.ld_global, off_ptx.st_global)
    assert census.ptx_code(jit.asm["ptx"]) == census.ptx_code(offline.asm["ptx"])
    assert jit.n_spills == 0
