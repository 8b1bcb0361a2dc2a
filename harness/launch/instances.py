"""What the build and the launchers need to know about one compiled instance of one of our kernels.

Each operation's kernel module (harness/ops/<op>/kernels.py) describes its instances with these
two shapes and lists, in `instances_for(impl, shapes)`, the ones a set of shapes needs; the launcher
and the census use the same descriptions, so the census describes the code that runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.errors import EvidenceError
from harness.launch import sources
from harness.launch.cuda import dispatch_define


class CudaSpec(Protocol):
    """A CUDA instance: one name expression of one .cu file under kernels/."""

    @property
    def source(self) -> str: ...  # file name under kernels/, e.g. "layernorm/layernorm.cu"

    @property
    def kernel(self) -> str: ...  # name expression, e.g. "layernorm_fwd_vec4<128, 2>"

    @property
    def block(self) -> int: ...  # threads per block

    @property
    def specialization(self) -> str: ...  # short text for tables

    @property
    def dynamic_smem(self) -> int: ...  # bytes of dynamic shared memory per block at launch


class TritonSpec(Protocol):
    """A Triton instance: one @triton.jit function with fixed constexprs and options."""

    @property
    def source(self) -> str: ...  # file name under kernels/, e.g. "layernorm/layernorm_triton.py"

    @property
    def kernel(self) -> str: ...  # the function's name

    @property
    def block(self) -> int: ...  # threads per program (32 * num_warps)

    @property
    def specialization(self) -> str: ...

    @property
    def num_warps(self) -> int: ...

    def jit_function(self) -> Any: ...  # the @triton.jit object

    def signature(self) -> dict[str, str]: ...  # argument name -> Triton type, as the JIT derives it

    def constexprs(self) -> dict[str, Any]: ...

    def aligned_args(self) -> tuple[int, ...]: ...  # indices the JIT specializes as 16-byte aligned

    def compile_options(self) -> dict[str, Any]: ...  # e.g. {"num_warps": 4, "num_stages": 3}


@dataclass(frozen=True)
class InstanceShapes:
    """A compiled instance and the shapes it serves."""

    instance: Any
    shapes: tuple[tuple[int, ...], ...]

    @property
    def shapes_text(self) -> str:
        """The shapes ';'-joined as 'AxB', e.g. '4096x768;8192x768'."""
        return ";".join("x".join(str(d) for d in s) for s in self.shapes)


def group_by_instance(shapes: Iterable[Sequence[int]], pick: Callable[[tuple[int, ...]], Any]) -> list[InstanceShapes]:
    """Each distinct instance `pick(shape)` returns, in order of first use, with its shapes."""
    found: dict[Any, list[tuple[int, ...]]] = {}
    for shape in shapes:
        key = tuple(int(d) for d in shape)
        served = found.setdefault(pick(key), [])
        if key not in served:
            served.append(key)
    return [InstanceShapes(v, tuple(s)) for v, s in found.items()]


@dataclass(frozen=True)
class SimpleTritonSpec:
    """A TritonSpec for kernels whose instance is just constexprs and num_warps/num_stages."""

    source: str
    module: str  # importable module holding the function, e.g. "kernels.softmax.softmax_triton"
    kernel: str
    arg_types: tuple[tuple[str, str], ...]  # (name, type) in call order, constexprs typed "constexpr"
    constexpr_values: tuple[tuple[str, Any], ...]
    num_warps: int
    num_stages: int | None = None
    aligned: tuple[int, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def block(self) -> int:
        return 32 * self.num_warps

    @property
    def specialization(self) -> str:
        parts = [f"{k}={v}" for k, v in self.constexpr_values] + [f"num_warps={self.num_warps}"]
        if self.num_stages is not None:
            parts.append(f"num_stages={self.num_stages}")
        return " ".join(parts)

    def jit_function(self) -> Any:
        return getattr(sources.module(self.module), self.kernel)

    def signature(self) -> dict[str, str]:
        return dict(self.arg_types)

    def constexprs(self) -> dict[str, Any]:
        return dict(self.constexpr_values)

    def aligned_args(self) -> tuple[int, ...]:
        return self.aligned

    def compile_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_warps": self.num_warps}
        if self.num_stages is not None:
            opts["num_stages"] = self.num_stages
        return opts


def pick_ours(impl: str, what: str, cuda: Callable[[], Any], triton: Callable[[], Any]) -> Any:
    """Our instance for `impl` (`cuda()` or `triton()`); an EvidenceError naming `what`
    (e.g. 'Softmax') for any other implementation, which we do not build."""

    if impl == "cuda":
        return cuda()
    if impl == "triton":
        return triton()
    raise EvidenceError(f"{what} implementation {impl!r} is not ours; ours are cuda, triton.")


def rows_and_last(shape: Sequence[int], what: str) -> tuple[int, int]:
    """(rows, n) of a shape normalised over its last dimension: (4096, 768) -> (4096, 768)."""


    if len(shape) < 1:
        raise EvidenceError(f"A {what} shape needs at least one dimension.")
    return math.prod(shape[:-1]), int(shape[-1])


BLOCK_SIZES = ("64", "128", "256", "512", "1024")
"""Threads per block a variant's block-size define may name."""


def block_override(define: str, n: int, vec: int, default: int, what: str, max_slots: int = 8) -> int:
    """Threads per block for a row of width n on a block-per-row path whose threads hold
    ceil(n / (vec * block)) vectors: the variant's define `define` (64, 128, 256, 512 or 1024) where
    it sets one and the row then fits `max_slots` vectors per thread, else `default`."""

    value = dispatch_define(define, lambda v: v in BLOCK_SIZES, "64, 128, 256, 512 or 1024", what)
    if value is not None and -(-n // (vec * int(value))) <= max_slots:
        return int(value)
    return default
