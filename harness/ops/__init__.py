"""Operations the pipeline measures: inputs, float64 reference and implementations.

Each operation module defines an `OP` (an `Operation`); `get(name)` finds it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.errors import EvidenceError

Tensors = dict[str, Any]  # name -> torch.Tensor
Params = Mapping[str, Any]  # the operation's config block (eps, tolerance, ...)

# An implementation launches the operation once. It writes into `out` where it can (ours) and
# returns the tensor that holds the result (the library call returns a fresh tensor).
Launch = Callable[[Tensors, Any, Params], Any]


@dataclass(frozen=True)
class Operation:
    name: str
    description: str
    make_inputs: Callable[[str, int, Params], Tensors]
    """(shape, seed, params) -> fresh random inputs on the GPU, never zeros. Shapes are the config's
    strings ('4096x768', '65536x1048576x64-powerlaw'); harness.config.parse_shape/shape_tag read them."""
    make_output: Callable[[Tensors, str], Any]
    """(inputs, shape) -> an uninitialised output tensor (the check poisons it)."""
    reference: Callable[[Tensors, Params], Any]
    """(inputs, params) -> float64 reference output."""
    implementations: Mapping[str, Launch]
    bytes_moved: Callable[[str], int]
    """Fewest bytes a kernel must move through device memory (each input read, output written once)."""
    flops: Callable[[str], int]
    """Floating-point operations of one call (the arithmetic the operation needs, not what a kernel does)."""
    validate_shape: Callable[[str], None]
    """Raise an exception with a one-sentence reason if the shape is not one this operation takes."""
    sources: Mapping[str, list[str]] = field(default_factory=dict)
    """impl -> kernel source files under kernels/ (for source hashes)."""
    kernels: str = ""
    """Module describing our kernels' specializations (variants_for), e.g. 'harness.layernorm_kernels'."""
    dim_names: tuple[str, ...] = ()
    """Names of the shape's dimensions, for the external kind's launch expressions ('rows', 'width')."""


KNOWN = ("layernorm", "matmul", "softmax", "neighbor_aggregation", "transpose")


def get(name: str) -> Operation:
    if name not in KNOWN:
        raise EvidenceError(f"unknown operation {name!r}; known operations are {', '.join(KNOWN)}.")
    module = importlib.import_module(f"harness.ops.{name}")
    op: Operation = module.OP
    return op


def launcher(op: Operation, impl: str, params: Params | None = None, shape: str | None = None) -> Launch:
    """The launch function of one implementation; 'external' is built from the op's config block,
    its launch geometry evaluated on the dimensions of `shape`."""
    if impl == "external":
        from harness import external

        if not params or "external" not in params:
            raise EvidenceError(f"operation {op.name!r} has no 'external' block in the config, so it has no external implementation.")
        ext = external.make_launcher(op, params["external"])
        dims = external.dims_from_shape(shape, op.dim_names) if shape else None
        return lambda inputs, out, p: ext(inputs, out, p, dims=dims)
    try:
        return op.implementations[impl]
    except KeyError:
        raise EvidenceError(
            f"operation {op.name!r} has no implementation {impl!r}; it has "
            f"{', '.join(op.implementations)}.") from None


def bind(op_name: str, impl: str, shape: str, params: Params, seed: int) -> Callable[[], Any]:
    """Fresh inputs and an output for one (operation, shape, implementation), and a zero-argument
    call that launches it once on them (the form the capture target and the span timer use)."""
    op = get(op_name)
    launch = launcher(op, impl, params, shape)
    inputs = op.make_inputs(shape, seed, params)
    out = op.make_output(inputs, shape)
    out.fill_(float("nan"))

    def call() -> Any:
        return launch(inputs, out, params)

    return call
