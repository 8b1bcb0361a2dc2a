"""Launchers for our two neighbour-aggregation kernels, and the one dispatch on the feature width
they share with the census.

    out[i, :] = sum over e in [indptr[i], indptr[i + 1]) of x[indices[e], :]   (CSR, in-edges)

Each implementation is one summing kernel plus, for graphs with long rows, a zeroing kernel (see
kernels/neighbor_aggregation/neighbor_aggregation.cu for the argument):
    sum:  one warp (CUDA) / program (Triton) per destination row, summing the row's first
          LONG_ROW_CHUNK in-edges (stored; zeros for an empty row), and, in the same launch, one
          per LONG_ROW_PIECE edges of the edge array, summing the part of a longer row (a
          power-law hub) in that piece past its first LONG_ROW_CHUNK edges; long rows' sums are
          added with atomics.
    zero: zeroes the long rows before the sum kernel adds into them.
The pieces and the zeroing run only when some row has more than LONG_ROW_CHUNK in-edges: the
launchers take the graph's maximum in-degree (`max_degree`, a host int known when the graph is
made) and otherwise launch the sum kernel over the rows alone; with `max_degree=None` they always
run them (correct for any graph). `instances_for` lists both kernels of every width, since the
shape alone does not say whether a graph has long rows.

CUDA (blocks of 128 threads: 4 rows or pieces per block), by feature width F:
    VEC    = 4 if F % 4 == 0 else 1                  (128-bit or 32-bit accesses)
    GROUP  = min(32, next power of two >= F / VEC)   lanes covering one x row
    SLOTS  = ceil(F / VEC / GROUP)                   vectors per lane (> 1 only for F / VEC > 32)
    UNROLL = max(1, min(8 // SLOTS, GROUP))          rows in flight per group per step
e.g. F = 16: <4, 4, 1, 4> (8 edges at once, 4 loads in flight per lane, 32 edges a step);
F = 64: <4, 16, 1, 8>; F = 128: <4, 32, 1, 8>; F = 256: <4, 32, 2, 4>; F = 7: <1, 8, 1, 8>.
Triton: BLOCK_F = next power of two >= F, BLOCK_E = clamp(1024 // BLOCK_F, 2, 16) edges a step,
num_warps = clamp(BLOCK_E * BLOCK_F // 512, 1, 8) (kernels/neighbor_aggregation/neighbor_aggregation_triton.py).
"""

from __future__ import annotations

import functools
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
from harness.launch.cuda import Launch
from harness.launch.instances import SimpleTritonSpec, InstanceShapes, pick_ours

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["InstanceShapes", "CudaSumInstance", "CudaZeroInstance", "cuda_instances",
           "triton_instances", "instances_for", "needs_long_pass", "launch_cuda", "launch_triton"]

CUDA_SOURCE = "neighbor_aggregation/neighbor_aggregation.cu"
"""Kernel source under kernels/ for the CUDA implementation."""

TRITON_SOURCE = "neighbor_aggregation/neighbor_aggregation_triton.py"
"""Kernel source under kernels/ for the Triton implementation."""

TRITON_MODULE = "kernels.neighbor_aggregation.neighbor_aggregation_triton"

MAX_FEATURES = 1024
"""Widest feature dimension either implementation supports (a lane's slice lives in registers)."""

LONG_ROW_CHUNK = 256
"""In-edges a row's own warp / program sums at most; the rest of a longer row goes in pieces."""

LONG_ROW_PIECE = 256
"""Edges of the edge array per piece warp / program (a multiple of 32, at most LONG_ROW_CHUNK).
On the H200, 256 ran the 65536x1048576x64-powerlaw graph in 58.6 us, 128 in 59.7, 64 in 60.1
and 32 in 71.4 (CUDA, F = 64; F = 256: 199, 204, 206, 218 us)."""

CUDA_BLOCK = 128
"""Threads per CUDA block (4 warps: 4 rows or pieces; 128 rows for the zeroing)."""

MAX_NODES = 2**31 - 64
"""Most rows: indptr is int32 and the row search probes up to 32 entries past a bound."""

MAX_EDGES = 2**31 - 1 - LONG_ROW_CHUNK
"""Most edges: int32 indices, and edge + LONG_ROW_CHUNK must fit an int32."""


# ----------------------------------------------------------------------------- dispatch


@dataclass(frozen=True)
class CudaSumInstance:
    """One compiled instance of neighbor_sum in kernels/neighbor_aggregation/neighbor_aggregation.cu."""

    vec: int
    """Floats per access: 4 (128-bit) or 1 (32-bit)."""
    group: int
    """Lanes covering one row of x (32 // group edges are gathered at once)."""
    slots: int
    """Vectors of a row each lane holds."""
    unroll: int
    """Rows each group loads per step before adding."""
    block: int = CUDA_BLOCK

    source: str = CUDA_SOURCE
    dynamic_smem: int = 0

    @property
    def kernel(self) -> str:
        """The name expression, e.g. 'neighbor_sum<4, 16, 1, 8>'."""
        return f"neighbor_sum<{self.vec}, {self.group}, {self.slots}, {self.unroll}>"

    @property
    def specialization(self) -> str:
        """Short description for tables, e.g. 'sum vec4 group=16 slots=1 unroll=8 block=128'."""
        return (f"sum vec{self.vec} group={self.group} slots={self.slots} "
                f"unroll={self.unroll} block={self.block}")


@dataclass(frozen=True)
class CudaZeroInstance:
    """One compiled instance of neighbor_zero_long_rows (one thread per row)."""

    vec: int
    block: int = CUDA_BLOCK

    source: str = CUDA_SOURCE
    dynamic_smem: int = 0

    @property
    def kernel(self) -> str:
        """The name expression, e.g. 'neighbor_zero_long_rows<4>'."""
        return f"neighbor_zero_long_rows<{self.vec}>"

    @property
    def specialization(self) -> str:
        return f"zero long rows vec{self.vec} block={self.block}"


def _check_features(features: int) -> None:
    if not 1 <= features <= MAX_FEATURES:
        raise EvidenceError(f"Neighbour-aggregation feature width {features} is outside the "
                            f"supported range 1..{MAX_FEATURES}.")


def cuda_params(features: int) -> tuple[int, int, int, int]:
    """(VEC, GROUP, SLOTS, UNROLL) for feature width F (see the module docstring)."""
    _check_features(features)
    vec = 4 if features % 4 == 0 else 1
    nvec = features // vec
    group = min(32, 1 << (nvec - 1).bit_length())
    slots = math.ceil(nvec / group)
    unroll = max(1, min(8 // slots, group))
    return vec, group, slots, unroll


@functools.lru_cache(maxsize=None)
def cuda_instances(features: int) -> tuple[CudaSumInstance, CudaZeroInstance]:
    """The (sum, zero) CUDA specializations that serve feature width F."""
    params = cuda_params(features)
    return CudaSumInstance(*params), CudaZeroInstance(params[0])


_TRITON_SUM_ARGS = (("X", "*fp32"), ("INDPTR", "*i32"), ("INDICES", "*i32"), ("OUT", "*fp32"),
                    ("nodes", "i32"), ("edges", "i32"), ("F", "constexpr"),
                    ("BLOCK_F", "constexpr"), ("BLOCK_E", "constexpr"), ("CHUNK", "constexpr"),
                    ("PIECE", "constexpr"))
_TRITON_ZERO_ARGS = (("INDPTR", "*i32"), ("OUT", "*fp32"), ("nodes", "i32"), ("F", "constexpr"),
                     ("BLOCK_F", "constexpr"), ("BLOCK_R", "constexpr"), ("CHUNK", "constexpr"))


def triton_instances(features: int) -> tuple[SimpleTritonSpec, SimpleTritonSpec]:
    """The (sum, zero) Triton specializations that serve feature width F (the heuristics of the
    Triton source in force, harness.launch.sources)."""
    return _triton_instances(features, sources.tag())


@functools.lru_cache(maxsize=None)
def _triton_instances(features: int, tag: str) -> tuple[SimpleTritonSpec, SimpleTritonSpec]:
    _kernels = sources.module("kernels.neighbor_aggregation.neighbor_aggregation_triton")
    (ZERO_WARPS, block_e_for, block_f_for, block_r_for, num_warps_for) = (
        _kernels.ZERO_WARPS, _kernels.block_e_for, _kernels.block_f_for, _kernels.block_r_for, _kernels.num_warps_for)

    _check_features(features)
    block_f = block_f_for(features)
    block_e = block_e_for(block_f)
    summing = SimpleTritonSpec(
        source=TRITON_SOURCE, module=TRITON_MODULE, kernel="neighbor_sum",
        arg_types=_TRITON_SUM_ARGS,
        constexpr_values=(("F", features), ("BLOCK_F", block_f), ("BLOCK_E", block_e),
                          ("CHUNK", LONG_ROW_CHUNK), ("PIECE", LONG_ROW_PIECE)),
        num_warps=num_warps_for(block_e, block_f), aligned=(0, 1, 2, 3))
    zeroing = SimpleTritonSpec(
        source=TRITON_SOURCE, module=TRITON_MODULE, kernel="neighbor_zero_long_rows",
        arg_types=_TRITON_ZERO_ARGS,
        constexpr_values=(("F", features), ("BLOCK_F", block_f),
                          ("BLOCK_R", block_r_for(block_f)), ("CHUNK", LONG_ROW_CHUNK)),
        num_warps=ZERO_WARPS, aligned=(0, 1))
    return summing, zeroing


def instances(impl: str, features: int) -> tuple[Any, Any]:
    """`cuda_instances` or `triton_instances` by implementation name."""
    return pick_ours(impl, "Neighbour-aggregation", lambda: cuda_instances(features), lambda: triton_instances(features))


def features_of(shape: Sequence[int]) -> int:
    """F of a (nodes, edges, F) shape."""
    if len(shape) != 3:
        raise EvidenceError(f"A neighbour-aggregation shape is (nodes, edges, features), not "
                            f"{tuple(shape)}.")
    return int(shape[2])


def instances_for(impl: str, shapes: Iterable[Sequence[int]]) -> list[InstanceShapes]:
    """Each distinct instance the shapes need (both kernels of each width), in order of
    first use, with its shapes."""
    found: dict[Any, list[tuple[int, ...]]] = {}
    for shape in shapes:
        key = tuple(int(d) for d in shape)
        for v in instances(impl, features_of(key)):
            served = found.setdefault(v, [])
            if key not in served:
                served.append(key)
    return [InstanceShapes(v, tuple(s)) for v, s in found.items()]


def needs_long_pass(max_degree: int | None) -> bool:
    """Whether pieces and zeroing must run for a graph of this maximum in-degree (None: unknown)."""
    return max_degree is None or max_degree > LONG_ROW_CHUNK


# ----------------------------------------------------------------------------- launchers


def validate(x: Any, indptr: Any, indices: Any, out: Any,
             max_degree: int | None = None) -> tuple[int, int, int]:
    """Check the tensors of a launch and return (nodes, edges, features); EvidenceError with one
    sentence if not x [nodes, F] and out [nodes, F] float32, indptr int32 [nodes + 1], indices
    int32 [edges], all contiguous, 16-byte aligned, on one CUDA device, out apart from the inputs.

    The CSR's contents (indptr[0] == 0, non-decreasing, indptr[nodes] == edges, indices in
    [0, nodes), max_degree >= the largest row) are the caller's promise: checking them would need
    a device-to-host copy on every call."""
    import torch

    check_tensors("Neighbour-aggregation",
                  {"x": x, "indptr": indptr, "indices": indices, "out": out},
                  dtypes={"x": torch.float32, "indptr": torch.int32, "indices": torch.int32,
                          "out": torch.float32},
                  types_first=True)
    if x.dim() != 2:
        raise EvidenceError(f"Neighbour-aggregation input x has shape {tuple(x.shape)}, but must "
                            f"be [nodes, features].")
    nodes, features = x.shape
    if indptr.dim() != 1 or indptr.numel() != nodes + 1:
        raise EvidenceError(f"Neighbour-aggregation indptr has shape {tuple(indptr.shape)}, but "
                            f"must be ({nodes + 1},) for {nodes} nodes.")
    if indices.dim() != 1:
        raise EvidenceError(f"Neighbour-aggregation indices has shape {tuple(indices.shape)}, "
                            f"but must be one-dimensional [edges].")
    if out.shape != x.shape:
        raise EvidenceError(f"Neighbour-aggregation output has shape {tuple(out.shape)}, but must "
                            f"be ({nodes}, {features}) like x.")
    check_apart("Neighbour-aggregation", out, {"x": x, "indptr": indptr, "indices": indices})
    edges = indices.numel()
    if nodes > MAX_NODES or edges > MAX_EDGES:
        raise EvidenceError(f"Neighbour-aggregation graph of {nodes} nodes and {edges} edges is "
                            f"larger than the int32 CSR supports ({MAX_NODES} nodes, "
                            f"{MAX_EDGES} edges).")
    if max_degree is not None and not 0 <= max_degree <= edges:
        raise EvidenceError(f"Neighbour-aggregation max_degree {max_degree} is not between 0 and "
                            f"the {edges} edges.")
    _check_features(features)
    return nodes, edges, features


def _pieces(edges: int, max_degree: int | None) -> int:
    """Piece warps / programs of the sum kernel: none unless long rows may exist."""
    return -(-edges // LONG_ROW_PIECE) if edges and needs_long_pass(max_degree) else 0


def _max_degree(inputs: Mapping[str, Any]) -> int | None:
    value = inputs.get("max_degree")
    return None if value is None else int(value)


def bind_cuda(inputs: Mapping[str, Any], out: Tensor, params: Mapping[str, Any]) -> Launch:
    """Aggregate input x over the CSR graph (indptr, indices) into `out` with our CUDA kernels,
    bound once. `max_degree` (the graph's largest in-degree, when the inputs carry it) lets a graph
    with no long row skip the long-row pieces and their zeroing."""
    x, indptr, indices, max_degree = inputs["x"], inputs["indptr"], inputs["indices"], _max_degree(inputs)
    nodes, edges, features = validate(x, indptr, indices, out, max_degree)
    if nodes == 0:
        return cuda_launch.nothing(out)
    summing, zeroing = cuda_instances(features)
    pieces = _pieces(edges, max_degree)
    p_x, p_indptr, p_indices, p_out = (cuda_launch.pointer(t) for t in (x, indptr, indices, out))
    n, f, chunk = numpy.int32(nodes), numpy.int32(features), numpy.int32(LONG_ROW_CHUNK)
    launches = []
    if pieces:
        launches.append(cuda_launch.bind(CUDA_SOURCE, zeroing.kernel, (-(-nodes // zeroing.block),), (zeroing.block,),
                                         (p_indptr, p_out, n, f, chunk), x.device, out=out))
    warps = nodes + pieces
    launches.append(cuda_launch.bind(CUDA_SOURCE, summing.kernel, (-(-warps // (summing.block // 32)),), (summing.block,),
                                     (p_x, p_indptr, p_indices, p_out, n, numpy.int32(edges), f, chunk,
                                      numpy.int32(LONG_ROW_PIECE)), x.device, out=out))
    return cuda_launch.sequence(*launches)


def bind_triton(inputs: Mapping[str, Any], out: Tensor, params: Mapping[str, Any]) -> Launch:
    """Aggregate input x over the CSR graph into `out` with our Triton kernels, bound once
    (harness.launch.triton)."""
    _kernels = sources.module("kernels.neighbor_aggregation.neighbor_aggregation_triton")
    neighbor_sum, neighbor_zero_long_rows = _kernels.neighbor_sum, _kernels.neighbor_zero_long_rows

    x, indptr, indices, max_degree = inputs["x"], inputs["indptr"], inputs["indices"], _max_degree(inputs)
    nodes, edges, features = validate(x, indptr, indices, out, max_degree)
    if nodes == 0:
        return cuda_launch.nothing(out)
    summing, zeroing = triton_instances(features)
    pieces = _pieces(edges, max_degree)
    index = cuda_launch.device_index(x.device)
    launches = []
    if pieces:
        block_r = zeroing.constexprs()["BLOCK_R"]
        launches.append(triton_launch.bind(neighbor_zero_long_rows, (-(-nodes // block_r),), (indptr, out, nodes),
                                           zeroing.constexprs(), {"num_warps": zeroing.num_warps}, index, out=out))
    launches.append(triton_launch.bind(neighbor_sum, (nodes + pieces,), (x, indptr, indices, out, nodes, edges),
                                       summing.constexprs(), {"num_warps": summing.num_warps}, index, out=out))
    launch = cuda_launch.sequence(*launches)
    if len(launches) > 1:
        launch.launch_path = "+".join(sorted({getattr(x, "launch_path", "jit") for x in launches}))  # type: ignore[attr-defined]
    return launch


def launch_cuda(x: Any, indptr: Any, indices: Any, out: Any, max_degree: int | None = None) -> Tensor:
    """One launch of `bind_cuda` (asynchronous; returns out)."""
    return bind_cuda({"x": x, "indptr": indptr, "indices": indices, "max_degree": max_degree}, out, {})()


def launch_triton(x: Any, indptr: Any, indices: Any, out: Any, max_degree: int | None = None) -> Tensor:
    """One launch of `bind_triton` (asynchronous; returns out)."""
    return bind_triton({"x": x, "indptr": indptr, "indices": indices, "max_degree": max_degree}, out, {})()
