"""Operations the pipeline measures: inputs, float64 reference and implementations.

Each operation module defines an `OP` (an `Operation`); `get(name)` finds it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.errors import EvidenceError
from harness.launch import cuda as cuda_module
from harness.launch import external
from harness.ops import variants

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
    """Module describing our kernels' specializations (variants_for), e.g. 'harness.ops.layernorm.kernels'."""
    dim_names: tuple[str, ...] = ()
    """Names of the shape's dimensions, for the external kind's launch expressions ('rows', 'width')."""


def our_launch(module: str, function: str, *input_names: str) -> Launch:
    """An implementation that calls `module.function(*inputs[name] for name in input_names, out)`
    (our launchers write into `out`) and returns `out`; the module is imported on first use, so an
    operation imports without a GPU."""

    def launch(inputs: Tensors, out: Any, params: Params) -> Any:
        fn = getattr(importlib.import_module(module), function)
        fn(*(inputs[name] for name in input_names), out)
        return out

    launch.__name__ = f"{module}.{function}"
    return launch


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

        if not params or "external" not in params:
            raise EvidenceError(f"operation {op.name!r} has no 'external' block in the config, so it has no external implementation.")
        ext = external.make_launcher(op, params["external"])
        dims = external.dims_from_shape(shape, op.dim_names) if shape else None
        return lambda inputs, out, p: ext(inputs, out, p, dims=dims)

    base, name = variants.split(impl)
    if name is not None:
        options = variants.compiler_options(params, impl)
        base_launch = launcher(op, base, params, shape)

        def launch_variant(inputs: Tensors, out: Any, p: Params) -> Any:

            with cuda_module.variant_options(options):
                return base_launch(inputs, out, p)

        launch_variant.__name__ = f"{impl} ({' '.join(options)})"
        return launch_variant
    try:
        return op.implementations[impl]
    except KeyError:
        raise EvidenceError(
            f"operation {op.name!r} has no implementation {impl!r}; it has "
            f"{', '.join(op.implementations)}.") from None


COLD_FOOTPRINT_L2 = 4
"""In cold mode the rotated input sets together hold at least this many times the L2's bytes."""

COLD_MAX_BYTES = 16 * 2**30
"""...but never more than this in all (a shape that moves more is cold with two sets anyway)."""


def cold_sets(bytes_per_set: int, l2_bytes: int, footprint: int = COLD_FOOTPRINT_L2, cap: int = COLD_MAX_BYTES) -> int:
    """How many input sets cold mode rotates through: enough that a set was evicted from the L2 by
    the others before it comes round again (>= footprint x L2 in all, at least 2), within `cap`."""
    if bytes_per_set <= 0:
        return 2
    want = -(-footprint * l2_bytes // bytes_per_set) + 1  # ceil, plus the one in use
    return max(2, min(want, max(2, cap // bytes_per_set)))


def bind(op_name: str, impl: str, shape: str, params: Params, seed: int, cache_mode: str = "hot") -> Callable[[], Any]:
    """Fresh inputs and an output for one (operation, shape, implementation), and a zero-argument
    call that launches it once on them (the form the capture target and the span timer use).

    hot: every call reuses one input set, so a shape that fits in the L2 is read from it. cold: the
    calls rotate through `cold_sets` input sets (different seeds) and outputs, totalling several
    times the L2, so each call reads its inputs from device memory."""
    op = get(op_name)
    launch = launcher(op, impl, params, shape)
    count = 1
    if cache_mode == "cold":
        import torch

        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
        count = cold_sets(op.bytes_moved(shape), l2)
    sets = []
    for i in range(count):
        inputs = op.make_inputs(shape, seed + i, params)
        out = op.make_output(inputs, shape)
        out.fill_(float("nan"))
        sets.append((inputs, out))
    turn = [0]

    def call() -> Any:
        inputs, out = sets[turn[0]]
        turn[0] = (turn[0] + 1) % count
        return launch(inputs, out, params)

    call.input_sets = count  # type: ignore[attr-defined]
    return call
