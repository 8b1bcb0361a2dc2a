"""Neighbour aggregation without a GPU: the width dispatch, a CPU model of the kernels' split of
long rows, the op's shape checks and counts, and the offline build and census of both
implementations.

Counts asserted on compiled code follow from the kernels' structure: a CUDA neighbor_sum lane
writes each of its SLOTS vectors once, by a store or by an atomic add (128-bit when VEC == 4),
and gathers UNROLL * SLOTS vectors a step; the zeroing kernel reads only indptr.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest

from harness.errors import EvidenceError, ToolMissing
from harness.launch import cuda as cuda_module
from harness.launch import sources
from harness.ops.neighbor_aggregation import graphs
from harness.ops.neighbor_aggregation.kernels import (
    LONG_ROW_CHUNK,
    LONG_ROW_PIECE,
    MAX_FEATURES,
    cuda_params,
    cuda_instances,
    needs_long_pass,
    triton_instances,
    instances_for,
)

SWEEP = [(65536, 1048576, f) for f in (64, 16, 256)]  # the config's widths but 128 (time)


# ----------------------------------------------------------------------------- dispatch


@pytest.mark.parametrize("features", [1, 3, 4, 7, 8, 16, 36, 48, 64, 100, 128, 130, 256, 512,
                                      1000, 1023, 1024])
def test_cuda_params_cover_the_row(features: int) -> None:
    vec, group, slots, unroll = cuda_params(features)
    nvec = features // vec
    assert vec == (4 if features % 4 == 0 else 1)
    assert group & (group - 1) == 0 and 1 <= group <= 32
    assert group * slots >= nvec > group * (slots - 1)  # covers the row, no idle slot
    assert slots == 1 or group == 32  # a second slot only once a warp is one group
    step = (32 // group) * unroll  # edges per step: must divide 32 (one batch of indices)
    assert step <= 32 and 32 % step == 0
    assert unroll * slots <= 8 or unroll == 1  # vectors in flight per lane


def test_cuda_params_match_the_documented_table() -> None:
    # harness/ops/neighbor_aggregation/kernels.py's docstring: F = 16: <4, 4, 1, 4>;
    # 64: <4, 16, 1, 8>; 128: <4, 32, 1, 8>; 256: <4, 32, 2, 4>; 7: <1, 8, 1, 8>.
    assert cuda_params(16) == (4, 4, 1, 4)
    assert cuda_params(64) == (4, 16, 1, 8)
    assert cuda_params(128) == (4, 32, 1, 8)
    assert cuda_params(256) == (4, 32, 2, 4)
    assert cuda_params(7) == (1, 8, 1, 8)
    summing, zeroing = cuda_instances(64)
    assert summing.kernel == "neighbor_sum<4, 16, 1, 8>" and summing.block == 128
    assert zeroing.kernel == "neighbor_zero_long_rows<4>" and zeroing.block == 128


@pytest.mark.parametrize("features", [0, MAX_FEATURES + 1])
def test_widths_out_of_range_are_refused(features: int) -> None:
    with pytest.raises(EvidenceError, match="outside the supported range"):
        cuda_params(features)
    with pytest.raises(EvidenceError, match="outside the supported range"):
        triton_instances(features)


def test_triton_variants() -> None:
    pytest.importorskip("triton", reason="triton is not installed")
    summing, zeroing = triton_instances(64)
    assert (summing.kernel, zeroing.kernel) == ("neighbor_sum", "neighbor_zero_long_rows")
    assert summing.constexprs() == {"F": 64, "BLOCK_F": 64, "BLOCK_E": 16,
                                    "CHUNK": LONG_ROW_CHUNK, "PIECE": LONG_ROW_PIECE}
    assert summing.num_warps == 2 and list(summing.signature())[4:6] == ["nodes", "edges"]
    assert zeroing.constexprs()["CHUNK"] == LONG_ROW_CHUNK
    for f in (1, 7, 100, 256, 1024):
        r, z = triton_instances(f)
        c = r.constexprs()
        assert c["BLOCK_F"] >= f > c["BLOCK_F"] // 2 and 2 <= c["BLOCK_E"] <= 16
        assert 1 <= r.num_warps <= 8 and z.constexprs()["BLOCK_R"] * c["BLOCK_F"] <= 4096


def test_variants_for_lists_both_passes_of_each_width() -> None:
    shapes = [(65536, 1048576, 64), (1000, 5000, 64), (65536, 1048576, 16)]
    plan = instances_for("cuda", shapes)
    assert [v.instance.kernel for v in plan] == [
        "neighbor_sum<4, 16, 1, 8>", "neighbor_zero_long_rows<4>", "neighbor_sum<4, 4, 1, 4>"]
    assert plan[0].shapes_text == "65536x1048576x64;1000x5000x64"
    assert plan[1].shapes_text == "65536x1048576x64;1000x5000x64;65536x1048576x16"
    with pytest.raises(EvidenceError, match="not ours"):
        instances_for("torch", shapes)
    with pytest.raises(EvidenceError, match="nodes, edges, features"):
        instances_for("cuda", [(4096, 768)])


def test_long_pass_only_past_the_chunk() -> None:
    assert not needs_long_pass(0) and not needs_long_pass(LONG_ROW_CHUNK)
    assert needs_long_pass(LONG_ROW_CHUNK + 1) and needs_long_pass(None)
    assert LONG_ROW_CHUNK % 32 == 0 and LONG_ROW_PIECE % 32 == 0
    assert LONG_ROW_PIECE <= LONG_ROW_CHUNK  # the covering argument needs it


def test_launchers_refuse_cpu_tensors() -> None:
    torch = pytest.importorskip("torch")
    from harness.ops.neighbor_aggregation.kernels import launch_cuda, launch_triton

    x, out = torch.randn(4, 8), torch.empty(4, 8)
    indptr = torch.tensor([0, 1, 2, 3, 4], dtype=torch.int32)
    indices = torch.tensor([1, 2, 3, 0], dtype=torch.int32)
    for launch in (launch_cuda, launch_triton):
        with pytest.raises(EvidenceError, match="CUDA device"):
            launch(x, indptr, indices, out)


# ----------------------------------------------------------------------------- the split, modelled


def _row_of_edge(indptr: np.ndarray, e: int) -> int:
    """The kernels' 32-ary search (na_row_of_edge), lane by lane."""
    lo, hi = 0, len(indptr) - 1
    while hi - lo > 1:
        step = (hi - lo + 31) // 32
        count = sum(1 for lane in range(32)
                    if lo + (lane + 1) * step < hi and indptr[lo + (lane + 1) * step] <= e)
        lo += count * step
        hi = min(hi, lo + step)
    return lo


@pytest.mark.parametrize(("chunk", "piece"), [(LONG_ROW_CHUNK, LONG_ROW_PIECE), (256, 256),
                                           (256, 32), (64, 64)])
@pytest.mark.parametrize(("nodes", "edges", "kind", "seed"), [
    (3000, 60000, "powerlaw", 1), (500, 30000, "powerlaw", 2), (2000, 9000, "uniform", 3),
    (1, 1000, "uniform", 4), (64, 4096, "powerlaw", 5)])
def test_rows_and_pieces_cover_every_edge_once(nodes: int, edges: int, kind: str, seed: int,
                                               chunk: int, piece: int) -> None:
    """The edge ranges neighbor_sum's row warps and piece warps sum (with the kernels' formulas)
    count every edge of every row exactly once, the search finds the true row, and exactly the
    rows longer than `chunk` are written by atomic adds (the ones the zeroing kernel zeroes)."""
    indptr, _ = graphs.generate_numpy(nodes, edges, kind, seed)
    ip = indptr.astype(np.int64)
    hits = np.zeros(edges, dtype=np.int64)
    owner = np.full(edges, -1, dtype=np.int64)
    atomic_rows = set()
    for row in range(nodes):  # row warps
        begin, end = ip[row], min(ip[row + 1], ip[row] + chunk)
        hits[begin:end] += 1
        owner[begin:end] = row
        if ip[row + 1] - ip[row] > chunk:
            atomic_rows.add(row)
    for c in range(-(-edges // piece)):  # piece warps
        first = c * piece
        row = _row_of_edge(ip, first)
        assert ip[row] <= first < ip[row + 1]
        begin, end = max(first, ip[row] + chunk), min(ip[row + 1], first + piece)
        if begin < end:
            hits[begin:end] += 1
            owner[begin:end] = row
            assert row in atomic_rows
    assert (hits == 1).all()
    assert np.array_equal(owner, np.repeat(np.arange(nodes), np.diff(ip)))
    assert atomic_rows == set(np.flatnonzero(np.diff(ip) > chunk).tolist())


# ----------------------------------------------------------------------------- the op module


def test_op_shapes_and_counts() -> None:
    from harness.ops import get

    op = get("neighbor_aggregation")
    for shape in ("65536x1048576x64", "65536x1048576x64-powerlaw", "65536x1048576x16-uniform",
                  "7x3x5"):
        op.validate_shape(shape)
    for bad in ("4096x768", "64x64x64-zipf", "64x64x2048", "1x2x3x4"):
        with pytest.raises(ValueError):
            op.validate_shape(bad)
    n, e, f = 65536, 1048576, 64
    assert op.bytes_moved("65536x1048576x64-powerlaw") == 4 * n * f + 4 * e + 4 * (n + 1) + 4 * n * f
    assert op.flops("65536x1048576x64") == e * f
    assert set(op.implementations) == {"cuda", "triton", "torch"}


def test_torch_method_is_named_and_switchable() -> None:
    from harness.ops import neighbor_aggregation as na

    assert na.TORCH_METHOD in na.TORCH_METHODS
    assert set(na.TORCH_METHODS) == {"index_add", "sparse_mm"}
    assert "TORCH_METHOD" in (na.bind_torch.__doc__ or "") and na.TORCH_METHOD == "sparse_mm"


def test_torch_methods_and_reference_on_the_cpu() -> None:
    """The two library calls and the float64 reference agree with a plain loop over the edges
    (CPU tensors: the functions only use torch ops)."""
    torch = pytest.importorskip("torch")
    from harness.ops import neighbor_aggregation as na

    nodes, edges, features = 97, 3001, 5
    indptr, indices = graphs.generate_torch(nodes, edges, "powerlaw", 6, device="cpu")
    x = torch.randn(nodes, features, generator=torch.Generator().manual_seed(6))
    dst, src = graphs.coo_rows(indptr, edges), indices.long()
    adjacency = na.adjacency_csr(dst, src, nodes)
    inputs = {"x": x, "dst": dst, "src": src, "adjacency": adjacency}
    loop = np.zeros((nodes, features))
    xs, ip, ix = x.double().numpy(), indptr.numpy(), indices.numpy()
    for i in range(nodes):
        for e in range(ip[i], ip[i + 1]):
            loop[i] += xs[ix[e]]
    ref = na.reference(inputs, {}).numpy()
    assert np.allclose(ref, loop, rtol=1e-12, atol=1e-9)
    for method in na.TORCH_METHODS.values():
        got = method(inputs, torch.full_like(x, float("nan")), {})().double().numpy()
        assert np.allclose(got, loop, rtol=1e-5, atol=1e-3)


# ----------------------------------------------------------------------------- offline build


def _census_or_skip(impl: str, shapes: list, outdir: Path) -> list[dict]:
    from harness.build.build import build_census

    try:
        return build_census("neighbor_aggregation", impl, shapes, arch="sm_90", outdir=outdir)
    except ToolMissing as exc:
        pytest.skip(f"{impl} census tools missing: {exc}")


def test_build_census_cuda(tmp_path: Path) -> None:
    from harness.build.build import CENSUS_COLUMNS

    rows = _census_or_skip("cuda", [*SWEEP, (1000, 5000, 7)], tmp_path)
    assert [tuple(r) for r in rows] == [CENSUS_COLUMNS] * 6  # 4 sum kernels, 2 zeroing kernels
    assert [r["kernel"] for r in rows] == [
        "neighbor_sum<4, 16, 1, 8>", "neighbor_zero_long_rows<4>", "neighbor_sum<4, 4, 1, 4>",
        "neighbor_sum<4, 32, 2, 4>", "neighbor_sum<1, 8, 1, 8>", "neighbor_zero_long_rows<1>"]
    assert rows[0]["shapes"] == "65536x1048576x64"
    digest = hashlib.sha256((sources.kernels_dir() / "neighbor_aggregation/neighbor_aggregation.cu").read_bytes()).hexdigest()
    for row in rows:
        assert row["registers"] > 0 and row["block"] == 128
        assert (row["spill_stores"], row["spill_loads"], row["stack_bytes"], row["sass_local"]) == (0, 0, 0, 0)
        assert row["source_sha256"] == digest and "-arch=sm_90" in row["options"]
        stem = f"cuda_{re.sub(r'[^A-Za-z0-9]+', '_', row['kernel']).strip('_')}"
        ptx = (tmp_path / f"{stem}.ptx").read_text()
        if row["kernel"].startswith("neighbor_zero_long_rows"):
            vec = int(row["kernel"][-2])
            assert row["ld_global_128"] == 0 and row["shuffles"] == 0  # reads indptr only
            assert row[f"st_global_{32 * vec}"] > 0 and "atom." not in ptx
            continue
        vec, group, slots, unroll = (int(d) for d in re.findall(r"\d+", row["kernel"]))
        assert row["shuffles"] > 0  # index broadcast (and group reduction where groups > 1)
        wide = "ld_global_128" if vec == 4 else "ld_global_32"
        assert row[wide] >= unroll * slots and row["ld_global_nc"] >= unroll * slots
        if vec == 4:
            assert row["sass_ldg_128"] >= unroll * slots
        else:
            assert row["ld_global_128"] == 0 and row["sass_ldg_128"] == 0
        # each slot written once: a store, or an atomic add (a 128-bit vector reduction for VEC 4)
        assert row[f"st_global_{32 * vec}"] == slots and row[f"sass_stg_{32 * vec}"] == slots
        atomic = r"atom\.global\.add\.v4\.f32" if vec == 4 else r"atom\.global\.add\.f32"
        assert len(re.findall(atomic, ptx)) == slots
        sass = (tmp_path / f"{stem}.sass").read_text()
        assert ("REDG.E.ADD.F32x4" in sass) == (vec == 4)


def test_build_census_triton(tmp_path: Path) -> None:
    pytest.importorskip("triton", reason="triton is not installed")
    from harness.build.build import CENSUS_COLUMNS

    rows = _census_or_skip("triton", [(65536, 1048576, 64), (1000, 5000, 7)], tmp_path)
    assert [tuple(r) for r in rows] == [CENSUS_COLUMNS] * 4
    assert [r["kernel"] for r in rows] == ["neighbor_sum", "neighbor_zero_long_rows"] * 2
    for row in rows:
        assert row["registers"] > 0 and row["spill_stores"] == 0 and row["sass_local"] == 0
        assert row["arch"].startswith("sm_90") and row["compiler"].startswith("triton ")
        stores = row["st_global_32"] + row["st_global_64"] + row["st_global_128"]
        assert stores > 0
        if row["kernel"] == "neighbor_sum":  # x rows gathered 128 bits at a time when F % 4 == 0
            vectorized = row["shapes"] == "65536x1048576x64"
            assert (row["ld_global_128"] > 0) == vectorized
            assert (row["sass_ldg_128"] > 0) == vectorized
        else:
            assert row["ld_global_128"] == 0  # reads indptr only
    for ptx in tmp_path.glob("triton_neighbor_sum_F_*.ptx"):
        assert re.search(r"(red|atom)\.global\.[\w.]*add\.f32", ptx.read_text())
