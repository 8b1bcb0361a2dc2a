"""Launchers for our two transpose kernels, and the one dispatch on shape they share with the
census.

`cuda_instance(r, c)` and `triton_instance(r, c)` decide which compiled instance serves an
[r, c] input; `launch_cuda` / `launch_triton` launch exactly that one, and `harness.build` compiles
exactly the ones `instances_for` lists, so the census describes the code that runs.

CUDA paths (kernels/transpose/transpose.cu), one block per tile through padded shared memory, 1-D grid:
    r % 4 == 0 and c % 4 == 0    vec4,   64 x 64 tile, 256 threads, 4 float4 per thread each way
    otherwise                    scalar, 32 x 32 tile, 256 threads, 4 floats per thread each way
Triton (kernels/transpose/transpose_triton.py): one program per BM x BN tile, BM = block_for(r), BN =
block_for(c) (64, or the next power of two >= the dimension when shorter, at least 16), num_warps
from the tile (4 for 64 x 64); R and C are compile-time constants.
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
from harness.launch.instances import (
    SimpleTritonSpec,
    InstanceShapes,
    group_by_instance,
    pick_ours,
)

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["InstanceShapes", "cuda_instance", "triton_instance", "instances_for", "launch_cuda",
           "launch_triton"]

CUDA_SOURCE = "transpose/transpose.cu"
"""Kernel source under kernels/ for the CUDA implementation."""

TRITON_SOURCE = "transpose/transpose_triton.py"
"""Kernel source under kernels/ for the Triton implementation."""

TRITON_MODULE = "kernels.transpose.transpose_triton"

MAX_DIM = 2**31 - 64
"""Largest R or C (32-bit row and column indices, with room for a tile past the end)."""

MAX_TILES = 2**31 - 1
"""Most tiles one launch takes (gridDim.x, programs of a 1-D Triton grid)."""


# ----------------------------------------------------------------------------- dispatch


@dataclass(frozen=True)
class CudaInstance:
    """One compiled instance of kernels/transpose/transpose.cu."""

    vec: int
    """Floats per global access: 4 (128-bit) or 1 (32-bit)."""
    tile: int
    """Tile edge (TILE x TILE floats per block)."""
    block: int
    """Threads per block."""

    source: str = CUDA_SOURCE
    dynamic_smem: int = 0

    @property
    def kernel(self) -> str:
        """The name expression that instantiates it, e.g. 'transpose_vec4<64, 256>'."""
        return f"transpose_{'vec4' if self.vec == 4 else 'scalar'}<{self.tile}, {self.block}>"

    @property
    def specialization(self) -> str:
        """Short description for tables, e.g. 'vec4 tile=64 block=256'."""
        return f"vec{self.vec} tile={self.tile} block={self.block}"

    def grid(self, r: int, c: int) -> tuple[int, int]:
        """(blocks, tiles_c) for an [r, c] input."""
        tiles_c = math.ceil(c / self.tile)
        return math.ceil(r / self.tile) * tiles_c, tiles_c


VEC4 = CudaInstance(4, 64, 256)
SCALAR = CudaInstance(1, 32, 256)


def _check_dims(r: int, c: int) -> None:
    if not (1 <= r <= MAX_DIM and 1 <= c <= MAX_DIM):
        raise EvidenceError(f"Transpose input [{r}, {c}] has a dimension outside 1..{MAX_DIM}.")
    if math.ceil(r / 16) * math.ceil(c / 16) > MAX_TILES:
        raise EvidenceError(f"Transpose input [{r}, {c}] has more tiles than one launch takes.")


def cuda_instance(r: int, c: int) -> CudaInstance:
    """The CUDA instance that serves an [r, c] input (see the module docstring); a variant's
    TP_BLOCK (128 or 256) sets the vec4 path's threads per block."""
    _check_dims(r, c)
    if r % 4 or c % 4:
        return SCALAR
    block = dispatch_define("TP_BLOCK", lambda v: v in ("128", "256"), "128 or 256", "Transpose")
    return VEC4 if block is None else CudaInstance(4, VEC4.tile, int(block))


def triton_instance(r: int, c: int) -> SimpleTritonSpec:
    """The Triton instance that serves an [r, c] input."""
    _kernels = sources.module("kernels.transpose.transpose_triton")
    block_for, num_warps_for = _kernels.block_for, _kernels.num_warps_for

    _check_dims(r, c)
    bm, bn = block_for(r), block_for(c)
    types = (("X", "*fp32"), ("Y", "*fp32"), ("R", "constexpr"), ("C", "constexpr"),
             ("BM", "constexpr"), ("BN", "constexpr"))
    return SimpleTritonSpec(TRITON_SOURCE, TRITON_MODULE, "transpose_tile", types,
                            (("R", r), ("C", c), ("BM", bm), ("BN", bn)), num_warps_for(bm, bn),
                            aligned=(0, 1))


def instance(impl: str, r: int, c: int) -> CudaInstance | SimpleTritonSpec:
    """`cuda_instance` or `triton_instance` by implementation name."""
    return pick_ours(impl, "Transpose", lambda: cuda_instance(r, c), lambda: triton_instance(r, c))


def rows_and_cols(shape: Sequence[int]) -> tuple[int, int]:
    """(R, C) of a two-dimensional shape."""
    if len(shape) != 2:
        raise EvidenceError(f"A transpose shape is [R, C], not {tuple(shape)}.")
    return int(shape[0]), int(shape[1])


def instances_for(impl: str, shapes: Iterable[Sequence[int]]) -> list[InstanceShapes]:
    """Each distinct instance the shapes need, in order of first use, with its shapes."""
    return group_by_instance((rows_and_cols(s) for s in shapes), lambda rc: instance(impl, *rc))


# ----------------------------------------------------------------------------- launchers


def validate(x: Any, out: Any) -> tuple[int, int]:
    """Check the tensors of a launch and return (R, C); EvidenceError with one sentence if not
    x [R, C] and out [C, R], both float32, contiguous, 16-byte aligned, on one CUDA device, out
    apart from x (the kernels declare them __restrict__)."""
    check_tensors("Transpose", {"x": x, "out": out})
    if x.dim() != 2:
        raise EvidenceError(f"Transpose input x has shape {tuple(x.shape)}, but must be [R, C].")
    r, c = x.shape
    if tuple(out.shape) != (c, r):
        raise EvidenceError(f"Transpose output has shape {tuple(out.shape)}, but must be "
                            f"({c}, {r}), x's transposed.")
    check_apart("Transpose", out, {"x": x})
    if r and c:
        _check_dims(r, c)
    return r, c


def bind_cuda(inputs: Mapping[str, Any], out: Tensor, params: Mapping[str, Any]) -> Launch:
    """Transpose input x into `out` with our CUDA kernel, bound once."""
    x = inputs["x"]
    r, c = validate(x, out)
    if r == 0 or c == 0:
        return cuda_launch.nothing(out)
    v = cuda_instance(r, c)
    blocks, tiles_c = v.grid(r, c)
    args = (cuda_launch.pointer(x), cuda_launch.pointer(out), numpy.int32(r), numpy.int32(c),
            numpy.int32(tiles_c))
    return cuda_launch.bind(CUDA_SOURCE, v.kernel, (blocks,), (v.block,), args, x.device, out=out)


def bind_triton(inputs: Mapping[str, Any], out: Tensor, params: Mapping[str, Any]) -> Launch:
    """Transpose input x into `out` with our Triton kernel, bound once (harness.launch.triton)."""
    x = inputs["x"]
    r, c = validate(x, out)
    if r == 0 or c == 0:
        return cuda_launch.nothing(out)
    v = triton_instance(r, c)
    k = v.constexprs()
    programs = math.ceil(r / k["BM"]) * math.ceil(c / k["BN"])
    return triton_launch.bind(v.jit_function(), (programs,), (x, out), k, v.compile_options(),
                              cuda_launch.device_index(x.device), out=out)


def launch_cuda(x: Any, out: Any) -> Tensor:
    """One launch of `bind_cuda` (asynchronous; returns out)."""
    return bind_cuda({"x": x}, out, {})()


def launch_triton(x: Any, out: Any) -> Tensor:
    """One launch of `bind_triton` (asynchronous; returns out)."""
    return bind_triton({"x": x}, out, {})()
