"""Seeded random graphs in CSR form for neighbour aggregation (no downloads).

A graph of NODES nodes and exactly EDGES directed edges j -> i, stored by destination: row i of
the CSR lists its in-edges, `indices[indptr[i]:indptr[i + 1]]` being their source nodes j.
    indptr   int32 [nodes + 1], indptr[0] == 0, non-decreasing, indptr[nodes] == edges
    indices  int32 [edges], 0 <= j < nodes, in NO particular order within a row (each a fresh
             uniform draw; rows are not sorted), and repeats allowed (a multigraph: a hub with
             more in-edges than there are nodes must repeat sources; every edge counts)

Kinds:
    uniform   each edge's destination uniform over the nodes (in-degrees ~ Binomial(E, 1/N),
              about Poisson(E / N)); each source uniform.
    powerlaw  destination in-degrees follow a power law P(d) ~ d^-exponent: the node of rank r
              (1-based) is each edge's destination with probability proportional to
              r^(-1 / (exponent - 1)) (Zipf's rank-size form of that law; exponent 2 gives 1 / r),
              the ranks placed on the nodes by a random permutation, so the hubs sit at random
              row numbers. The top hub expects E / H in-edges, H = sum_r r^(-1/(exponent-1))
              (about 90 000 of 1 048 576 edges for 65 536 nodes and exponent 2), and many nodes
              get none. Sources uniform.

Two generators with the same algorithm: `generate_numpy` (CPU, numpy's PCG64) and
`generate_torch` (any torch device, torch's generator for that device, so on the GPU the graph
is made where it is used). Each is deterministic for a seed, but they draw from different random
streams, so the same seed gives different (equally distributed) graphs on numpy, torch CPU and
torch CUDA.
"""

from __future__ import annotations

import math
from typing import Any

KINDS = ("uniform", "powerlaw")


def kind_of(tag: str | None) -> str:
    """The graph kind a shape tag names: None or 'uniform' -> 'uniform', 'powerlaw'."""
    kind = "uniform" if tag is None else tag
    if kind not in KINDS:
        raise ValueError(f"graph tag {tag!r} is not one of {', '.join(KINDS)}")
    return kind


def check_args(nodes: int, edges: int, kind: str, exponent: float) -> None:
    """ValueError with a short reason if the arguments do not describe a graph we can make."""
    if kind not in KINDS:
        raise ValueError(f"graph kind {kind!r} is not one of {', '.join(KINDS)}")
    if not 1 <= nodes <= 2**31 - 2:
        raise ValueError(f"a graph needs 1 to {2**31 - 2} nodes, not {nodes}")
    if not 0 <= edges <= 2**31 - 1:
        raise ValueError(f"a graph needs 0 to {2**31 - 1} edges, not {edges}")
    if kind == "powerlaw" and not (math.isfinite(exponent) and exponent > 1.0):
        raise ValueError(f"the power-law exponent must be finite and > 1, not {exponent}")


def rank_power(exponent: float) -> float:
    """s in weight(rank r) = r^-s for in-degree law P(d) ~ d^-exponent: s = 1 / (exponent - 1)."""
    return 1.0 / (exponent - 1.0)


def expected_top_degree(nodes: int, edges: int, exponent: float) -> float:
    """Expected in-degree of the top hub of a power-law graph: E / sum_r r^-s."""
    s = rank_power(exponent)
    return edges / math.fsum(r ** -s for r in range(1, nodes + 1))


# ----------------------------------------------------------------------------- numpy (CPU)


def generate_numpy(nodes: int, edges: int, kind: str = "uniform", seed: int = 0,
                   exponent: float = 2.0) -> tuple[Any, Any]:
    """(indptr, indices) as numpy int32 arrays, made on the CPU with numpy."""
    import numpy as np

    check_args(nodes, edges, kind, exponent)
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        dst = rng.integers(0, nodes, size=edges, dtype=np.int64)
    else:
        log_rank = np.log(np.arange(1, nodes + 1, dtype=np.float64))
        cdf = np.cumsum(np.exp(-rank_power(exponent) * log_rank))
        rank = np.searchsorted(cdf, rng.random(edges) * cdf[-1], side="right")
        np.minimum(rank, nodes - 1, out=rank)
        dst = rng.permutation(nodes)[rank]
    degrees = np.bincount(dst, minlength=nodes)
    indptr = np.zeros(nodes + 1, dtype=np.int64)
    np.cumsum(degrees, out=indptr[1:])
    indices = rng.integers(0, nodes, size=edges, dtype=np.int32)
    return indptr.astype(np.int32), indices


# ----------------------------------------------------------------------------- torch (any device)


def generate_torch(nodes: int, edges: int, kind: str = "uniform", seed: int = 0,
                   exponent: float = 2.0, device: Any = "cuda") -> tuple[Any, Any]:
    """(indptr, indices) as torch int32 tensors on `device`, made there with torch."""
    import torch

    check_args(nodes, edges, kind, exponent)
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    if kind == "uniform":
        dst = torch.randint(0, nodes, (edges,), generator=gen, device=device)
    else:
        ranks = torch.arange(1, nodes + 1, dtype=torch.float64, device=device)
        cdf = torch.cumsum(torch.exp(-rank_power(exponent) * torch.log(ranks)), 0)
        u = torch.rand(edges, dtype=torch.float64, generator=gen, device=device) * cdf[-1]
        rank = torch.searchsorted(cdf, u, right=True).clamp_(max=nodes - 1)
        dst = torch.randperm(nodes, generator=gen, device=device)[rank]
    degrees = torch.bincount(dst, minlength=nodes)
    indptr = torch.zeros(nodes + 1, dtype=torch.int64, device=device)
    torch.cumsum(degrees, 0, out=indptr[1:])
    indices = torch.randint(0, nodes, (edges,), generator=gen, device=device, dtype=torch.int32)
    return indptr.to(torch.int32), indices


def in_degrees(indptr: Any) -> Any:
    """In-degree of every node, int64, as a numpy array or torch tensor like indptr."""
    degrees = indptr[1:] - indptr[:-1]
    return degrees.long() if _is_torch(indptr) else degrees.astype("int64")


def coo_rows(indptr: Any, edges: int) -> Any:
    """The destination node of every edge (the COO row index) in CSR order: int64 torch tensor on
    indptr's device (no device-to-host copy: `edges` is the output size)."""
    import torch

    degrees = (indptr[1:] - indptr[:-1]).long()
    nodes = torch.arange(degrees.numel(), device=indptr.device)
    return torch.repeat_interleave(nodes, degrees, output_size=edges)


def _is_torch(a: Any) -> bool:
    return type(a).__module__.startswith("torch")
