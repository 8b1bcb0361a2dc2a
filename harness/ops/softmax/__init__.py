"""FP32 softmax over the last dimension: y[r, :] = exp(x[r, :] - max_r) / sum exp(x[r, :] - max_r)."""

from __future__ import annotations

from typing import Any

from harness.ops import Call, Params, Tensors, define, grow_rows
from harness.ops.softmax.kernels import MAX_ROWS, MAX_WIDTH
from harness.shapes import parse_shape, shape_dims, shape_tag

DESCRIPTION = "FP32 softmax over the last dimension"
DIMS = ('rows', 'cols')
TEST_SHAPES = ("7x1000", "3x33", "2x40000", "0x1024")
"""Edge shapes the generic GPU test (tests/test_ops_gpu.py) checks besides the default: tails and widths not a multiple of 4, long rows, zero rows."""


def validate_shape(shape: str) -> None:
    dims = parse_shape(shape)
    if len(dims) != 2 or shape_tag(shape) is not None:
        raise ValueError("a softmax shape is ROWSxCOLS")
    if dims[1] > MAX_WIDTH:
        raise ValueError(f"rows wider than {MAX_WIDTH} are not supported")
    if dims[0] > MAX_ROWS:
        raise ValueError(f"more than {MAX_ROWS} rows do not fit one launch")


def make_inputs(shape: str, seed: int, params: Params) -> Tensors:
    import torch

    rows, n = shape_dims(shape)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    # Scaled by 3 so that the exponentials spread over many orders of magnitude (e^-25 .. e^12 in
    # a 32768-wide row): a kernel that forgets to subtract the max or to normalise fails the check.
    x = torch.randn(rows, n, device="cuda", dtype=torch.float32, generator=gen) * 3.0
    return {"x": x}


def make_output(inputs: Tensors, shape: str) -> Any:
    import torch

    return torch.empty_like(inputs["x"])


def reference(inputs: Tensors, params: Params) -> Any:
    import torch

    return torch.softmax(inputs["x"].double(), dim=-1)


def bind_torch(inputs: Tensors, out: Any, params: Params) -> Call:
    """torch.softmax over the last dimension (a fresh tensor per call)."""
    import torch

    x, softmax = inputs["x"], torch.softmax
    return lambda: softmax(x, dim=-1)


def bytes_moved(shape: str) -> int:
    rows, n = shape_dims(shape)
    return 4 * 2 * rows * n  # read x once, write y once


def flops(shape: str) -> int:
    rows, n = shape_dims(shape)
    # Per element: subtract the max, exponential, add to the sum, divide (normalise): ~4. The max
    # (a comparison per element) is not counted; an exponential counts as one operation.
    return 4 * rows * n


grow = grow_rows  # the first rows again: one more row costs what any row costs


OP = define(__name__)
