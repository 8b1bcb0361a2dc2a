"""FP32 matrix product C = A @ B (A [M, K], B [K, N], row-major); shapes are 'MxNxK'.

No TF32 anywhere: our kernels use FP32 FMA only, and the library call runs with TF32 turned off.
"""

from __future__ import annotations

import math
from typing import Any

from harness.ops import Call, Params, Tensors, define
from harness.shapes import parse_shape, shape_dims, shape_tag

DESCRIPTION = "FP32 matrix product C = A @ B (no TF32)"
DIMS = ('m', 'n', 'k')
TEST_SHAPES = ("100x37x55", "129x131x17", "0x64x32")
"""Edge shapes the generic GPU test (tests/test_ops_gpu.py) checks besides the default: tiles cut by the edges, an empty product."""

MAX_DIM = 2**31 - 1
"""Largest M, N or K (the kernels take them as 32-bit integers)."""


def validate_shape(shape: str) -> None:
    dims = parse_shape(shape)
    if len(dims) != 3 or shape_tag(shape) is not None:
        raise ValueError("a matrix-product shape is MxNxK (A is MxK, B is KxN), with no tag")
    if max(dims) > MAX_DIM:
        raise ValueError(f"M, N and K must each be at most {MAX_DIM}")


def make_inputs(shape: str, seed: int, params: Params) -> Tensors:
    import torch

    m, n, k = shape_dims(shape)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    # Standard normal entries, A scaled by 1/sqrt(K): every output is a sum of K products with
    # variance 1/K each, so C is O(1) (standard normal) whatever K is.
    a = torch.randn(m, k, device="cuda", dtype=torch.float32, generator=gen) / math.sqrt(k)
    b = torch.randn(k, n, device="cuda", dtype=torch.float32, generator=gen)
    return {"a": a, "b": b}


def make_output(inputs: Tensors, shape: str) -> Any:
    import torch

    m, n, _ = shape_dims(shape)
    return torch.empty(m, n, device=inputs["a"].device, dtype=torch.float32)


def reference(inputs: Tensors, params: Params) -> Any:
    return inputs["a"].double() @ inputs["b"].double()


def bind_torch(inputs: Tensors, out: Any, params: Params) -> Call:
    """torch.matmul in full FP32 (cuBLAS SGEMM, TF32 off; a fresh tensor per call). The switches
    are set at bind and stay set: a measurement process runs this operation only."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    a, b, matmul = inputs["a"], inputs["b"], torch.matmul
    return lambda: matmul(a, b)


def bytes_moved(shape: str) -> int:
    m, n, k = shape_dims(shape)
    return 4 * (m * k + k * n + m * n)  # read A and B once, write C once


def flops(shape: str) -> int:
    m, n, k = shape_dims(shape)
    return 2 * m * n * k  # one multiply and one add per (i, j, k)


def grow(inputs: Tensors, out: Any, fraction: float) -> tuple[Tensors, Any, Any]:
    """The planted slowdown's problem (harness.ops.launcher): K longer by `fraction` (a multiple of
    4), A's new columns zero, so C is the same sum followed by exact zeros."""
    import torch

    a, b = inputs["a"], inputs["b"]
    k = a.shape[1]
    extra = max(4, 4 * round(k * fraction / 4))
    a2 = torch.cat([a, torch.zeros(a.shape[0], extra, device=a.device, dtype=a.dtype)], dim=1).contiguous()
    b2 = torch.cat([b, b[:extra]]).contiguous()
    return {**inputs, "a": a2, "b": b2}, out, out


OP = define(__name__)
