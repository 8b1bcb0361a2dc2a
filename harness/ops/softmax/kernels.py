"""Launchers for our two softmax kernels, and the one dispatch on width they share with the
census.

`cuda_instance(n)` and `triton_instance(n)` decide which compiled instance serves a row width
n; `launch_cuda` / `launch_triton` launch exactly that one, and `harness.build` compiles exactly
the ones `instances_for` lists, so the census describes the code that runs.

CUDA paths (kernels/softmax/softmax.cu); the row held in registers up to REGISTER_MAX_VEC4 /
REGISTER_MAX_SCALAR, two passes (online softmax, then a second read) above:
    n % 4 == 0, n <= 1024            warp per row, vec4,   4 rows per 128-thread block,
                                     SLOTS = ceil(n / 128) (1..8)
    n % 4 == 0, 1024 < n <= 32768    block per row, vec4,  256 / 512 / 1024 threads for n up to
                                     4096 / 8192 / 32768, SLOTS = ceil(n / 4 / block) (<= 8)
    n % 4 == 0, n > 32768            online, vec4,  1024 threads, 4 vectors per thread per sweep
    n % 4 != 0, n <= 1024            warp per row, scalar, SLOTS = ceil(n / 32) (1..32)
    n % 4 != 0, 1024 < n <= 8192     block per row, scalar, 256 / 512 / 1024 threads for n up to
                                     2048 / 4096 / 8192 (<= 8 slots)
    n % 4 != 0, n > 8192             online, scalar, 1024 threads, 8 floats per thread per sweep
Triton (kernels/softmax/softmax_triton.py): `softmax_row` (one program per row, BLOCK_N = next power of
two >= n, num_warps from BLOCK_N) for n <= 8192; `softmax_online` (chunks of 8192, 16 warps,
num_stages 1) above. N is a compile-time constant in both.
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
    block_override,
    group_by_instance,
    pick_ours,
    rows_and_last,
)

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["InstanceShapes", "cuda_instance", "triton_instance", "instances_for", "launch_cuda",
           "launch_triton"]

CUDA_SOURCE = "softmax/softmax.cu"
"""Kernel source under kernels/ for the CUDA implementation."""

TRITON_SOURCE = "softmax/softmax_triton.py"
"""Kernel source under kernels/ for the Triton implementation."""

TRITON_MODULE = "kernels.softmax.softmax_triton"

MAX_WIDTH = 2**30
"""Widest row (the kernels index within a row with 32-bit ints, with room for a sweep past
the end)."""

MAX_ROWS = 2**31 - 1
"""Most rows one launch takes (gridDim.x)."""

WARP_MAX = 1024
"""Widest row one warp holds (vec4: 8 slots; scalar: 32 slots)."""

REGISTER_MAX_VEC4 = 32768
"""Widest n % 4 == 0 row a block holds in registers (1024 threads x 8 float4); wider rows take
the two-pass online kernel. A variant's define SM_REGISTER_MAX_VEC4 lowers it for one run (the
variant online_wide sends 32768 through the online kernel)."""

REGISTER_MAX_SCALAR = 8192
"""Widest n % 4 != 0 row a block holds in registers (1024 threads x 8 floats)."""

WARP_ROWS = 4
"""Rows (warps) per block of the warp-per-row kernels (a variant's define SM_WARP_ROWS replaces it)."""

ONLINE_BLOCK = 1024
"""Threads per block of the online kernels: at ~32 registers two blocks fit an SM, so about 264
rows are in flight at once and pass 2 can find its row still in L2 for rows up to ~160 KiB."""

ONLINE_UNROLL = {4: 4, 1: 8}
"""Vectors each thread loads per sweep of the online kernels, by vector width."""


# ----------------------------------------------------------------------------- dispatch


@dataclass(frozen=True)
class CudaInstance:
    """One compiled instance of kernels/softmax/softmax.cu."""

    path: str
    """'warp' (a warp per row), 'block' (a block per row) or 'online' (two passes)."""
    vec: int
    """Floats per access: 4 (128-bit) or 1 (32-bit)."""
    block: int
    """Threads per block."""
    per_thread: int
    """Vectors each thread holds (warp, block: SLOTS) or loads per sweep (online: UNROLL)."""

    source: str = CUDA_SOURCE
    dynamic_smem: int = 0

    @property
    def rows_per_block(self) -> int:
        """Rows one block handles (a warp each on the warp path, else 1)."""
        return self.block // 32 if self.path == "warp" else 1

    @property
    def kernel(self) -> str:
        """The name expression that instantiates it, e.g. 'softmax_warp_vec4<2, 4>'."""
        kind = "vec4" if self.vec == 4 else "scalar"
        first = self.per_thread if self.path == "warp" else self.block
        second = self.block // 32 if self.path == "warp" else self.per_thread
        return f"softmax_{self.path}_{kind}<{first}, {second}>"

    @property
    def specialization(self) -> str:
        """Short description for tables, e.g. 'warp vec4 block=128 slots=2'."""
        what = "unroll" if self.path == "online" else "slots"
        return f"{self.path} vec{self.vec} block={self.block} {what}={self.per_thread}"


def _check_width(n: int) -> None:
    if not 1 <= n <= MAX_WIDTH:
        raise EvidenceError(f"Softmax width {n} is outside the supported range 1..{MAX_WIDTH}.")


def _register_max_vec4() -> int:
    """REGISTER_MAX_VEC4, or the variant's define SM_REGISTER_MAX_VEC4 where it sets one (it may
    only lower it: a wider row does not fit a block's registers)."""

    value = dispatch_define("SM_REGISTER_MAX_VEC4",
                            lambda v: v.isdigit() and WARP_MAX <= int(v) <= REGISTER_MAX_VEC4,
                            f"a whole number from {WARP_MAX} to {REGISTER_MAX_VEC4}", "Softmax")
    return REGISTER_MAX_VEC4 if value is None else int(value)


def _warp_max() -> int:
    """WARP_MAX, or the variant's define SM_WARP_MAX where it sets one (it may only lower it, to a
    multiple of 128: narrower rows then take the block path)."""

    value = dispatch_define("SM_WARP_MAX", lambda v: v.isdigit() and 128 <= int(v) <= WARP_MAX and int(v) % 128 == 0,
                            f"a multiple of 128 from 128 to {WARP_MAX}", "Softmax")
    return WARP_MAX if value is None else int(value)


def cuda_instance(n: int) -> CudaInstance:
    """The CUDA instance that serves rows of width n (see the module docstring; the
    variants' defines SM_WARP_MAX, SM_WARP_ROWS, SM_BLOCK and SM_REGISTER_MAX_VEC4 replace a choice)."""
    _check_width(n)
    vec = 4 if n % 4 == 0 else 1
    if n <= _warp_max():
        rows = dispatch_define("SM_WARP_ROWS", lambda v: v in ("1", "2", "4", "8", "16"), "1, 2, 4, 8 or 16", "Softmax")
        return CudaInstance("warp", vec, 32 * int(rows or WARP_ROWS), math.ceil(n / (32 * vec)))
    if vec == 4 and n <= _register_max_vec4():
        block = block_override("SM_BLOCK", n, 4, 256 if n <= 4096 else (512 if n <= 8192 else 1024), "Softmax")
        return CudaInstance("block", 4, block, math.ceil(n / (4 * block)))
    if vec == 1 and n <= REGISTER_MAX_SCALAR:
        block = 256 if n <= 2048 else (512 if n <= 4096 else 1024)
        return CudaInstance("block", 1, block, math.ceil(n / block))
    return CudaInstance("online", vec, ONLINE_BLOCK, ONLINE_UNROLL[vec])


def triton_instance(n: int) -> SimpleTritonSpec:
    """The Triton instance that serves rows of width n."""
    _kernels = sources.module("kernels.softmax.softmax_triton")
    (ONLINE_BLOCK_N, ONLINE_STAGES, ONLINE_WARPS, REGISTER_MAX_N, block_n_for, num_warps_for) = (
        _kernels.ONLINE_BLOCK_N, _kernels.ONLINE_STAGES, _kernels.ONLINE_WARPS, _kernels.REGISTER_MAX_N, _kernels.block_n_for, _kernels.num_warps_for)

    _check_width(n)
    types = (("X", "*fp32"), ("Y", "*fp32"), ("N", "constexpr"), ("BLOCK_N", "constexpr"))
    if n <= REGISTER_MAX_N:
        block_n = block_n_for(n)
        return SimpleTritonSpec(TRITON_SOURCE, TRITON_MODULE, "softmax_row", types,
                                (("N", n), ("BLOCK_N", block_n)), num_warps_for(block_n),
                                aligned=(0, 1))
    return SimpleTritonSpec(TRITON_SOURCE, TRITON_MODULE, "softmax_online", types,
                            (("N", n), ("BLOCK_N", ONLINE_BLOCK_N)), ONLINE_WARPS,
                            num_stages=ONLINE_STAGES, aligned=(0, 1))


def instance(impl: str, n: int) -> CudaInstance | SimpleTritonSpec:
    """`cuda_instance` or `triton_instance` by implementation name."""
    return pick_ours(impl, "Softmax", lambda: cuda_instance(n), lambda: triton_instance(n))


def rows_and_width(shape: Sequence[int]) -> tuple[int, int]:
    """(rows, n) of a shape normalised over its last dimension."""
    return rows_and_last(shape, "softmax")


def instances_for(impl: str, shapes: Iterable[Sequence[int]]) -> list[InstanceShapes]:
    """Each distinct instance the shapes need, in order of first use, with its shapes."""
    return group_by_instance((rows_and_width(s) for s in shapes), lambda rn: instance(impl, rn[1]))


# ----------------------------------------------------------------------------- launchers


def validate(x: Any, out: Any) -> tuple[int, int]:
    """Check the tensors of a launch and return (rows, n); EvidenceError with one sentence if not
    x [rows, n] and out [rows, n], both float32, contiguous, 16-byte aligned, on one CUDA device,
    out apart from x (the kernels declare them __restrict__)."""
    check_tensors("Softmax", {"x": x, "out": out})
    if x.dim() != 2:
        raise EvidenceError(f"Softmax input x has shape {tuple(x.shape)}, but must be [rows, n].")
    rows, n = x.shape
    if tuple(out.shape) != (rows, n):
        raise EvidenceError(f"Softmax output has shape {tuple(out.shape)}, but must be "
                            f"({rows}, {n}) like x.")
    check_apart("Softmax", out, {"x": x})
    if rows > MAX_ROWS:
        raise EvidenceError(f"Softmax input has {rows} rows, more than one launch supports.")
    if n == 0:
        raise EvidenceError("Softmax input has rows of width 0, which have no softmax.")
    _check_width(n)
    return rows, n


def bind_cuda(inputs: Mapping[str, Any], out: Tensor, params: Mapping[str, Any]) -> Launch:
    """Softmax of input x's rows into `out` with our CUDA kernel, bound once (tensors checked and
    instance chosen here; the call launches on torch's current stream)."""
    x = inputs["x"]
    rows, n = validate(x, out)
    if rows == 0:
        return cuda_launch.nothing(out)
    v = cuda_instance(n)
    args = (cuda_launch.pointer(x), cuda_launch.pointer(out), numpy.int32(rows), numpy.int32(n))
    return cuda_launch.bind(CUDA_SOURCE, v.kernel, (math.ceil(rows / v.rows_per_block),), (v.block,), args, x.device, out=out)


def bind_triton(inputs: Mapping[str, Any], out: Tensor, params: Mapping[str, Any]) -> Launch:
    """Softmax of input x's rows into `out` with our Triton kernel, bound once (harness.launch.triton)."""
    x = inputs["x"]
    rows, n = validate(x, out)
    if rows == 0:
        return cuda_launch.nothing(out)
    v = triton_instance(n)
    return triton_launch.bind(v.jit_function(), (rows,), (x, out), v.constexprs(), v.compile_options(),
                              cuda_launch.device_index(x.device), out=out)


def launch_cuda(x: Any, out: Any) -> Tensor:
    """One launch of `bind_cuda` (asynchronous; returns out)."""
    return bind_cuda({"x": x}, out, {})()


def launch_triton(x: Any, out: Any) -> Tensor:
    """One launch of `bind_triton` (asynchronous; returns out)."""
    return bind_triton({"x": x}, out, {})()
