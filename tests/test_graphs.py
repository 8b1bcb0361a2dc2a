"""The seeded graph generator (harness/ops/neighbor_aggregation/graphs.py) on the CPU: numpy, and torch on the CPU device.

Expected values are derived from the definitions (edge counts, CSR invariants, the top hub's
expected in-degree E / sum_r r^-s), not read off a run.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from harness.ops.neighbor_aggregation import graphs

torch = pytest.importorskip("torch")

NODES, EDGES = 4096, 65536


def _numpy(nodes: int, edges: int, kind: str, seed: int, exponent: float = 2.0) -> tuple:
    return graphs.generate_numpy(nodes, edges, kind, seed, exponent)


def _torch_cpu(nodes: int, edges: int, kind: str, seed: int, exponent: float = 2.0) -> tuple:
    indptr, indices = graphs.generate_torch(nodes, edges, kind, seed, exponent, device="cpu")
    assert indptr.dtype == torch.int32 and indices.dtype == torch.int32
    return indptr.numpy(), indices.numpy()


BACKENDS = {"numpy": _numpy, "torch-cpu": _torch_cpu}


def _check_csr(indptr: np.ndarray, indices: np.ndarray, nodes: int, edges: int) -> None:
    assert indptr.dtype == np.int32 and indices.dtype == np.int32
    assert indptr.shape == (nodes + 1,) and indices.shape == (edges,)
    assert indptr[0] == 0 and indptr[-1] == edges
    assert (np.diff(indptr.astype(np.int64)) >= 0).all()
    assert edges == 0 or (indices.min() >= 0 and indices.max() < nodes)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("kind", graphs.KINDS)
@pytest.mark.parametrize(("nodes", "edges"), [(NODES, EDGES), (1, 7), (1000, 0), (777, 12345)])
def test_csr_invariants(backend: str, kind: str, nodes: int, edges: int) -> None:
    indptr, indices = BACKENDS[backend](nodes, edges, kind, seed=5)
    _check_csr(indptr, indices, nodes, edges)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("kind", graphs.KINDS)
def test_same_seed_same_graph_other_seed_other_graph(backend: str, kind: str) -> None:
    make = BACKENDS[backend]
    a, b, c = make(NODES, EDGES, kind, 11), make(NODES, EDGES, kind, 11), make(NODES, EDGES, kind, 12)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not (np.array_equal(a[0], c[0]) and np.array_equal(a[1], c[1]))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_powerlaw_has_much_heavier_hubs(backend: str) -> None:
    make = BACKENDS[backend]
    uniform = np.diff(make(NODES, EDGES, "uniform", 3)[0])
    power = np.diff(make(NODES, EDGES, "powerlaw", 3)[0])
    mean = EDGES / NODES  # 16
    # Uniform: in-degrees ~ Poisson(16); the max over 4096 nodes is ~ 16 + 5 sigma, far below 64.
    assert uniform.max() < 4 * mean
    assert power.max() > 50 * uniform.max()
    # The top hub expects E / H in-edges (H = sum_r 1/r for exponent 2), with a binomial spread.
    expected = graphs.expected_top_degree(NODES, EDGES, 2.0)
    assert abs(power.max() - expected) < 5 * math.sqrt(expected)
    assert (power == 0).sum() > (uniform == 0).sum()  # the tail of ranks gets few or no edges


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_exponent_steepens_the_law(backend: str) -> None:
    make = BACKENDS[backend]
    flat = np.diff(make(NODES, EDGES, "powerlaw", 4, exponent=3.0)[0])
    steep = np.diff(make(NODES, EDGES, "powerlaw", 4, exponent=1.5)[0])
    for degrees, exponent in ((flat, 3.0), (steep, 1.5)):
        expected = graphs.expected_top_degree(NODES, EDGES, exponent)
        assert abs(degrees.max() - expected) < 5 * math.sqrt(expected) + 1
    assert steep.max() > 10 * flat.max()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_uniform_sources_and_destinations(backend: str) -> None:
    """Sources and destinations both cover the nodes about evenly: each node's count is within
    6 sigma of Poisson(E / N)."""
    indptr, indices = BACKENDS[backend](NODES, EDGES, "uniform", 8)
    mean = EDGES / NODES
    for counts in (np.diff(indptr), np.bincount(indices, minlength=NODES)):
        assert abs(counts.mean() - mean) < 1e-9
        assert np.abs(counts - mean).max() < 6 * math.sqrt(mean) + 1


def test_hubs_sit_at_random_rows() -> None:
    """The rank-to-node permutation scatters the hubs: the 8 largest rows are not rows 0..7."""
    indptr, _ = graphs.generate_numpy(NODES, EDGES, "powerlaw", 9)
    top = set(np.argsort(np.diff(indptr))[-8:].tolist())
    assert top != set(range(8))


def test_default_size_is_fast() -> None:
    """65536 nodes, 1M edges well under a second on the CPU (numpy); generous for a slow CI box."""
    for kind in graphs.KINDS:
        graphs.generate_numpy(1024, 16384, kind, 0)  # warm-up
        start = time.perf_counter()
        indptr, indices = graphs.generate_numpy(65536, 1 << 20, kind, 1)
        elapsed = time.perf_counter() - start
        _check_csr(indptr, indices, 65536, 1 << 20)
        assert elapsed < 3.0, f"{kind}: {elapsed:.2f} s"


def test_helpers() -> None:
    indptr = np.array([0, 2, 2, 5], dtype=np.int32)
    assert graphs.in_degrees(indptr).tolist() == [2, 0, 3]
    assert graphs.in_degrees(torch.from_numpy(indptr)).tolist() == [2, 0, 3]
    assert graphs.coo_rows(torch.from_numpy(indptr), 5).tolist() == [0, 0, 2, 2, 2]
    assert graphs.kind_of(None) == "uniform" and graphs.kind_of("powerlaw") == "powerlaw"


@pytest.mark.parametrize(("args", "match"), [
    ((0, 10, "uniform", 2.0), "nodes"),
    ((10, -1, "uniform", 2.0), "edges"),
    ((10, 10, "zipf", 2.0), "kind"),
    ((10, 10, "powerlaw", 1.0), "exponent"),
])
def test_bad_arguments(args: tuple, match: str) -> None:
    nodes, edges, kind, exponent = args
    with pytest.raises(ValueError, match=match):
        graphs.generate_numpy(nodes, edges, kind, 0, exponent)
    with pytest.raises(ValueError, match=match):
        graphs.generate_torch(nodes, edges, kind, 0, exponent, device="cpu")
    with pytest.raises(ValueError, match="tag"):
        graphs.kind_of("zipf")
