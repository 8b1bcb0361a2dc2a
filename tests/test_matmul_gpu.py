"""Our matrix-product kernels (and the library call) on a CUDA GPU: correct against a float64
reference for aligned and tail shapes, every output element written, TF32 off, and the offline
census describing the code that runs.

GPU tests are marked `gpu` (conftest.py skips them without a GPU; they also skip when CUDA is not
available); the reference's own check against exact sums runs on the CPU everywhere.
"""

from __future__ import annotations

import math

import pytest

import torch  # noqa: E402

from harness import ops
from harness.build import census, toolchain
from harness.build.build import device_arch
from harness.errors import EvidenceError  # noqa: E402
from harness.ops.matmul.kernels import (  # noqa: E402
    cuda_instance,
    launch_cuda,
    launch_triton,
    triton_instance,
)


# FP32 sums of K products: the rounding error grows like sqrt(K) * 2**-24 * |partial sums|; with
# outputs of O(1) it stays near 1e-5 at K = 4096, while an indexing or tail mistake gives O(1)
# errors, one dropped k term about 1/sqrt(K) (0.016 at K = 4096), and TF32 inputs about 1e-3.
ATOL = 1e-4
RTOL = 1e-4

SHAPES = [
    (1024, 1024, 1024),  # the default shape
    (2048, 2048, 2048),
    (4096, 4096, 1024),
    (256, 256, 4096),    # long K
    (64, 64, 32),        # exactly one tile
    (1, 1, 1),
    (7, 5, 3),           # everything smaller than a tile
    (65, 68, 33),        # one past a tile in M and K; N % 4 == 0
    (100, 132, 257),     # M, N, K tails with N % 4 == 0
    (1000, 1001, 999),   # N % 4 != 0: the scalar CUDA path
    (129, 130, 4096),    # tails with long K
    (3, 4096, 5),
    (4097, 3, 64),
]
LAUNCHERS = {"cuda": launch_cuda, "triton": launch_triton}


def _inputs(m: int, n: int, k: int, seed: int) -> tuple:
    """Fresh standard-normal A (scaled by 1/sqrt(K), so C is O(1)) and B on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=gen) / math.sqrt(k)
    b = torch.randn(k, n, device="cuda", generator=gen)
    return a, b


def _reference(a, b):
    return a.double() @ b.double()


def _run(impl: str, a, b):
    """Launch into a NaN-poisoned output and wait for it."""
    out = torch.full((a.shape[0], b.shape[1]), float("nan"), device=a.device)
    LAUNCHERS[impl](a, b, out)
    torch.cuda.synchronize()
    return out


def _check(out, ref) -> None:
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert not torch.isnan(out).any(), f"{int(torch.isnan(out).sum())} output elements not written"
    err = (out.double() - ref).abs()
    worst = int(err.argmax())
    assert bool((err <= ATOL + RTOL * ref.abs()).all()), (
        f"max abs error {float(err.max()):.3g} at flat index {worst} (ref {float(ref.flatten()[worst]):.3g})")


# ----------------------------------------------------------------------------- CPU


def test_reference_matches_exact_sums_on_cpu() -> None:
    """The operation's float64 reference against math.fsum of the products (exact rounding)."""
    from harness.ops import get

    gen = torch.Generator().manual_seed(5)
    a = torch.randn(9, 13, generator=gen) / math.sqrt(13)
    b = torch.randn(13, 6, generator=gen)
    ref = get("matmul").reference({"a": a, "b": b}, {})
    assert ref.dtype == torch.float64
    exact = torch.tensor([[math.fsum(float(a[i, t]) * float(b[t, j]) for t in range(13))
                           for j in range(6)] for i in range(9)], dtype=torch.float64)
    assert torch.allclose(ref, exact, rtol=1e-13, atol=1e-13)


# ----------------------------------------------------------------------------- GPU: correctness


@pytest.mark.parametrize("impl", sorted(LAUNCHERS))
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_matches_float64_reference(impl: str, shape: tuple[int, int, int]) -> None:
    a, b = _inputs(*shape, seed=sum(shape))
    _check(_run(impl, a, b), _reference(a, b))


# Every choice the dispatch or a variant can make for the tiled kernels (N % 4 == K % 4 == 0), at
# shapes with M, N and K tails against their tiles.
CHOICES = {
    "tiled-128x128x16x8": ("-DMM_TILE=128",),
    "tiled-128x128x8x8": ("-DMM_TILE=128", "-DMM_BK=8"),
    "tiled-128x64x16x8": ("-DMM_TILE=128", "-DMM_BN=64"),
    "tiled-64x128x16x4": ("-DMM_TILE=128", "-DMM_BM=64", "-DMM_ROWS=4"),
    "tiled-64x64x32x4": ("-DMM_TILE=128", "-DMM_BM=64", "-DMM_BN=64", "-DMM_BK=32", "-DMM_ROWS=4"),
    "tiled-64x64x16x4": ("-DMM_TILE=128", "-DMM_BM=64", "-DMM_BN=64", "-DMM_BK=16", "-DMM_ROWS=4"),
    "tiled-64x64x32x8": ("-DMM_TILE=128", "-DMM_BM=64", "-DMM_BN=64", "-DMM_BK=32", "-DMM_ROWS=8"),
    "tiled-thread-rows": ("-DMM_TILE=128", "-DMM_THREAD_ROWS=1"),
    "staged128": ("-DMM_TILE=128", "-DMM_STAGED128=1"),
    "split2-64x64x32x4": ("-DMM_SPLIT_K=2",),
    "split4-128x128x16x8": ("-DMM_TILE=128", "-DMM_SPLIT_K=4"),
    "split2-128x64x16x8": ("-DMM_TILE=128", "-DMM_BN=64", "-DMM_SPLIT_K=2", "-DMM_SPLIT_MIN_BLOCKS=2"),
    "ring2-64x64x32x4": ("-DMM_STAGES=2",),
    "ring3-64x64x32x4": ("-DMM_STAGES=3",),
    "ring3-128x128x16x8": ("-DMM_TILE=128", "-DMM_STAGES=3"),
    "ring4-64x64x16x4": ("-DMM_STAGES=4", "-DMM_BK=16"),
    "ring3-128x128x8x8": ("-DMM_TILE=128", "-DMM_STAGES=3", "-DMM_BK=8"),
    "ring3-128x64x16x8": ("-DMM_TILE=128", "-DMM_STAGES=3", "-DMM_BN=64"),
    "ring3-64x128x16x4": ("-DMM_TILE=128", "-DMM_STAGES=3", "-DMM_BM=64", "-DMM_ROWS=4"),
    "ring4-128x128x8x8": ("-DMM_TILE=128", "-DMM_STAGES=4", "-DMM_BK=8"),
    "ring2-128x256x16x8-cols16": ("-DMM_TILE=128", "-DMM_STAGES=2", "-DMM_BN=256", "-DMM_BK=16", "-DMM_COLS=16"),
    "ring2-64x256x16x4-cols16": ("-DMM_STAGES=2", "-DMM_BN=256", "-DMM_BK=16", "-DMM_COLS=16"),
    "ring3-128x128x16x8-cols16": ("-DMM_TILE=128", "-DMM_STAGES=3", "-DMM_BK=16", "-DMM_COLS=16"),
    "ring2-64x64x16x4-cols16": ("-DMM_STAGES=2", "-DMM_BK=16", "-DMM_COLS=16"),
}
TAIL_SHAPES = [(65, 68, 36), (100, 132, 260), (129, 192, 4096), (300, 260, 20), (1, 4, 4), (256, 384, 12)]


@pytest.mark.parametrize("choice", sorted(CHOICES))
@pytest.mark.parametrize("shape", TAIL_SHAPES, ids=["x".join(map(str, s)) for s in TAIL_SHAPES])
def test_every_tiled_choice_matches_float64_reference(choice: str, shape: tuple[int, int, int]) -> None:
    from harness.launch import cuda as cuda_module

    a, b = _inputs(*shape, seed=3 * sum(shape) + len(choice))
    with cuda_module.variant_options(CHOICES[choice]):
        assert cuda_instance(*shape).family != "cp"  # the choice is the kernel that runs
        out = _run("cuda", a, b)
    _check(out, _reference(a, b))


@pytest.mark.parametrize("shape", ["1024x1024x1024", "4096x4096x1024", "1000x1001x999", "7x5x3"])
@pytest.mark.parametrize("impl", ["cuda", "triton", "torch"])
def test_operation_implementations(impl: str, shape: str) -> None:
    """Through the operation's interface, as the pipeline's check calls it (torch included)."""
    op = ops.get("matmul")
    op.validate_shape(shape)
    inputs = op.make_inputs(shape, 20261129, {})
    assert all(t.dtype == torch.float32 and t.is_cuda for t in inputs.values())
    assert all(bool((t != 0).any()) for t in inputs.values())
    out = op.make_output(inputs, shape)
    out.fill_(float("nan"))
    result = ops.run("matmul", impl, inputs, out, {}, shape)
    torch.cuda.synchronize()
    if impl != "torch":
        assert result is out
    _check(result, op.reference(inputs, {}))
    if impl == "torch":
        assert torch.backends.cuda.matmul.allow_tf32 is False
        assert torch.get_float32_matmul_precision() == "highest"


def test_tolerance_rejects_tf32_inputs() -> None:
    """The tolerance is tight enough to tell TF32 from FP32: inputs rounded to TF32's 10-bit
    mantissa (round to nearest, in software) give a product outside it at K = 4096."""
    a, b = _inputs(256, 256, 4096, seed=17)

    def tf32(x):
        bits = x.view(torch.int32)
        return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)

    ref = _reference(a, b)
    emulated = (tf32(a).double() @ tf32(b).double()).float()
    err = (emulated.double() - ref).abs()
    assert not bool((err <= ATOL + RTOL * ref.abs()).all())
    assert float(err.max()) > 3 * ATOL


@pytest.mark.parametrize("impl", sorted(LAUNCHERS))
def test_repeated_runs_are_identical(impl: str) -> None:
    """No race: the same inputs give bitwise the same output every time."""
    a, b = _inputs(513, 516, 1000, seed=7)
    first = _run(impl, a, b)
    for _ in range(3):
        assert torch.equal(_run(impl, a, b), first)


@pytest.mark.parametrize("impl", sorted(LAUNCHERS))
def test_runs_on_torchs_current_stream(impl: str) -> None:
    a, b = _inputs(300, 260, 700, seed=3)
    out = torch.full((300, 260), float("nan"), device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        LAUNCHERS[impl](a, b, out)
    stream.synchronize()
    _check(out, _reference(a, b))


@pytest.mark.parametrize("impl", sorted(LAUNCHERS))
def test_empty_products(impl: str) -> None:
    """M = 0 writes nothing; K = 0 writes zeros."""
    launch = LAUNCHERS[impl]
    launch(torch.empty(0, 8, device="cuda"), torch.randn(8, 4, device="cuda"),
           torch.empty(0, 4, device="cuda"))
    out = torch.full((5, 4), float("nan"), device="cuda")
    launch(torch.empty(5, 0, device="cuda"), torch.empty(0, 4, device="cuda"), out)
    torch.cuda.synchronize()
    assert bool((out == 0).all())


@pytest.mark.parametrize("impl", sorted(LAUNCHERS))
def test_bad_arguments_are_refused_in_one_sentence(impl: str) -> None:
    a, b = _inputs(16, 8, 12, seed=5)
    out = torch.empty(16, 8, device="cuda")
    launch = LAUNCHERS[impl]
    with pytest.raises(EvidenceError, match="float32"):
        launch(a.double(), b, out)
    with pytest.raises(EvidenceError, match="contiguous"):
        launch(a, b.t().contiguous().t(), out)
    with pytest.raises(EvidenceError, match="aligned"):
        flat = torch.randn(16 * 12 + 1, device="cuda")
        launch(flat[1:].view(16, 12), b, out)
    with pytest.raises(EvidenceError, match="do not chain"):
        launch(a, torch.randn(11, 8, device="cuda"), out)
    with pytest.raises(EvidenceError, match="output"):
        launch(a, b, out[:4])
    with pytest.raises(EvidenceError, match="overlaps"):
        square = torch.randn(12, 12, device="cuda")
        launch(square, square.clone(), square)
    with pytest.raises(EvidenceError, match="matrix"):
        launch(a.reshape(-1), b, out)


# ----------------------------------------------------------------------------- census vs run time




@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (1000, 1001, 999)])
def test_cuda_census_matches_the_loaded_kernel(shape: tuple[int, int, int]) -> None:
    """The offline census (same NVRTC options) reports what CuPy compiled and loaded."""
    from harness.launch import cuda as cuda_module
    from harness.ops.matmul.kernels import CUDA_SOURCE

    v = cuda_instance(*shape)
    a, b = _inputs(*shape, seed=1)
    _run("cuda", a, b)  # compile and load at run time
    with cuda_module.on_device(a.device):
        kernel = cuda_module.get_function(CUDA_SOURCE, v.kernel)
        runtime_regs, runtime_local = kernel.num_regs, kernel.local_size_bytes
    from harness.build.build import build_census

    (row,) = [r for r in build_census("matmul", "cuda", [shape], arch=device_arch(),
                                      cuda_compiler="nvrtc") if r["kernel"] == v.kernel]
    assert runtime_regs == row["registers"]
    assert runtime_local == 0 and row["spill_stores"] == 0 and row["sass_local"] == 0


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (4096, 4096, 1024), (1000, 1001, 999)])
def test_triton_census_matches_the_jit_kernel(shape: tuple[int, int, int]) -> None:
    """The offline Triton compile is the JIT's kernel: same PTX, registers and no spills."""
    from harness.build.build import compile_triton
    from kernels.matmul.matmul_triton import matmul_fwd

    v = triton_instance(*shape)
    a, b = _inputs(*shape, seed=2)
    out = torch.empty(shape[0], shape[1], device="cuda")
    jit = matmul_fwd[(v.programs,)](a, b, out, num_warps=v.num_warps, num_stages=v.num_stages,
                                    **v.constexprs())
    torch.cuda.synchronize()
    offline, log = compile_triton(v, device_arch())
    jit._init_handles()  # done by the launch already (idempotent); it sets n_regs and n_spills
    offline_regs = census.parse_res_usage(toolchain.resource_usage(offline.asm["cubin"]))
    assert jit.n_regs == offline_regs["matmul_fwd"].registers
    assert jit.n_regs == census.parse_ptxas_log(log)["matmul_fwd"].registers
    assert census.ptx_code(jit.asm["ptx"]) == census.ptx_code(offline.asm["ptx"])
    assert jit.n_spills == 0
