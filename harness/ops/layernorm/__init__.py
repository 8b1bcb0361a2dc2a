"""FP32 layer-norm forward over the last dimension: y = (x - mean) / sqrt(var + eps) * w + b."""

from __future__ import annotations

from typing import Any

from harness.ops import Call, Params, Tensors, define, grow_rows
from harness.shapes import parse_shape, shape_dims, shape_tag

DESCRIPTION = "FP32 layer norm forward over the last dimension"
DIMS = ("rows", "width")
PARAMS = {"eps": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1.0e-5}}
"""This operation's own config keys (JSON schema, with defaults)."""
TEST_SHAPES = ("7x771", "300x4", "5x8192", "0x768")
"""Edge shapes the generic GPU test (tests/test_ops_gpu.py) checks besides the default: tails and widths not a multiple of 4, the longest row, zero rows."""


def validate_shape(shape: str) -> None:
    dims = parse_shape(shape)
    if len(dims) != 2 or shape_tag(shape) is not None:
        raise ValueError("a layer-norm shape is ROWSxWIDTH")
    if dims[1] > 8192:
        raise ValueError("rows wider than 8192 are not supported (the row is held in registers)")


def make_inputs(shape: str, seed: int, params: Params) -> Tensors:
    import torch

    rows, n = shape_dims(shape)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    # Shifted and scaled so that the mean is not ~0 and the variance not ~1: an implementation
    # that forgets to subtract the mean or divide by the deviation fails the check.
    x = torch.randn(rows, n, device="cuda", dtype=torch.float32, generator=gen) * 2.5 + 0.75
    w = torch.randn(n, device="cuda", dtype=torch.float32, generator=gen)
    b = torch.randn(n, device="cuda", dtype=torch.float32, generator=gen)
    return {"x": x, "w": w, "b": b}


def make_output(inputs: Tensors, shape: str) -> Any:
    import torch

    return torch.empty_like(inputs["x"])


def reference(inputs: Tensors, params: Params) -> Any:
    import torch

    x = inputs["x"].double()
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + float(params["eps"])) * inputs["w"].double() + inputs["b"].double()


def bind_torch(inputs: Tensors, out: Any, params: Params) -> Call:
    """torch.nn.functional.layer_norm (a fresh tensor per call)."""
    import torch

    x, w, b, eps = inputs["x"], inputs["w"], inputs["b"], float(params["eps"])
    layer_norm, width = torch.nn.functional.layer_norm, (x.shape[-1],)
    return lambda: layer_norm(x, width, w, b, eps)


def bytes_moved(shape: str) -> int:
    rows, n = shape_dims(shape)
    return 4 * (2 * rows * n + 2 * n)  # read x, write y, read w and b


def flops(shape: str) -> int:
    rows, n = shape_dims(shape)
    return 8 * rows * n  # mean, deviation, square, sum, scale, shift: ~8 per element


grow = grow_rows  # the first rows again: one more row costs what any row costs


OP = define(__name__)
