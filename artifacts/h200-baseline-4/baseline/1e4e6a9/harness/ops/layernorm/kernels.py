"""Launchers for our two layer-norm kernels, and the one dispatch on width they share with the
census.

`cuda_instance(n)` and `triton_instance(n)` decide which compiled instance serves a row width
n; `launch_cuda` / `launch_triton` launch exactly that one, and `harness.build` compiles exactly
the ones `instances_for` lists, so the census describes the code that runs.

CUDA paths (kernels/layernorm/layernorm.cu), one thread block per row, the row held in registers:
    n % 4 == 0, n <= 1024          vec4,   128 threads, SLOTS = ceil(n / 4 / 128) (1 or 2)
    n % 4 == 0, 1024 < n <= 8192   vec4,   256 threads up to n = 4096, 512 above (2..4 slots)
    n % 4 != 0, n <= 8192          scalar, 128 / 256 / 512 / 1024 threads for n up to
                                   1024 / 2048 / 4096 / 8192 (at most 8 slots)
or, where the warp-per-row path is on (n % 4 == 0, n <= 1024): one warp per row, 4 rows per
128-thread block, SLOTS = ceil(n / 128). Each block path loads w and b either with x or late, just
before the store (LATE_WB). The choices are `DEFAULT_LATE_WB` and `DEFAULT_WARP_ROWS`;
the variants' defines LN_LATE_WB, LN_WARP_ROWS and LN_FIXED_WIDTH (the width compiled into a vec4
block path's kernel, `DEFAULT_FIXED_WIDTH`) override them for one run, LN_BLOCK (64, 128,
256, 512 or 1024) sets the vec4 wide path's threads and LN_NARROW_BLOCK the narrow path's, each where
the row then fits 8 slots (kernels/layernorm/notebook.md).
Triton (kernels/layernorm/layernorm_triton.py): one program per row, BLOCK_N = next power of two >= n,
num_warps from BLOCK_N, N a compile-time constant.
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
    InstanceShapes,
    block_override,
    group_by_instance,
    pick_ours,
    rows_and_last,
)

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["InstanceShapes", "cuda_instance", "triton_instance", "instances_for", "bind_cuda", "bind_triton",
           "launch_cuda", "launch_triton"]

CUDA_SOURCE = "layernorm/layernorm.cu"
"""Kernel source under kernels/ for the CUDA implementation."""

TRITON_SOURCE = "layernorm/layernorm_triton.py"
"""Kernel source under kernels/ for the Triton implementation."""

MAX_WIDTH = 8192
"""Widest row either implementation supports (the row lives in registers)."""

WARP_MAX_WIDTH = 1024
"""Widest row the warp-per-row path serves (8 float4 slots per lane)."""

WARP_ROWS_PER_BLOCK = 4
"""Rows (warps) per block of the warp-per-row path."""

DEFAULT_LATE_WB = True
"""Whether the block paths load w and b late, unless LN_LATE_WB says otherwise: late loads hold
fewer registers and were faster or no different at every sweep shape (kernels/layernorm/notebook.md)."""

DEFAULT_FIXED_WIDTH = False
"""Whether the vec4 block paths compile the row width into the kernel (one instance a width), unless
LN_FIXED_WIDTH says otherwise: off, the width read at run time (kernels/layernorm/notebook.md)."""

DEFAULT_WARP_ROWS = False
"""Whether the warp-per-row path serves the widths it can (n % 4 == 0, n <= WARP_MAX_WIDTH), unless
LN_WARP_ROWS says otherwise: off, as it measured no different from the block path at width 768
(kernels/layernorm/notebook.md)."""


# ----------------------------------------------------------------------------- dispatch


@dataclass(frozen=True)
class CudaInstance:
    """One compiled instance of kernels/layernorm/layernorm.cu."""

    path: str
    """'rows128' (vec4, n <= 1024), 'wide' (vec4, n > 1024), 'scalar' (n % 4 != 0), each one block
    per row, or 'warp' (vec4, n <= 1024, one warp per row)."""
    vec: int
    """Floats per access: 4 (128-bit) or 1 (32-bit)."""
    block: int
    """Threads per block."""
    slots: int
    """Vectors each thread holds in registers."""
    late_wb: bool = False
    """w and b loaded just before the store instead of with x (always so on the warp path)."""
    fixed_width: int = 0
    """The row width compiled into the kernel (`layernorm_fwd_vec4_fixed`), or 0: read at run time."""

    source: str = CUDA_SOURCE
    dynamic_smem: int = 0

    @property
    def rows_per_block(self) -> int:
        """Rows one block normalises: a warp each on the warp path, else 1."""
        return self.block // 32 if self.path == "warp" else 1

    def grid(self, rows: int) -> int:
        """Blocks of the launch for `rows` rows."""
        return -(-rows // self.rows_per_block)

    @property
    def kernel(self) -> str:
        """The name expression that instantiates it, e.g. 'layernorm_fwd_vec4<128, 2, false>'."""
        if self.path == "warp":
            return f"layernorm_fwd_warp_vec4<{self.slots}, {self.rows_per_block}>"
        late = "true" if self.late_wb else "false"
        if self.fixed_width:
            return f"layernorm_fwd_vec4_fixed<{self.block}, {self.slots}, {late}, {self.fixed_width}>"
        name = "layernorm_fwd_vec4" if self.vec == 4 else "layernorm_fwd_scalar"
        return f"{name}<{self.block}, {self.slots}, {late}>"

    @property
    def specialization(self) -> str:
        """Short description for tables, e.g. 'rows128 vec4 block=128 slots=2 late_wb'."""
        late = " late_wb" if self.late_wb else ""
        fixed = f" n={self.fixed_width}" if self.fixed_width else ""
        return f"{self.path} vec{self.vec} block={self.block} slots={self.slots}{late}{fixed}"


@dataclass(frozen=True)
class TritonInstance:
    """One compiled instance of kernels/layernorm/layernorm_triton.py's `layernorm_fwd`."""

    n: int
    block_n: int
    num_warps: int
    kernel: str = "layernorm_fwd"

    @property
    def block(self) -> int:
        """Threads per program."""
        return 32 * self.num_warps

    @property
    def specialization(self) -> str:
        """Short description for tables, e.g. 'N=768 BLOCK_N=1024 num_warps=4'."""
        return f"N={self.n} BLOCK_N={self.block_n} num_warps={self.num_warps}"

    # The TritonSpec interface (harness.launch.instances) the offline build compiles from.
    source: str = TRITON_SOURCE

    def jit_function(self) -> Any:
        _kernels = sources.module("kernels.layernorm.layernorm_triton")
        layernorm_fwd = _kernels.layernorm_fwd

        return layernorm_fwd

    def signature(self) -> dict[str, str]:
        """The signature the JIT derives for `layernorm_fwd(x, w, b, out, float(eps), N=, BLOCK_N=)`."""
        return {"X": "*fp32", "W": "*fp32", "B": "*fp32", "Y": "*fp32", "eps": "fp32",
                "N": "constexpr", "BLOCK_N": "constexpr"}

    def constexprs(self) -> dict[str, Any]:
        return {"N": self.n, "BLOCK_N": self.block_n}

    def aligned_args(self) -> tuple[int, ...]:
        """Arguments the JIT specializes as 16-byte aligned (torch allocations; the launcher checks)."""
        return (0, 1, 2, 3)

    def compile_options(self) -> dict[str, Any]:
        return {"num_warps": self.num_warps}


Instance = CudaInstance | TritonInstance


def _check_width(n: int) -> None:
    if not 1 <= n <= MAX_WIDTH:
        raise EvidenceError(f"Layer-norm width {n} is outside the supported range 1..{MAX_WIDTH}.")


def _switch(name: str, default: bool) -> bool:
    """A dispatch switch: the variant's -D define where it sets one (0 or 1), else the default."""

    value = dispatch_define(name, lambda v: v in ("0", "1"), "0 or 1", "Layer-norm")
    return default if value is None else value == "1"


def cuda_instance(n: int) -> CudaInstance:
    """The CUDA instance that serves rows of width n (see the module docstring)."""
    _check_width(n)
    if n % 4 == 0 and n <= WARP_MAX_WIDTH and _switch("LN_WARP_ROWS", DEFAULT_WARP_ROWS):
        return CudaInstance("warp", 4, 32 * WARP_ROWS_PER_BLOCK, math.ceil(n / 128), late_wb=True)
    late = _switch("LN_LATE_WB", DEFAULT_LATE_WB)
    if n % 4 == 0:
        block = 128 if n <= 1024 else (256 if n <= 4096 else 512)
        # The variants' LN_NARROW_BLOCK sets the threads of the narrow path, LN_BLOCK the wide's.
        block = block_override("LN_NARROW_BLOCK" if n <= 1024 else "LN_BLOCK", n, 4, block, "Layer-norm")
        return CudaInstance("rows128" if n <= 1024 else "wide", 4, block, math.ceil(n / (4 * block)),
                           late, n if _switch("LN_FIXED_WIDTH", DEFAULT_FIXED_WIDTH) else 0)
    block = 128 if n <= 1024 else (256 if n <= 2048 else (512 if n <= 4096 else 1024))
    return CudaInstance("scalar", 1, block, math.ceil(n / block), late)


def triton_instance(n: int) -> TritonInstance:
    """The Triton instance that serves rows of width n."""
    _kernels = sources.module("kernels.layernorm.layernorm_triton")
    block_n_for, num_warps_for = _kernels.block_n_for, _kernels.num_warps_for

    _check_width(n)
    block_n = block_n_for(n)
    return TritonInstance(n=n, block_n=block_n, num_warps=num_warps_for(block_n))


def instance(impl: str, n: int) -> Instance:
    """`cuda_instance` or `triton_instance` by implementation name."""
    return pick_ours(impl, "Layer-norm", lambda: cuda_instance(n), lambda: triton_instance(n))


def rows_and_width(shape: Sequence[int]) -> tuple[int, int]:
    """(rows, n) of a shape normalised over its last dimension."""
    return rows_and_last(shape, "layer-norm")


def instances_for(impl: str, shapes: Iterable[Sequence[int]]) -> list[InstanceShapes]:
    """Each distinct instance the shapes need, in order of first use, with its shapes."""
    return group_by_instance((rows_and_width(s) for s in shapes), lambda rn: instance(impl, rn[1]))


# ----------------------------------------------------------------------------- launchers


def validate(x: Any, w: Any, b: Any, eps: float, out: Any) -> tuple[int, int]:
    """Check the tensors of a launch and return (rows, n); EvidenceError with one sentence if not
    x [rows, n], w [n], b [n], out [rows, n], all float32, contiguous, 16-byte aligned, on one
    CUDA device, out apart from the inputs (the kernels declare them __restrict__), and eps
    finite and >= 0."""
    check_tensors("Layer-norm", {"x": x, "w": w, "b": b, "out": out})
    if x.dim() != 2:
        raise EvidenceError(f"Layer-norm input x has shape {tuple(x.shape)}, but must be [rows, n].")
    rows, n = x.shape
    if tuple(w.shape) != (n,) or tuple(b.shape) != (n,):
        raise EvidenceError(f"Layer-norm w and b have shapes {tuple(w.shape)} and {tuple(b.shape)}, "
                            f"but must both be ({n},).")
    if tuple(out.shape) != (rows, n):
        raise EvidenceError(f"Layer-norm output has shape {tuple(out.shape)}, but must be "
                            f"({rows}, {n}) like x.")
    check_apart("Layer-norm", out, {"x": x, "w": w, "b": b})
    if not (math.isfinite(eps) and eps >= 0.0):
        raise EvidenceError(f"Layer-norm eps is {eps}, but must be finite and >= 0.")
    if rows > 2**31 - 1:
        raise EvidenceError(f"Layer-norm input has {rows} rows, more than one launch supports.")
    _check_width(n)
    return rows, n


def bind_cuda(inputs: Mapping[str, Any], out: Tensor, params: Mapping[str, Any]) -> Launch:
    """Layer norm of inputs x, w, b into `out` with our CUDA kernel, bound once: the tensors are
    checked and the instance chosen here; the call launches on torch's current stream."""
    x, w, b, eps = inputs["x"], inputs["w"], inputs["b"], float(params["eps"])
    rows, n = validate(x, w, b, eps, out)
    if rows == 0:
        return cuda_launch.nothing(out)
    v = cuda_instance(n)
    sizes = (numpy.int32(rows), numpy.int32(n)) if v.path == "warp" else (numpy.int32(n),)
    args = (*(cuda_launch.pointer(t) for t in (x, w, b, out)), *sizes, numpy.float32(eps))
    return cuda_launch.bind(CUDA_SOURCE, v.kernel, (v.grid(rows),), (v.block,), args, x.device, out=out)


def bind_triton(inputs: Mapping[str, Any], out: Tensor, params: Mapping[str, Any]) -> Launch:
    """Layer norm of inputs x, w, b into `out` with our Triton kernel, bound once (the first
    launch happens here, through the JIT; harness.launch.triton)."""
    _kernels = sources.module("kernels.layernorm.layernorm_triton")
    layernorm_fwd = _kernels.layernorm_fwd

    x, w, b, eps = inputs["x"], inputs["w"], inputs["b"], float(params["eps"])
    rows, n = validate(x, w, b, eps, out)
    if rows == 0:
        return cuda_launch.nothing(out)
    v = triton_instance(n)
    return triton_launch.bind(layernorm_fwd, (rows,), (x, w, b, out, eps), {"N": n, "BLOCK_N": v.block_n},
                              {"num_warps": v.num_warps}, cuda_launch.device_index(x.device), out=out)


def launch_cuda(x: Any, w: Any, b: Any, eps: float, out: Any) -> Tensor:
    """One launch of `bind_cuda` (asynchronous; returns out)."""
    return bind_cuda({"x": x, "w": w, "b": b}, out, {"eps": eps})()


def launch_triton(x: Any, w: Any, b: Any, eps: float, out: Any) -> Tensor:
    """One launch of `bind_triton` (asynchronous; returns out)."""
    return bind_triton({"x": x, "w": w, "b": b}, out, {"eps": eps})()
