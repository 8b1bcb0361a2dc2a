"""Our softmax kernels on a CUDA GPU: correct against a float64 reference at every dispatch path,
every output element written, and the offline census describing the code that runs.

GPU tests carry the `gpu` marker (conftest.py skips them without a GPU); the check of the
operation's reference against plain Python runs anywhere.
"""

from __future__ import annotations

import math

import pytest

import torch  # noqa: E402

from harness.build import census, toolchain
from harness.build.build import device_arch
from harness.errors import EvidenceError  # noqa: E402
from harness.ops.softmax.kernels import (  # noqa: E402
    cuda_instance,
    launch_cuda,
    launch_triton,
    triton_instance,
)


# Every CUDA path (warp vec4/scalar, block vec4 at 256/512/1024 threads, block scalar, online
# vec4/scalar) and both Triton programs, with tails: widths not a multiple of the block's sweep.
WIDTHS = [256, 1024, 4096, 5000, 32768, 40000, 1, 4, 33, 771, 1025, 8193, 12345]
ROWS = [1, 7, 130]
# FP32 has no cancellation here (ratios of positive sums): relative errors are about
# (|x - max| + log2 n) * 2^-24 plus a few ulp, < 5e-6 for these inputs; outputs below ATOL are
# negligible probability mass (and may flush to zero).
ATOL = 1e-10
RTOL = 2e-5
LAUNCHERS = {"cuda": launch_cuda, "triton": launch_triton}


def _inputs(rows: int, n: int, seed: int, scale: float = 3.0, shift: float = 0.0):
    """randn * scale + shift on the GPU (never zeros)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(rows, n, device="cuda", generator=gen) * scale + shift


def _reference(x):
    return torch.softmax(x.double(), dim=-1)


def _run(impl: str, x):
    """Launch into a NaN-poisoned output and wait for it."""
    if impl == "torch":
        out = torch.softmax(x, dim=-1)
    else:
        out = torch.full_like(x, float("nan"))
        LAUNCHERS[impl](x, out)
    torch.cuda.synchronize()
    return out


def _check(out, ref) -> None:
    assert not torch.isnan(out).any(), f"{int(torch.isnan(out).sum())} output elements not written"
    err = (out.double() - ref).abs()
    bad = err > ATOL + RTOL * ref.abs()
    if bool(bad.any()):
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(f"{int(bad.sum())} elements off; first at flat index {i}: got "
                             f"{float(out.flatten()[i])!r}, want {float(ref.flatten()[i])!r}")


@pytest.mark.parametrize("impl", ["cuda", "triton", "torch"])
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("n", WIDTHS)
def test_matches_float64_reference(impl: str, rows: int, n: int) -> None:
    x = _inputs(rows, n, seed=1000 * n + rows)
    _check(_run(impl, x), _reference(x))


@pytest.mark.parametrize("impl", ["cuda", "triton"])
@pytest.mark.parametrize("n", [256, 4096, 771, 32768, 12345])
def test_rows_sum_to_one(impl: str, n: int) -> None:
    """Independent of the reference: each row is a probability distribution."""
    out = _run(impl, _inputs(33, n, seed=n))
    assert bool((out >= 0).all())
    sums = out.double().sum(dim=-1)
    assert float((sums - 1.0).abs().max()) < 1e-5


@pytest.mark.parametrize("impl", ["cuda", "triton"])
@pytest.mark.parametrize("n", [1024, 771, 40000])
def test_large_offset_does_not_overflow(impl: str, n: int) -> None:
    """x + 1000: exp(x) overflows in FP32, exp(x - max) does not (the max must be subtracted)."""
    x = _inputs(16, n, seed=5, shift=1000.0)
    _check(_run(impl, x), _reference(x))


@pytest.mark.parametrize("impl", ["cuda", "triton"])
@pytest.mark.parametrize("n", [256, 8192, 12345])
def test_wide_spread_underflows_to_zero_only(impl: str, n: int) -> None:
    """randn * 60: most exponentials underflow; what survives must still be accurate."""
    x = _inputs(16, n, seed=6, scale=60.0)
    _check(_run(impl, x), _reference(x))


@pytest.mark.parametrize("impl", ["cuda", "triton"])
@pytest.mark.parametrize("n", [4096, 32768])
def test_repeated_runs_are_identical(impl: str, n: int) -> None:
    """No race: the same inputs give bitwise the same output every time."""
    x = _inputs(257, n, seed=7)
    first = _run(impl, x)
    for _ in range(3):
        assert torch.equal(_run(impl, x), first)


@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_runs_on_torchs_current_stream(impl: str) -> None:
    x = _inputs(257, 1024, seed=3)
    out = torch.full_like(x, float("nan"))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        LAUNCHERS[impl](x, out)
    stream.synchronize()
    _check(out, _reference(x))


@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_bad_arguments_are_refused_in_one_sentence(impl: str) -> None:
    x = _inputs(8, 1024, seed=5)
    out = torch.empty_like(x)
    launch = LAUNCHERS[impl]
    with pytest.raises(EvidenceError, match="float32"):
        launch(x.double(), out)
    with pytest.raises(EvidenceError, match="contiguous"):
        launch(x.t(), out.t())
    with pytest.raises(EvidenceError, match="aligned"):
        flat = torch.randn(8 * 1024 + 1, device="cuda")
        launch(flat[1:].view(8, 1024), out)
    with pytest.raises(EvidenceError, match="output"):
        launch(x, out[:4])
    with pytest.raises(EvidenceError, match="overlaps"):
        launch(x, x)
    with pytest.raises(EvidenceError, match="width 0"):
        launch(torch.empty(4, 0, device="cuda"), torch.empty(4, 0, device="cuda"))


# ----------------------------------------------------------------------------- reference (CPU)


def test_reference_matches_plain_python_loops() -> None:
    """The operation's float64 reference against exp / sum written out in Python (CPU tensors)."""
    from harness.ops import get

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 37, generator=gen) * 3.0
    x[2] += 500.0  # far from zero: the reference must subtract the row max
    ref = get("softmax").reference({"x": x}, {})
    assert ref.dtype == torch.float64 and tuple(ref.shape) == (5, 37)
    for r, row in enumerate(x.double().tolist()):
        m = max(row)
        total = math.fsum(math.exp(v - m) for v in row)
        want = [math.exp(v - m) / total for v in row]
        assert ref[r].tolist() == pytest.approx(want, rel=1e-13, abs=0.0)


# ----------------------------------------------------------------------------- census vs run time




@pytest.mark.parametrize("n", [256, 1024, 4096, 32768, 771, 40000])
def test_cuda_census_matches_the_loaded_kernel(n: int) -> None:
    """The offline census (same NVRTC options) reports what CuPy compiled and loaded."""
    from harness.launch import cuda as cuda_module
    from harness.ops.softmax.kernels import CUDA_SOURCE

    v = cuda_instance(n)
    x = _inputs(4, n, seed=n)
    _run("cuda", x)  # compile and load at run time
    with cuda_module.on_device(x.device):
        kernel = cuda_module.get_function(CUDA_SOURCE, v.kernel)
        runtime_regs, runtime_local = kernel.num_regs, kernel.local_size_bytes
    build = toolchain.compile_offline(CUDA_SOURCE, [v.kernel], arch=device_arch(),
                                        compiler="nvrtc")
    info = census.parse_ptxas_log(build.ptxas_log)[build.lowered[v.kernel]]
    assert runtime_regs == info.registers
    assert runtime_local == 0 and info.spill_stores == 0


@pytest.mark.parametrize("n", [1024, 771, 32768])
def test_triton_census_matches_the_jit_kernel(n: int) -> None:
    """The offline Triton compile has the registers and PTX of the JIT's kernel."""
    from harness.build.build import compile_triton

    v = triton_instance(n)
    x = _inputs(4, n, seed=n)
    out = torch.empty_like(x)
    jit = v.jit_function()[(4,)](x, out, **v.constexprs(), **v.compile_options())
    torch.cuda.synchronize()
    offline, log = compile_triton(v, device_arch())
    jit._init_handles()  # done by the launch already (idempotent); it sets n_regs and n_spills
    offline_regs = census.parse_res_usage(toolchain.resource_usage(offline.asm["cubin"]))
    assert jit.n_regs == offline_regs[v.kernel].registers
    assert jit.n_regs == census.parse_ptxas_log(log)[v.kernel].registers
    assert census.ptx_code(jit.asm["ptx"]) == census.ptx_code(offline.asm["ptx"])
    assert jit.n_spills == 0
