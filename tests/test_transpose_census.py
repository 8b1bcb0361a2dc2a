"""Transpose: the shape dispatch, the operation's shape rules and sizes, and the offline build
census of both implementations (no GPU needed).

Counts asserted on the census are derived from the kernels' structure: a block of BLOCK threads
moves a TILE x TILE tile, so each thread loads and stores TILE * TILE / (VEC * BLOCK) vectors, with
one barrier between, through a (TILE + 1)-float-pitch shared tile; a Triton program moves
BM * BN / (32 * num_warps) floats per thread.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from harness.errors import EvidenceError, ToolMissing
from harness.launch import cuda as cuda_module
from harness.launch import sources
from harness.ops.transpose.kernels import (
    MAX_DIM,
    SCALAR,
    VEC4,
    CudaInstance,
    cuda_instance,
    triton_instance,
    instances_for,
)

CONFIG_SHAPES = [(4096, 4096), (8192, 8192), (1024, 16384)]


# ----------------------------------------------------------------------------- dispatch


@pytest.mark.parametrize(("r", "c", "expected"), [
    (4096, 4096, VEC4), (1024, 16384, VEC4), (4, 8, VEC4), (100, 36, VEC4),
    (100, 37, SCALAR), (37, 100, SCALAR), (1, 1, SCALAR), (6, 4, SCALAR),
])
def test_cuda_dispatch(r: int, c: int, expected: CudaInstance) -> None:
    assert cuda_instance(r, c) == expected


def test_cuda_variants() -> None:
    assert VEC4.kernel == "transpose_vec4<64, 256>" and VEC4.specialization == "vec4 tile=64 block=256"
    assert SCALAR.kernel == "transpose_scalar<32, 256>"
    assert VEC4.grid(4096, 4096) == (64 * 64, 64)
    assert VEC4.grid(100, 36) == (2 * 1, 1)
    assert SCALAR.grid(37, 100) == (2 * 4, 4)
    for v in (VEC4, SCALAR):  # each thread moves a whole number of vectors of the tile
        assert (v.tile * v.tile) % (v.vec * v.block) == 0


@pytest.mark.parametrize(("r", "c", "bm", "bn", "warps"), [
    (4096, 4096, 64, 64, 4), (1024, 16384, 64, 64, 4), (100, 37, 64, 64, 4),
    (8, 12, 16, 16, 1), (1, 1000, 16, 64, 1), (40, 20, 64, 32, 2),
])
def test_triton_dispatch(r: int, c: int, bm: int, bn: int, warps: int) -> None:
    pytest.importorskip("triton", reason="triton is not installed")
    from kernels.transpose import transpose_triton

    v = triton_instance(r, c)
    assert v.constexprs() == {"R": r, "C": c, "BM": bm, "BN": bn} and v.num_warps == warps
    assert v.jit_function() is transpose_triton.transpose_tile and v.num_stages is None
    assert v.signature() == {"X": "*fp32", "Y": "*fp32", "R": "constexpr", "C": "constexpr",
                             "BM": "constexpr", "BN": "constexpr"}
    assert v.aligned_args() == (0, 1)


def test_dispatch_refuses_bad_shapes() -> None:
    for r, c in ((0, 4), (4, 0), (MAX_DIM + 1, 4)):
        with pytest.raises(EvidenceError, match="outside"):
            cuda_instance(r, c)
    with pytest.raises(EvidenceError, match="tiles"):
        cuda_instance(2**20, 2**20)
    with pytest.raises(EvidenceError, match=r"\[R, C\]"):
        instances_for("cuda", [(4, 4, 4)])


def test_variants_for_groups_config_shapes() -> None:
    pytest.importorskip("triton", reason="triton is not installed")
    shapes = [*CONFIG_SHAPES, (37, 100)]
    cuda = instances_for("cuda", shapes)
    assert [v.instance for v in cuda] == [VEC4, SCALAR]
    assert cuda[0].shapes_text == "4096x4096;8192x8192;1024x16384"
    triton = instances_for("triton", shapes)
    assert [v.instance.specialization for v in triton] == [
        "R=4096 C=4096 BM=64 BN=64 num_warps=4", "R=8192 C=8192 BM=64 BN=64 num_warps=4",
        "R=1024 C=16384 BM=64 BN=64 num_warps=4", "R=37 C=100 BM=64 BN=64 num_warps=4"]
    with pytest.raises(EvidenceError, match="not ours"):
        instances_for("torch", shapes)


def test_launchers_refuse_cpu_tensors() -> None:
    torch = pytest.importorskip("torch")
    from harness.ops.transpose.kernels import launch_cuda, launch_triton

    x, out = torch.randn(4, 8), torch.empty(8, 4)
    for launch in (launch_cuda, launch_triton):
        with pytest.raises(EvidenceError, match="CUDA device"):
            launch(x, out)


# ----------------------------------------------------------------------------- operation


def test_operation_shapes_and_sizes() -> None:
    from harness.ops import get

    op = get("transpose")
    for shape in ("4096x4096", "8192x8192", "1024x16384", "37x100"):
        op.validate_shape(shape)
    for bad in ("4096", "2x3x4", "64x64-powerlaw", f"2x{MAX_DIM + 1}"):
        with pytest.raises(ValueError):
            op.validate_shape(bad)
    assert op.bytes_moved("1024x16384") == 1024 * 16384 * 4 * 2
    assert op.flops("4096x4096") == 0
    assert op.sources == {"cuda": ["transpose/transpose.cu"], "triton": ["transpose/transpose_triton.py"], "torch": []}
    assert op.kernels == "harness.ops.transpose.kernels"


def test_reference_is_the_exact_transpose() -> None:
    """The float64 reference against element-by-element indexing, on the CPU."""
    torch = pytest.importorskip("torch")
    from harness.ops import get

    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    ref = get("transpose").reference({"x": x}, {})
    assert ref.dtype == torch.float64 and tuple(ref.shape) == (3, 5)
    rows = x.tolist()
    assert [[ref[j, i].item() for i in range(5)] for j in range(3)] == [
        [rows[i][j] for i in range(5)] for j in range(3)]


# ----------------------------------------------------------------------------- offline build


def _census_or_skip(impl: str, shapes: list[tuple[int, int]], outdir: Path) -> list[dict]:
    from harness.build.build import build_census

    try:
        return build_census("transpose", impl, shapes, arch="sm_90", outdir=outdir)
    except ToolMissing as exc:
        pytest.skip(f"{impl} census tools missing: {exc}")


def test_build_census_cuda(tmp_path: Path) -> None:
    from harness.build.build import CENSUS_COLUMNS

    rows = _census_or_skip("cuda", [*CONFIG_SHAPES, (37, 100)], tmp_path)
    assert [tuple(r) for r in rows] == [CENSUS_COLUMNS] * 2
    sha = hashlib.sha256((sources.kernels_dir() / "transpose/transpose.cu").read_bytes()).hexdigest()
    for row, v in zip(rows, (VEC4, SCALAR), strict=True):
        per_thread = v.tile * v.tile // (v.vec * v.block)
        wide = 128 if v.vec == 4 else 32
        narrow = 32 if v.vec == 4 else 128
        assert row["kernel"] == v.kernel and row["block"] == v.block
        assert (row[f"ld_global_{wide}"], row[f"ld_global_{narrow}"]) == (per_thread, 0)
        assert (row[f"st_global_{wide}"], row[f"st_global_{narrow}"]) == (per_thread, 0)
        assert row["ld_global_nc"] == per_thread
        assert (row[f"sass_ldg_{wide}"], row[f"sass_stg_{wide}"]) == (per_thread, per_thread)
        assert row["barriers"] == 1 and row["sass_bar"] == 1
        assert row["static_smem"] == v.tile * (v.tile + 1) * 4 and row["dynamic_smem"] == 0
        assert row["registers"] > 0
        assert (row["spill_stores"], row["spill_loads"], row["stack_bytes"], row["sass_local"]) == (0, 0, 0, 0)
        assert row["source_sha256"] == sha
    assert rows[0]["shapes"] == "4096x4096;8192x8192;1024x16384"
    assert "cuda_transpose_vec4_64_256.sass" in {p.name for p in tmp_path.iterdir()}


def test_build_census_triton(tmp_path: Path) -> None:
    pytest.importorskip("triton", reason="triton is not installed")
    from harness.build.build import CENSUS_COLUMNS

    rows = _census_or_skip("triton", [(4096, 4096), (37, 100)], tmp_path)
    assert [tuple(r) for r in rows] == [CENSUS_COLUMNS] * 2
    aligned, odd = rows
    per_thread = 64 * 64 // (32 * 4)
    assert aligned["kernel"] == "transpose_tile" and aligned["block"] == 128
    assert (aligned["ld_global_128"], aligned["st_global_128"]) == (per_thread // 4, per_thread // 4)
    assert (aligned["ld_global_32"], aligned["st_global_32"]) == (0, 0)
    # 37 x 100: x's rows (100 floats) stay 16-byte aligned, y's rows (37 floats) do not.
    assert odd["ld_global_128"] == per_thread // 4 and odd["st_global_128"] == 0
    assert odd["st_global_32"] == per_thread
    for row in rows:
        assert row["arch"].startswith("sm_90") and row["compiler"].startswith("triton ")
        assert row["registers"] > 0 and row["spill_stores"] == 0 and row["sass_local"] == 0
        assert row["dynamic_smem"] > 0  # tl.trans exchanges the tile through shared memory
    assert aligned["dynamic_smem"] >= 64 * 64 * 4  # the whole 64 x 64 tile of floats


def test_block_switch() -> None:
    """A variant's TP_BLOCK sets the vec4 path's threads per tile (128 or 256); the scalar path and
    other values are left alone or refused."""
    with cuda_module.variant_options(("-DTP_BLOCK=128",)):
        v = cuda_instance(4096, 4096)
        assert v.kernel == "transpose_vec4<64, 128>" and v.block == 128 and v.grid(4096, 4096) == VEC4.grid(4096, 4096)
        assert cuda_instance(100, 37) == SCALAR
    with cuda_module.variant_options(("-DTP_BLOCK=256",)):
        assert cuda_instance(4096, 4096) == VEC4
    with cuda_module.variant_options(("-DTP_BLOCK=512",)), pytest.raises(EvidenceError, match="TP_BLOCK"):
        cuda_instance(4096, 4096)
