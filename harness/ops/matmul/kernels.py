"""Launchers for our two FP32 matrix-product kernels, and the one dispatch on shape they share with
the census.

`cuda_instance(m, n, k)` and `triton_instance(m, n, k)` decide which compiled instance serves
an M x N x K product (A [M, K] @ B [K, N]); `launch_cuda` / `launch_triton` launch exactly that
one, and `harness.build` compiles exactly the ones `instances_for` lists, so the census describes
the code that runs.

CUDA (kernels/matmul/matmul.cu), dispatched by shape (`cuda_instance`):
    N % 4 == K % 4 == 0, C has >= 132 tiles of 128 x 128
                   matmul_f32_tiled<128, 128, 16, 8>   128 x 128 x 16 tiles, 256 threads, 8 x 8
                   outputs per thread, warp-tiled; B by cp.async, A staged in registers
    N % 4 == K % 4 == 0, fewer tiles
                   matmul_f32_ring<64, 64, 32, 4, 3>   64 x 64 x 32 tiles, 128 threads, 4 x 8 outputs
                   per thread; A and B by cp.async into a ring of three shared-memory stages
    otherwise      matmul_f32<VEC_B>   64 x 64 x 32 tiles, 256 threads, 4 x 4 outputs per thread,
                   cp.async double buffering, grid = ceil(M / 64) * ceil(N / 64) blocks:
        N % 4 == 0     matmul_f32<4>   B copied in 16-byte cp.async.cg, C stored as float4
        N % 4 != 0     matmul_f32<1>   B copied in 4-byte cp.async.ca, C stored as floats
        (A is always copied in 4-byte cp.async.ca, transposed into shared memory; any M, K.)
    The variants' defines replace a choice: MM_TILE (64: matmul_f32 at every shape; 128: the tiled
    kernel at every shape it can serve), MM_BM / MM_BN / MM_BK / MM_ROWS (the tiled kernel's
    instance wherever it serves), MM_STAGED128=1 (matmul_f32_128, the 128 x 128 x 8 kernel before
    it, A and B staged in registers, where the tiled kernel would serve), MM_SPLIT_K=2 or 4
    (matmul_f32_splitk, the tiled kernel's instance with each tile's K tiles shared by a cluster
    of that many blocks, grid = split * tiles; MM_SPLIT_MIN_BLOCKS sets its launch bounds),
    MM_STAGES=2, 3 or 4 (matmul_f32_ring, the tiled kernel's instance with both operands copied by
    cp.async into a ring of that many shared-memory stages, at most 48 KB, at every shape it serves)
    or 0 (matmul_f32_tiled at every shape it serves, A through registers: the small default before);
    with it, MM_COLS=16 (16 outputs a thread in each of its rows instead of 8; MM_BN may be 256).
Triton (kernels/matmul/matmul_triton.py), M, N, K compile-time constants (one instance per
shape), grid = ceil(M / 64) * ceil(N / 64) programs:
    any shape      BLOCK 64 x 64 x 32, GROUP_M = 8, 4 warps, 3 stages (`config_for`: measured
                   fastest or within 1.5 % of nine configurations on the H200)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy

from harness.errors import EvidenceError
from harness.launch import cuda as cuda_launch
from harness.launch import sources
from harness.launch import triton as triton_launch
from harness.launch.checks import check_apart, check_tensors
from harness.launch.cuda import Launch, dispatch_define
from harness.launch.instances import InstanceShapes, group_by_instance, pick_ours

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["InstanceShapes", "cuda_instance", "triton_instance", "instances_for", "launch_cuda",
           "launch_triton", "cuda_grid"]

CUDA_SOURCE = "matmul/matmul.cu"
"""Kernel source under kernels/ for the CUDA implementation."""

TRITON_SOURCE = "matmul/matmul_triton.py"
"""Kernel source under kernels/ for the Triton implementation."""

CUDA_TILE = (64, 64, 32)
"""(BLOCK_M, BLOCK_N, BLOCK_K) of the cp.async kernel matmul_f32 (fixed in kernels/matmul/matmul.cu)."""

CUDA_THREADS = 256
"""Threads per block of matmul_f32 and matmul_f32_128."""

TILE128_MIN_TILES = 132
"""Fewest 128 x 128 tiles of C for which the tiled kernel serves by default (the H200's SM count)."""

DEFAULT_TILED = (128, 128, 16, 8)
"""(BM, BN, BK, ROWS) of the tiled kernel where C has at least TILE128_MIN_TILES tiles of 128 x 128
and no variant names them (MM_BM, MM_BN, MM_BK, MM_ROWS)."""

DEFAULT_SMALL = (64, 64, 32, 4)
"""(BM, BN, BK, ROWS) of the tiled kernel for products with fewer tiles of 128 x 128 (as Triton's
64 x 64 x 32 programs of 4 warps: 4 x 8 outputs per thread, 128 threads)."""

DEFAULT_SMALL_STAGES = 3
"""Shared-memory stages of matmul_f32_ring, the default kernel below TILE128_MIN_TILES tiles of 128 x 128
(0 would be matmul_f32_tiled; MM_STAGES replaces it, and the large default's 0, at every shape)."""

MAX_DIM = 2**31 - 1
"""Largest M, N or K (the kernels take them as 32-bit integers)."""


# ----------------------------------------------------------------------------- dispatch


TILED_FAMILIES = ("tiled", "split", "ring")
"""The kernel families with the tiled kernel's tile and thread layout (bm, bn, bk, rows)."""

SMEM_LIMIT = 48 * 1024
"""Bytes of static shared memory a block may have (matmul_f32_ring's stages must fit)."""


@dataclass(frozen=True)
class CudaInstance:
    """One compiled instance of kernels/matmul/matmul.cu."""

    vec_b: int
    """Floats per copy of B and per store of C: 4 (N % 4 == 0) or 1."""

    family: str = "cp"
    """Which kernel: 'cp' is matmul_f32<VEC_B> (64 x 64 x 32 tiles, cp.async, any shape); 'tiled'
    is matmul_f32_tiled<bm, bn, bk, rows>, 'split' matmul_f32_splitk<bm, bn, bk, rows, split>, 'ring'
    matmul_f32_ring<bm, bn, bk, rows, stages> and 'staged' matmul_f32_128 (all four for N % 4 == 0
    and K % 4 == 0)."""

    bm: int = DEFAULT_TILED[0]
    bn: int = DEFAULT_TILED[1]
    bk: int = DEFAULT_TILED[2]
    rows: int = DEFAULT_TILED[3]
    """The tiled kernel's tile (bm x bn x bk) and output rows per thread (4 or 8); unused by the
    other kernels."""
    split: int = 1
    """Blocks (a cluster) sharing the K tiles of one tile of C: 2 or 4 for 'split', else 1."""
    stages: int = 2
    """Shared-memory stages: 2 to 4 for 'ring' (K tiles in flight: stages - 1), 2 for the others."""
    cols: int = 8
    """Outputs a thread in each of its rows: 8, or 16 for 'ring' (MM_COLS)."""

    source: str = CUDA_SOURCE
    dynamic_smem: int = 0

    @property
    def kernel(self) -> str:
        """The name expression that instantiates it, e.g. 'matmul_f32<4>' or
        'matmul_f32_tiled<128, 128, 16, 8>'."""
        if self.family == "tiled":
            return f"matmul_f32_tiled<{self.bm}, {self.bn}, {self.bk}, {self.rows}>"
        if self.family == "split":
            return f"matmul_f32_splitk<{self.bm}, {self.bn}, {self.bk}, {self.rows}, {self.split}>"
        if self.family == "ring":
            name = "matmul_f32_ring16" if self.cols == 16 else "matmul_f32_ring"
            return f"{name}<{self.bm}, {self.bn}, {self.bk}, {self.rows}, {self.stages}>"
        return "matmul_f32_128" if self.family == "staged" else f"matmul_f32<{self.vec_b}>"

    @property
    def block(self) -> int:
        """Threads per block: 256, or one per rows x cols outputs for the tiled, split and ring kernels."""
        if self.family in TILED_FAMILIES:
            return self.bm * self.bn // (self.cols * self.rows)
        return CUDA_THREADS

    @property
    def tile_mn(self) -> tuple[int, int]:
        """(rows, columns) of the tile of C one block (one cluster for 'split') computes."""
        if self.family in TILED_FAMILIES:
            return self.bm, self.bn
        return (128, 128) if self.family == "staged" else (CUDA_TILE[0], CUDA_TILE[1])

    @property
    def specialization(self) -> str:
        """Short description for tables, e.g. 'tile=64x64x32 vec_b=4 block=256'."""
        if self.family in TILED_FAMILIES:
            tile = (f"{self.bm}x{self.bn}x{self.bk} rows={self.rows}" + (f" split_k={self.split}" if self.split > 1 else "")
                    + (f" stages={self.stages}" if self.family == "ring" else "")
                    + (f" cols={self.cols}" if self.cols != 8 else ""))
        else:
            tile = "128x128x8 staged" if self.family == "staged" else "x".join(map(str, CUDA_TILE))
        return f"tile={tile} vec_b={self.vec_b} block={self.block}"


def tiled_instance(bm: int, bn: int, bk: int, rows: int, cols: int = 8) -> str | None:
    """Why (bm, bn, bk, rows) is not an instance matmul_f32_tiled compiles (its static_asserts and
    the launch limit), or None where it is; with `cols` = 16, the same for matmul_f32_ring's
    instance with 16 outputs a row."""
    threads = bm * bn // (cols * rows)
    if rows not in (4, 8) or (bm // rows) % 4 or bm % rows or bn % 64 or bk % 4:
        return "BM / ROWS must be a multiple of 4, BN of 64, BK of 4, and ROWS 4 or 8"
    if not 32 <= threads <= 1024 or (bm * bk // 4) % threads or (bk * bn // 4) % threads:
        return f"its {threads} threads must be 32 to 1024 and each must carry whole float4s of A and B"
    return None


def split_instance(bm: int, bn: int, bk: int, rows: int, split: int) -> str | None:
    """Why matmul_f32_splitk does not compile (bm, bn, bk, rows, split) (its static_asserts: each
    thread's 2 rows float4s of partial sums pass through the stages' shared memory in one or two
    rounds, each a multiple of `split`), or None where it does."""
    threads = bm * bn // (8 * rows)
    fit = 4 * (2 * bk * (bm + 4) + 2 * bk * bn) // (16 * threads)  # float4s a thread may park
    per_round = 2 * rows if 2 * rows <= fit else rows
    if per_round > fit or per_round % split:
        return f"{2 * rows} float4s of partial sums a thread do not pass through {fit} in rounds of a multiple of {split}"
    return None


def ring_instance(bm: int, bn: int, bk: int, stages: int) -> str | None:
    """Why matmul_f32_ring does not compile the tiled instance (bm, bn, bk, ...) with `stages` stages
    (its static_asserts beyond the tiled kernel's: BK 8, 16 or 32, the stages within SMEM_LIMIT), or
    None where it does."""
    smem = 4 * stages * (bm * bk + bk * bn)
    if bk not in (8, 16, 32):
        return f"its K tile must be 8, 16 or 32 floats, not {bk}"
    if smem > SMEM_LIMIT:
        return f"its {stages} stages of {bm}x{bk} and {bk}x{bn} floats take {smem} bytes of shared memory, more than {SMEM_LIMIT}"
    return None


@dataclass(frozen=True)
class TritonInstance:
    """One compiled instance of kernels/matmul/matmul_triton.py's `matmul_fwd`."""

    m: int
    n: int
    k: int
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    kernel: str = "matmul_fwd"
    source: str = TRITON_SOURCE

    @property
    def block(self) -> int:
        """Threads per program."""
        return 32 * self.num_warps

    @property
    def specialization(self) -> str:
        """Short description for tables, e.g. 'M=1024 N=1024 K=1024 BLOCK=64x64x32 ...'."""
        return (f"M={self.m} N={self.n} K={self.k} BLOCK={self.block_m}x{self.block_n}x"
                f"{self.block_k} GROUP_M={self.group_m} num_warps={self.num_warps} "
                f"num_stages={self.num_stages}")

    @property
    def programs(self) -> int:
        """Programs in the launch grid (one per tile of C)."""
        return math.ceil(self.m / self.block_m) * math.ceil(self.n / self.block_n)

    # The TritonSpec interface (harness.launch.instances) the offline build compiles from.

    def jit_function(self) -> Any:
        _kernels = sources.module("kernels.matmul.matmul_triton")
        matmul_fwd = _kernels.matmul_fwd

        return matmul_fwd

    def signature(self) -> dict[str, str]:
        """The signature the JIT derives for `matmul_fwd(a, b, c, M=, N=, K=, BLOCK_M=, ...)`."""
        return {"A": "*fp32", "B": "*fp32", "C": "*fp32", **{name: "constexpr" for name in
                self.constexprs()}}

    def constexprs(self) -> dict[str, Any]:
        return {"M": self.m, "N": self.n, "K": self.k, "BLOCK_M": self.block_m,
                "BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "GROUP_M": self.group_m}

    def aligned_args(self) -> tuple[int, ...]:
        """Arguments the JIT specializes as 16-byte aligned (torch allocations; the launcher checks)."""
        return (0, 1, 2)

    def compile_options(self) -> dict[str, Any]:
        return {"num_warps": self.num_warps, "num_stages": self.num_stages}


Instance = CudaInstance | TritonInstance


def _check_dims(m: int, n: int, k: int) -> None:
    for name, d in (("M", m), ("N", n), ("K", k)):
        if not 1 <= d <= MAX_DIM:
            raise EvidenceError(f"Matrix-product size {name} = {d} is outside the supported "
                                f"range 1..{MAX_DIM}.")


def cuda_instance(m: int, n: int, k: int) -> CudaInstance:
    """The CUDA instance that serves an M x N x K product (see the module docstring); the
    variants' defines replace a choice of the dispatch, where that kernel can serve the shape."""

    _check_dims(m, n, k)

    def define(name: str, allowed: tuple[str, ...]) -> str | None:
        return dispatch_define(name, lambda v: v in allowed, " or ".join(allowed), "Matrix-product")

    forced = define("MM_TILE", ("64", "128"))
    tiled = [define(name, allowed) for name, allowed in (("MM_BM", ("64", "128")), ("MM_BN", ("64", "128", "256")),
                                                          ("MM_BK", ("8", "16", "32")), ("MM_ROWS", ("4", "8")))]
    staged = define("MM_STAGED128", ("0", "1")) == "1"
    split = int(define("MM_SPLIT_K", ("1", "2", "4")) or 1)
    stages_define = define("MM_STAGES", ("0", "2", "3", "4"))
    cols = int(define("MM_COLS", ("8", "16")) or 8)
    if not (n % 4 == 0 and k % 4 == 0) or forced == "64":
        return CudaInstance(vec_b=4 if n % 4 == 0 else 1)
    large = cuda_grid(m, n, 128) >= TILE128_MIN_TILES or forced == "128"
    if staged and large:
        return CudaInstance(vec_b=4, family="staged")
    default = DEFAULT_TILED if large else DEFAULT_SMALL
    stages = int(stages_define) if stages_define is not None else (0 if large else DEFAULT_SMALL_STAGES)
    bm, bn, bk, rows = (int(v) if v is not None else d for v, d in zip(tiled, default, strict=True))
    if cols != 8 and (not stages or split > 1):
        raise EvidenceError(f"Matrix-product switch MM_COLS={cols} is the ring kernel's (MM_STAGES 2, 3 or 4, no "
                            "MM_SPLIT_K); the tiled and split kernels have 8 outputs a row.")
    why = tiled_instance(bm, bn, bk, rows, cols)
    if why is not None:
        raise EvidenceError(f"Matrix-product switches MM_BM/MM_BN/MM_BK/MM_ROWS name the tile {bm}x{bn}x{bk} "
                            f"with {rows} rows per thread, which the tiled kernel does not take: {why}.")
    if split > 1:
        why = split_instance(bm, bn, bk, rows, split)
        if why is not None:
            raise EvidenceError(f"Matrix-product switch MM_SPLIT_K={split} does not take the tile {bm}x{bn}x{bk} "
                                f"with {rows} rows per thread: {why}.")
        if stages_define is not None:
            raise EvidenceError("Matrix-product switches MM_SPLIT_K and MM_STAGES name two kernels; a variant takes one.")
        return CudaInstance(vec_b=4, family="split", bm=bm, bn=bn, bk=bk, rows=rows, split=split)
    if stages:
        why = ring_instance(bm, bn, bk, stages)
        if why is not None:
            raise EvidenceError(f"Matrix-product switch MM_STAGES={stages} does not take the tile {bm}x{bn}x{bk}: {why}.")
        return CudaInstance(vec_b=4, family="ring", bm=bm, bn=bn, bk=bk, rows=rows, stages=stages, cols=cols)
    return CudaInstance(vec_b=4, family="tiled", bm=bm, bn=bn, bk=bk, rows=rows)


def cuda_grid(m: int, n: int, tile: int | tuple[int, int] = CUDA_TILE[0]) -> int:
    """Blocks of the CUDA launch: one per tile of C (tile x tile, or rows x columns)."""
    rows, cols = (tile, tile) if isinstance(tile, int) else tile
    return math.ceil(m / rows) * math.ceil(n / cols)


def triton_instance(m: int, n: int, k: int) -> TritonInstance:
    """The Triton instance that serves an M x N x K product."""
    _kernels = sources.module("kernels.matmul.matmul_triton")
    config_for = _kernels.config_for

    _check_dims(m, n, k)
    block_m, block_n, block_k, group_m, warps, stages = config_for(m, n, k)
    return TritonInstance(m=m, n=n, k=k, block_m=block_m, block_n=block_n, block_k=block_k,
                         group_m=group_m, num_warps=warps, num_stages=stages)


def instance(impl: str, m: int, n: int, k: int) -> Instance:
    """`cuda_instance` or `triton_instance` by implementation name."""
    return pick_ours(impl, "Matrix-product", lambda: cuda_instance(m, n, k), lambda: triton_instance(m, n, k))


def mnk(shape: Sequence[int]) -> tuple[int, int, int]:
    """(M, N, K) of a shape (M, N, K), as parsed from 'MxNxK'."""
    if len(shape) != 3:
        raise EvidenceError(f"A matrix-product shape is MxNxK, not {'x'.join(map(str, shape))}.")
    m, n, k = (int(d) for d in shape)
    return m, n, k


def instances_for(impl: str, shapes: Iterable[Sequence[int]]) -> list[InstanceShapes]:
    """Each distinct instance the shapes need, in order of first use, with its shapes."""
    return group_by_instance((mnk(s) for s in shapes), lambda s: instance(impl, *s))


# ----------------------------------------------------------------------------- launchers


def validate(a: Any, b: Any, out: Any) -> tuple[int, int, int]:
    """Check the tensors of a launch and return (M, N, K); EvidenceError with one sentence if not
    a [M, K], b [K, N], out [M, N], all float32, contiguous, 16-byte aligned, on one CUDA device,
    out apart from the inputs (the kernels declare them __restrict__)."""
    check_tensors("Matrix-product", {"a": a, "b": b, "out": out}, matrices=True)
    m, k = a.shape
    if b.shape[0] != k:
        raise EvidenceError(f"Matrix-product shapes {tuple(a.shape)} and {tuple(b.shape)} do not "
                            f"chain: a has {k} columns, b has {b.shape[0]} rows.")
    n = b.shape[1]
    if tuple(out.shape) != (m, n):
        raise EvidenceError(f"Matrix-product output has shape {tuple(out.shape)}, but must be "
                            f"({m}, {n}).")
    check_apart("Matrix-product", out, {"a": a, "b": b})
    if max(m, n, k) > MAX_DIM or cuda_grid(m, n) > MAX_DIM:
        raise EvidenceError(f"Matrix-product sizes {m}x{n}x{k} are too large for one launch.")
    return m, n, k


def _degenerate(m: int, n: int, k: int, out: Any) -> bool:
    """Handle empty products (nothing to write, or K = 0: zeros); True if handled."""
    if m == 0 or n == 0:
        return True
    if k == 0:
        out.zero_()
        return True
    return False


def bind_cuda(inputs: Mapping[str, Any], out: Tensor, params: Mapping[str, Any]) -> Launch:
    """out = a @ b with our CUDA kernel, bound once (tensors checked and instance chosen here)."""
    a, b = inputs["a"], inputs["b"]
    m, n, k = validate(a, b, out)
    if _degenerate(m, n, k, out):
        return cuda_launch.nothing(out)
    v = cuda_instance(m, n, k)
    args = (*(cuda_launch.pointer(t) for t in (a, b, out)), numpy.int32(m), numpy.int32(n), numpy.int32(k))
    blocks = cuda_grid(m, n, v.tile_mn) * v.split
    return cuda_launch.bind(CUDA_SOURCE, v.kernel, (blocks,), (v.block,), args, a.device, out=out)


def bind_triton(inputs: Mapping[str, Any], out: Tensor, params: Mapping[str, Any]) -> Launch:
    """out = a @ b with our Triton kernel, bound once (harness.launch.triton)."""
    _kernels = sources.module("kernels.matmul.matmul_triton")
    matmul_fwd = _kernels.matmul_fwd

    a, b = inputs["a"], inputs["b"]
    m, n, k = validate(a, b, out)
    if _degenerate(m, n, k, out):
        return cuda_launch.nothing(out)
    v = triton_instance(m, n, k)
    return triton_launch.bind(matmul_fwd, (v.programs,), (a, b, out), v.constexprs(),
                              {"num_warps": v.num_warps, "num_stages": v.num_stages},
                              cuda_launch.device_index(a.device), out=out)


def launch_cuda(a: Any, b: Any, out: Any) -> Tensor:
    """One launch of `bind_cuda` (asynchronous; returns out)."""
    return bind_cuda({"a": a, "b": b}, out, {})()


def launch_triton(a: Any, b: Any, out: Any) -> Tensor:
    """One launch of `bind_triton` (asynchronous; returns out)."""
    return bind_triton({"a": a, "b": b}, out, {})()
