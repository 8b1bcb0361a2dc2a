"""FP32 out-of-place transpose: out [C, R] = x [R, C]^T, both contiguous."""

from __future__ import annotations

from typing import Any

from harness.ops import Call, Params, Tensors, define
from harness.ops.transpose.kernels import MAX_DIM, MAX_TILES, VEC4
from harness.shapes import parse_shape, shape_dims, shape_tag

DESCRIPTION = "FP32 out-of-place transpose of a row-major matrix"
DIMS = ('rows', 'cols')
TEST_SHAPES = ("100x37", "1x1000", "0x64")
"""Edge shapes the generic GPU test (tests/test_ops_gpu.py) checks besides the default: tiles cut by the edges, one row, zero rows."""


def validate_shape(shape: str) -> None:
    dims = parse_shape(shape)
    if len(dims) != 2 or shape_tag(shape) is not None:
        raise ValueError("a transpose shape is ROWSxCOLS")
    if max(dims) > MAX_DIM:
        raise ValueError(f"dimensions above {MAX_DIM} are not supported")
    if -(-dims[0] // 16) * -(-dims[1] // 16) > MAX_TILES:
        raise ValueError("the matrix has more tiles than one launch takes")


def make_inputs(shape: str, seed: int, params: Params) -> Tensors:
    import torch

    r, c = shape_dims(shape)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    # Distinct random values (never zeros), so a misplaced element fails the exact check.
    x = torch.randn(r, c, device="cuda", dtype=torch.float32, generator=gen)
    return {"x": x}


def make_output(inputs: Tensors, shape: str) -> Any:
    import torch

    r, c = inputs["x"].shape
    return torch.empty(c, r, device=inputs["x"].device, dtype=torch.float32)


def reference(inputs: Tensors, params: Params) -> Any:
    # Exact: a transpose only moves data, so every implementation must be bit-exact.
    return inputs["x"].double().t()


def bind_torch(inputs: Tensors, out: Any, params: Params) -> Call:
    """x.t().contiguous() (a fresh tensor per call)."""
    x = inputs["x"]
    return lambda: x.t().contiguous()


def bytes_moved(shape: str) -> int:
    r, c = shape_dims(shape)
    return 4 * 2 * r * c  # read x once, write out once


def flops(shape: str) -> int:
    # A transpose does no arithmetic: it is measured by bytes only.
    return 0


GROW_ROWS = VEC4.tile
"""A planted slowdown adds rows in multiples of this: the tile of the vec4 path."""


def grow(inputs: Tensors, out: Any, fraction: float) -> tuple[Tensors, Any, Any]:
    """The planted slowdown's problem (harness.ops.launcher): the first rows of x again after its
    last, about `fraction` more rows in all, rounded to whole tiles of the vec4 path (GROW_ROWS):
    a count that is not a multiple of 4 sends the transpose down the scalar path (4096 + 102 rows
    took 45% longer, not 2.5%), and one that is not a multiple of 64 leaves the output's rows
    (its columns) off the 256-byte boundaries every tile writes at (4096 + 96 rows took 4.3%
    longer, 4096 + 128 rows 3.2%); the result is the first columns of the larger transpose."""
    import torch

    x = inputs["x"]
    rows = x.shape[0]
    extra = GROW_ROWS * max(1, round(rows * fraction / GROW_ROWS))
    grown = torch.cat([x, x[:extra]]).contiguous()
    bigger = torch.empty(grown.shape[1], grown.shape[0], device=x.device, dtype=x.dtype)
    return {**inputs, "x": grown}, bigger, bigger[:, :rows]


OP = define(__name__)
