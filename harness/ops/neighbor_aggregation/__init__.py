"""FP32 neighbour aggregation over a graph in CSR form: out[i, :] = sum over in-neighbours j of i
of x[j, :] (every in-edge counts, repeats included).

Shapes are 'NODESxEDGESxFEATURES' with an optional tag: none or '-uniform' for a uniform random
graph, '-powerlaw' for a power-law in-degree graph (exponent: the config's `degree_exponent`,
default 2.0). The graph comes from harness/ops/neighbor_aggregation/graphs.py, made on the GPU with torch from the seed, so
all implementations of one shape and seed see the same graph.

Inputs (all on the GPU, made once, outside any timed call):
    x          float32 [nodes, F], randn
    indptr     int32 [nodes + 1], indices int32 [edges]: the CSR (rows = destinations, indices =
               sources, unsorted within a row)
    dst, src   int64 [edges]: the same edges as COO (destination, source), for index_add_
    adjacency  float32 sparse CSR [nodes, nodes], entry (i, j) = number of edges j -> i (repeats
               summed, columns sorted), for torch.sparse.mm
    max_degree int64 scalar on the CPU: the largest in-degree; when it is <= LONG_ROW_CHUNK our
               launchers run one kernel over the rows and skip the long-row pieces and zeroing
               (graph metadata, like the COO and CSR copies)

The torch implementation is the library call named by TORCH_METHOD: 'sparse_mm' (default, the
faster: torch.sparse.mm(adjacency, x), cuSPARSE SpMM) or 'index_add' (out.zero_();
out.index_add_(0, dst, x.index_select(0, src))). To switch, set TORCH_METHOD in this module
(tests/test_neighbor_aggregation_gpu.py times both and prints which is faster; on the H200
sparse_mm took 97 us and index_add 1123 us on 65536x1048576x64, 100 and 1570 us on its
power-law graph: GPU time, host overhead hidden).
"""

from __future__ import annotations

import warnings
from typing import Any

from harness.ops import Call, Params, Tensors, define
from harness.ops.neighbor_aggregation.graphs import (
    coo_rows,
    generate_torch,
    in_degrees,
    kind_of,
)
from harness.ops.neighbor_aggregation.kernels import (
    MAX_EDGES,
    MAX_FEATURES,
    MAX_NODES,
)
from harness.shapes import parse_shape, shape_tag

DESCRIPTION = "FP32 sum of in-neighbours' feature rows over a CSR graph"
DIMS = ("nodes", "edges", "features")
PARAMS = {"degree_exponent": {"type": "number", "exclusiveMinimum": 1, "maximum": 4, "default": 2.0}}
"""This operation's own config keys (JSON schema, with defaults)."""
TEST_SHAPES = ("1000x8000x7", "2000x30000x16-powerlaw")
"""Edge shapes the generic GPU test (tests/test_ops_gpu.py) checks besides the default: features not a multiple of 4, and long rows (powerlaw degrees)."""

TORCH_METHOD = "sparse_mm"
"""The library call `implementations['torch']` runs: 'sparse_mm' (the faster on the H200) or 'index_add'."""

DEFAULT_DEGREE_EXPONENT = 2.0


def graph_seed(seed: int) -> int:
    """The seed of a shape's graph, apart from the seed of x's values."""
    return (seed * 1_000_003 + 17) % 2**63


def dims(shape: str) -> tuple[int, int, int, str]:
    """(nodes, edges, features, graph kind) of a shape string."""

    nodes, edges, features = parse_shape(shape)
    return nodes, edges, features, kind_of(shape_tag(shape))


def validate_shape(shape: str) -> None:

    if len(parse_shape(shape)) != 3:
        raise ValueError("a neighbour-aggregation shape is NODESxEDGESxFEATURES with an optional "
                         "-uniform or -powerlaw tag")
    nodes, edges, features, _ = dims(shape)  # raises ValueError for an unknown tag
    if nodes > MAX_NODES or edges > MAX_EDGES:
        raise ValueError(f"graphs are limited to {MAX_NODES} nodes and {MAX_EDGES} edges (int32 CSR)")
    if features > MAX_FEATURES:
        raise ValueError(f"feature widths above {MAX_FEATURES} are not supported (a lane's slice "
                         f"of a row is held in registers)")


def make_inputs(shape: str, seed: int, params: Params) -> Tensors:
    import torch


    nodes, edges, features, kind = dims(shape)
    exponent = float(params.get("degree_exponent", DEFAULT_DEGREE_EXPONENT))
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(nodes, features, device="cuda", dtype=torch.float32, generator=gen)
    indptr, indices = generate_torch(nodes, edges, kind, graph_seed(seed), exponent, device="cuda")
    dst = coo_rows(indptr, edges)
    src = indices.long()
    adjacency = adjacency_csr(dst, src, nodes)
    max_degree = in_degrees(indptr).max().cpu()
    return {"x": x, "indptr": indptr, "indices": indices, "dst": dst, "src": src,
            "adjacency": adjacency, "max_degree": max_degree}


def adjacency_csr(dst: Any, src: Any, nodes: int) -> Any:
    """The float32 sparse CSR matrix A [nodes, nodes] with A[i, j] = number of edges j -> i."""

    import torch

    ones = torch.ones(dst.numel(), device=dst.device, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta" notices
        coo = torch.sparse_coo_tensor(torch.stack([dst, src]), ones, (nodes, nodes))
        return coo.coalesce().to_sparse_csr()


def make_output(inputs: Tensors, shape: str) -> Any:
    import torch

    return torch.empty_like(inputs["x"])


def reference(inputs: Tensors, params: Params) -> Any:
    import torch

    x = inputs["x"]
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    return out.index_add_(0, inputs["dst"], x.double()[inputs["src"]])


def torch_index_add(inputs: Tensors, out: Any, params: Params) -> Call:
    """out.zero_(); out.index_add_(0, dst, x.index_select(0, src)): gathers every edge's source
    row into an [edges, F] tensor, then scatter-adds it by destination (atomics)."""
    x, dst, src = inputs["x"], inputs["dst"], inputs["src"]

    def call() -> Any:
        out.zero_()
        return out.index_add_(0, dst, x.index_select(0, src))

    return call


def torch_sparse_mm(inputs: Tensors, out: Any, params: Params) -> Call:
    """torch.sparse.mm(adjacency, x): cuSPARSE SpMM with the CSR adjacency (a fresh tensor)."""
    import torch

    adjacency, x, mm = inputs["adjacency"], inputs["x"], torch.sparse.mm
    return lambda: mm(adjacency, x)


TORCH_METHODS = {"index_add": torch_index_add, "sparse_mm": torch_sparse_mm}


def bind_torch(inputs: Tensors, out: Any, params: Params) -> Call:
    """The library call named by TORCH_METHOD ('sparse_mm' by default; see the module docstring)."""
    return TORCH_METHODS[TORCH_METHOD](inputs, out, params)


def bytes_moved(shape: str) -> int:
    # The fewest: x read once, indices and indptr read once, out written once. A real kernel
    # reads x's row j once per edge (4 * edges * F bytes), from L2 or memory: x is re-read
    # edges / nodes times on average, so this figure is a floor, not what the kernels move.
    nodes, edges, features, _ = dims(shape)
    return 4 * nodes * features + 4 * edges + 4 * (nodes + 1) + 4 * nodes * features


def flops(shape: str) -> int:
    # One addition per edge and feature (edges * F; strictly (edges - non-empty rows) * F).
    _, edges, features, _ = dims(shape)
    return edges * features


def grow(inputs: Tensors, out: Any, fraction: float) -> tuple[Tensors, Any, Any]:
    """The planted slowdown's problem (harness.ops.launcher): the first nodes again after the last,
    with their in-neighbour lists, `fraction` more nodes in all; the result is the first rows of
    the larger output."""
    import torch

    x, indptr, indices = inputs["x"], inputs["indptr"], inputs["indices"]
    nodes = x.shape[0]
    extra = max(1, round(nodes * fraction))
    tail = indptr[1:extra + 1] + indptr[-1]
    grown = {**inputs, "x": torch.cat([x, x[:extra]]).contiguous(), "indptr": torch.cat([indptr, tail]).contiguous(),
             "indices": torch.cat([indices, indices[: int(indptr[extra])]]).contiguous()}
    bigger = torch.empty(nodes + extra, x.shape[1], device=x.device, dtype=x.dtype)
    return grown, bigger, bigger[:nodes]


OP = define(__name__)
