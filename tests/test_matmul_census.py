"""Matrix product without a GPU: the shape dispatch, the operation's bookkeeping (shapes, bytes,
flops, float64 reference) and the offline build census of both kernels.

Expected counts are derived from the kernels' structure, not copied from a compiler run: the CUDA
kernel's thread copies 8 elements of A (4-byte cp.async) and 2 float4 of B (or 8 floats) per K
tile at two call sites (prologue and loop), reads one float4 of A and one of B per k of a 32-k
tile, does 4 x 4 FFMA per k, and stores 4 rows of 4 outputs; a Triton program does
BLOCK_M * BLOCK_N * BLOCK_K / threads FMAs per K step.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from pathlib import Path

import pytest

from harness.build import census, toolchain
from harness.errors import EvidenceError, ToolMissing
from harness.launch import cuda as cuda_module
from harness.launch import sources
from harness.ops.matmul.kernels import (
    CUDA_THREADS,
    CUDA_TILE,
    cuda_grid,
    cuda_instance,
    triton_instance,
    instances_for,
)

SWEEP = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (4096, 4096, 1024)]


# ----------------------------------------------------------------------------- dispatch


SMALL = "matmul_f32_ring<64, 64, 32, 4, 3>"
BIG = "matmul_f32_tiled<128, 128, 16, 8>"


def test_cuda_dispatch_follows_n_and_k_modulo_4() -> None:
    assert cuda_instance(1024, 1024, 1024).kernel == SMALL
    assert cuda_instance(1001, 1024, 1000).kernel == SMALL  # an M tail: same kernel
    assert cuda_instance(1001, 1024, 999).kernel == "matmul_f32<4>"  # K % 4 != 0
    assert cuda_instance(1024, 1001, 1024).kernel == "matmul_f32<1>"
    assert cuda_instance(7, 5, 3).kernel == "matmul_f32<1>"
    assert cuda_instance(1024, 1024, 1024).block == 128 and cuda_instance(1024, 1024, 1024).tile_mn == (64, 64)
    for shape in [(1001, 1024, 999), (7, 5, 3)]:
        v = cuda_instance(*shape)
        assert v.block == CUDA_THREADS == 256 and v.dynamic_smem == 0 and v.source == "matmul/matmul.cu"


def test_cuda_grid_is_one_block_per_64x64_tile() -> None:
    assert cuda_grid(1024, 1024) == (1024 // 64) ** 2
    assert cuda_grid(65, 1) == 2
    assert cuda_grid(1, 1) == 1
    assert cuda_grid(4096, 4096) == 64 * 64


@pytest.mark.parametrize("shape", [*SWEEP, (1000, 1001, 999), (7, 5, 3)])
def test_triton_dispatch(shape: tuple[int, int, int]) -> None:
    from kernels.matmul.matmul_triton import config_for

    v = triton_instance(*shape)
    bm, bn, bk, group, warps, stages = config_for(*shape)
    assert (v.block_m, v.block_n, v.block_k, v.group_m, v.num_warps, v.num_stages) == (
        bm, bn, bk, group, warps, stages)
    assert (v.m, v.n, v.k) == shape and v.block == 32 * warps
    assert v.programs == math.ceil(shape[0] / bm) * math.ceil(shape[1] / bn)
    assert v.constexprs() == {"M": shape[0], "N": shape[1], "K": shape[2], "BLOCK_M": bm,
                              "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group}
    assert set(v.signature()) == {"A", "B", "C", *v.constexprs()}
    assert v.compile_options() == {"num_warps": warps, "num_stages": stages}
    assert bk % 16 == 0 and bm % 16 == 0 and bn % 16 == 0  # tl.dot needs blocks >= 16


def test_variants_for_groups_shapes() -> None:
    shapes = [*SWEEP, (1000, 1001, 999), (1024, 1024, 1024)]
    cuda = instances_for("cuda", shapes)
    assert [v.instance.kernel for v in cuda] == [SMALL, BIG, "matmul_f32<1>"]
    assert cuda[0].shapes_text == "1024x1024x1024"
    assert cuda[1].shapes_text == "2048x2048x2048;4096x4096x4096;4096x4096x1024"
    assert cuda[2].shapes_text == "1000x1001x999"
    triton = instances_for("triton", shapes)  # M, N, K are constexprs: one variant per shape
    assert [v.shapes for v in triton] == [(s,) for s in [*SWEEP, (1000, 1001, 999)]]
    with pytest.raises(EvidenceError, match="not ours"):
        instances_for("torch", shapes)
    with pytest.raises(EvidenceError, match="MxNxK"):
        instances_for("cuda", [(1024, 1024)])
    with pytest.raises(EvidenceError, match="outside the supported range"):
        instances_for("cuda", [(0, 8, 8)])


# ----------------------------------------------------------------------------- the operation


def test_operation_shapes_bytes_flops() -> None:
    from harness.ops import get

    op = get("matmul")
    for shape in ["1024x1024x1024", "4096x4096x1024", "7x5x3"]:
        op.validate_shape(shape)
    for bad in ["1024x1024", "64x64x64x64", "64x64x64-powerlaw"]:
        with pytest.raises(ValueError):
            op.validate_shape(bad)
    m, n, k = 3, 5, 7
    # one multiply and one add per term of every output: count the terms
    assert op.flops(f"{m}x{n}x{k}") == 2 * sum(1 for _ in range(m) for _ in range(n) for _ in range(k))
    floats = m * k + k * n + m * n  # A, B and C, each element once
    assert op.bytes_moved(f"{m}x{n}x{k}") == 4 * floats
    assert op.kernels == "harness.ops.matmul.kernels"
    assert set(op.implementations) == {"cuda", "triton", "torch"}
    assert op.sources == {"cuda": ["matmul/matmul.cu"], "triton": ["matmul/matmul_triton.py"], "torch": []}


def test_reference_against_plain_sums() -> None:
    """The float64 reference against exact sums (math.fsum) of the products, on the CPU."""
    torch = pytest.importorskip("torch")
    from harness.ops import get

    gen = torch.Generator().manual_seed(3)
    a = torch.randn(5, 7, generator=gen)
    b = torch.randn(7, 3, generator=gen)
    ref = get("matmul").reference({"a": a, "b": b}, {})
    assert ref.dtype == torch.float64 and tuple(ref.shape) == (5, 3)
    for i in range(5):
        for j in range(3):
            exact = math.fsum(float(a[i, t]) * float(b[t, j]) for t in range(7))
            assert abs(float(ref[i, j]) - exact) <= 1e-12 * (1 + abs(exact))


def test_launchers_refuse_cpu_tensors() -> None:
    torch = pytest.importorskip("torch")
    from harness.ops.matmul.kernels import launch_cuda, launch_triton

    a, b, out = torch.randn(4, 8), torch.randn(8, 4), torch.empty(4, 4)
    for launch in (launch_cuda, launch_triton):
        with pytest.raises(EvidenceError, match="CUDA device"):
            launch(a, b, out)


# ----------------------------------------------------------------------------- offline build


def _census_or_skip(impl: str, shapes: list[tuple[int, int, int]], outdir: Path) -> list[dict]:
    from harness.build.build import build_census

    try:
        return build_census("matmul", impl, shapes, arch="sm_90", outdir=outdir)
    except ToolMissing as exc:
        pytest.skip(f"{impl} census tools missing: {exc}")


def _sass_ops(path: Path, symbol: str) -> Counter[str]:
    """The SASS opcodes of one kernel of the module's file (matmul.cu always holds matmul_f32_128
    beside the template instances that were asked for)."""
    return Counter(census.sass_opcodes(path.read_text())[symbol])


def _ptx_ops(path: Path, symbol: str) -> Counter[str]:
    text = census._strip_ptx_comments(path.read_text())  # inline asm sits between comments
    (entry,) = [body for name, is_entry, body in census._ptx_functions(text) if is_entry and name == symbol]
    return Counter(census.ptx_opcodes(entry))


def test_build_census_cuda(tmp_path: Path) -> None:
    from harness.build.build import CENSUS_COLUMNS

    rows = _census_or_skip("cuda", [(1024, 1024, 1023), (1024, 768, 511), (1024, 1024, 1024), (2048, 2048, 2048),
                                    (1000, 1001, 999)], tmp_path)
    assert [tuple(r) for r in rows] == [CENSUS_COLUMNS] * 4
    vec4, small, big, vec1 = rows
    assert vec4["kernel"] == "matmul_f32<4>" and vec4["shapes"] == "1024x1024x1023;1024x768x511"  # K % 4 != 0
    assert small["kernel"] == SMALL and small["shapes"] == "1024x1024x1024"  # the dispatch
    assert big["kernel"] == BIG and big["shapes"] == "2048x2048x2048"
    assert vec1["kernel"] == "matmul_f32<1>" and vec1["shapes"] == "1000x1001x999"
    rows = [vec4, vec1]
    bm, bn, bk = CUDA_TILE
    smem = 4 * (2 * bk * (bm + 4) + 2 * bk * bn)  # two stages of A^T (rows padded by 4) and B
    for row in rows:
        assert row["registers"] > 0 and row["block"] == 256
        assert (row["spill_stores"], row["spill_loads"]) == (0, 0)
        assert row["stack_bytes"] == row["sass_local"] == 0
        assert row["static_smem"] == smem and row["dynamic_smem"] == 0
        # every global read is a cp.async (not ld.global); two __syncthreads per K tile
        assert (row["ld_global_32"], row["ld_global_64"], row["ld_global_128"]) == (0, 0, 0)
        assert row["sass_ldg_32"] == row["sass_ldg_128"] == 0
        assert row["barriers"] == 2 and row["sass_bar"] == 2
        assert "-ftz=true" in row["options"] and "-arch=sm_90" in row["options"]
        assert row["source_sha256"] == hashlib.sha256(
            (sources.kernels_dir() / "matmul/matmul.cu").read_bytes()).hexdigest()
    assert (vec4["st_global_128"], vec4["st_global_32"], vec4["sass_stg_128"]) == (4, 0, 4)
    assert (vec1["st_global_128"], vec1["st_global_32"], vec1["sass_stg_32"]) == (0, 16, 16)

    for kernel, row, b_copies in (("matmul_f32_4", vec4, {"LDGSTS.E.BYPASS.128": 2 * 2}),
                                  ("matmul_f32_1", vec1, {"LDGSTS.E": 2 * 8})):
        sass = _sass_ops(tmp_path / f"cuda_{kernel}.sass", row["symbol"])
        a_copies = 2 * 8  # A: 8 4-byte copies per thread per tile, at 2 call sites
        expected = Counter({"LDGSTS.E": a_copies}) + Counter(b_copies)
        assert {op: n for op, n in sass.items() if op.startswith("LDGSTS")} == dict(expected)
        assert sass["LDS.128"] == 2 * bk  # one float4 of A^T and one of B per k
        assert sum(n for op, n in sass.items() if op.startswith("FFMA")) == 16 * bk
        assert not any(op.startswith(("HMMA", "HGMMA")) for op in sass)
        ptx = _ptx_ops(tmp_path / f"cuda_{kernel}.ptx", row["symbol"])
        assert ptx["cp.async.ca.shared.global"] == a_copies + (b_copies.get("LDGSTS.E", 0))
        assert ptx["cp.async.cg.shared.global"] == b_copies.get("LDGSTS.E.BYPASS.128", 0)
        assert ptx["cp.async.wait_group"] == 1 and ptx["cp.async.commit_group"] == 2


def test_build_census_triton(tmp_path: Path) -> None:
    pytest.importorskip("triton", reason="triton is not installed")
    from harness.build.build import CENSUS_COLUMNS

    shapes = [(1024, 1024, 1024), (1000, 1001, 999)]
    rows = _census_or_skip("triton", shapes, tmp_path)
    assert [tuple(r) for r in rows] == [CENSUS_COLUMNS] * 2
    for row, shape in zip(rows, shapes, strict=True):
        v = triton_instance(*shape)
        assert row["kernel"] == "matmul_fwd" and row["block"] == v.block
        assert row["specialization"] == v.specialization
        assert row["arch"].startswith("sm_90") and row["compiler"].startswith("triton ")
        assert row["registers"] > 0
        assert (row["spill_stores"], row["spill_loads"], row["sass_local"]) == (0, 0, 0)
        (sass_path,) = tmp_path.glob(f"triton_matmul_fwd_M_{v.m}_N_{v.n}_K_{v.k}_*.sass")
        sass = _sass_ops(sass_path, row["symbol"])
        ptx = sass_path.with_suffix(".ptx").read_text()
        # IEEE FP32: FMAs, no tensor-core instruction (TF32 would be mma/wgmma)
        assert "mma" not in ptx and "tf32" not in ptx
        assert not any(op.startswith(("HMMA", "HGMMA")) for op in sass)
        fma_per_step = v.block_m * v.block_n * v.block_k // v.block
        assert sass["FFMA"] == ptx.count("fma.rn.f32") == fma_per_step
        assert any(op.startswith("LDGSTS") for op in sass)  # pipelined through cp.async
    aligned, odd = rows
    assert aligned["st_global_128"] > 0 and aligned["st_global_32"] == 0
    assert odd["st_global_128"] == 0 and odd["st_global_32"] > 0  # N = 1001: no 16-byte rows


def test_dispatch_by_shape_and_the_tile_variants() -> None:
    """The tiled kernel serves where N % 4 == K % 4 == 0: 128 x 128 x 16 tiles where C has at least
    132 tiles of 128 x 128, 64 x 64 x 32 below; the 64 x 64 cp.async kernel elsewhere. MM_TILE=64 /
    128 put the cp.async kernel / the tiled kernel's large instance at every shape, MM_BM, MM_BN,
    MM_BK and MM_ROWS name the tiled instance, MM_STAGED128 puts matmul_f32_128 where the large
    instance would serve; anything else is refused."""
    from harness import config
    from harness.build.build import build_census
    from harness.errors import EvidenceError
    from harness.launch import cuda as cuda_module
    from harness.ops import variants
    from harness.ops.matmul.kernels import (
        TILE128_MIN_TILES,
        cuda_grid,
        cuda_instance,
        tiled_instance,
    )

    assert cuda_instance(1024, 1024, 1024).kernel == SMALL  # 64 tiles of 128 x 128
    assert cuda_instance(2048, 2048, 2048).kernel == BIG  # 256
    assert cuda_instance(4096, 4096, 1024).kernel == BIG
    assert cuda_instance(4096, 4094, 4096).kernel == "matmul_f32<1>"  # N % 4 != 0
    assert cuda_instance(2048, 2048, 2048).block == 256 and cuda_instance(2048, 2048, 2048).tile_mn == (128, 128)
    # The boundary: 132 tiles (12 x 11) serve with 128, 120 (12 x 10) not.
    assert cuda_grid(12 * 128, 11 * 128, 128) == TILE128_MIN_TILES == 132
    assert cuda_instance(12 * 128, 11 * 128, 512).kernel == BIG
    assert cuda_instance(12 * 128, 10 * 128, 512).kernel == SMALL
    with cuda_module.variant_options(("-DMM_TILE=128",)):
        assert cuda_instance(1024, 1024, 1024).kernel == BIG
        assert cuda_instance(1024, 1022, 1024).kernel == "matmul_f32<1>"  # N % 4 != 0
        assert cuda_instance(1024, 1024, 1022).kernel == "matmul_f32<4>"  # K % 4 != 0
    with cuda_module.variant_options(("-DMM_TILE=128", "-DMM_BN=64")):
        v = cuda_instance(1024, 1024, 1024)
        assert v.kernel == "matmul_f32_tiled<128, 64, 16, 8>" and v.block == 128 and v.tile_mn == (128, 64)
        assert cuda_grid(1024, 1024, v.tile_mn) == 8 * 16
        assert v.specialization == "tile=128x64x16 rows=8 vec_b=4 block=128"
    with cuda_module.variant_options(("-DMM_BK=8",)):
        assert cuda_instance(4096, 4096, 4096).kernel == "matmul_f32_tiled<128, 128, 8, 8>"
        assert cuda_instance(1024, 1024, 1024).kernel == "matmul_f32_ring<64, 64, 8, 4, 3>"  # the small one too
    with cuda_module.variant_options(("-DMM_STAGED128=1",)):
        v = cuda_instance(4096, 4096, 4096)
        assert v.kernel == "matmul_f32_128" and v.block == 256 and "staged" in v.specialization
        assert cuda_instance(1024, 1024, 1024).kernel == SMALL  # only where the large instance serves
    with cuda_module.variant_options(("-DMM_TILE=64",)):
        assert cuda_instance(4096, 4096, 4096).kernel == "matmul_f32<4>"
        assert cuda_instance(1024, 1024, 1024).kernel == "matmul_f32<4>"
    for bad in ("-DMM_TILE=96", "-DMM_BN=96", "-DMM_BK=64", "-DMM_STAGED128=2", "-DMM_ROWS=2"):
        with cuda_module.variant_options((bad,)), pytest.raises(EvidenceError, match=bad[2:].split("=")[0]):
            cuda_instance(4096, 4096, 4096)
    # An instance the kernel's static_asserts refuse is refused by the host first.
    assert tiled_instance(128, 128, 8, 4) is not None  # 512 threads, 256 float4 of A
    assert tiled_instance(64, 64, 32, 4) is None and tiled_instance(128, 128, 16, 8) is None
    with cuda_module.variant_options(("-DMM_ROWS=4", "-DMM_BK=8")), \
            pytest.raises(EvidenceError, match="does not take"):
        cuda_instance(4096, 4096, 4096)
    assert cuda_grid(1000, 1000, 128) == 8 * 8 and cuda_grid(1000, 1000) == 16 * 16
    if toolchain.load_nvrtc() is None:
        pytest.skip("NVRTC is not available here")
    cfg = config.load(config.ROOT / "config.yaml")
    options = variants.compiler_options(cfg["operations"]["matmul"], "cuda.tile128")
    rows = build_census("matmul", "cuda", [(1024, 1024, 1024), (1024, 1022, 1024)], variant=("cuda.tile128", options))
    by = {r["kernel"]: r for r in rows}
    assert set(by) == {BIG, "matmul_f32<1>"}
    row = by[BIG]
    assert row["impl"] == "cuda.tile128" and "-DMM_TILE=128" in row["options"]
    assert row["registers"] <= 128  # __launch_bounds__(256, 2)
    # A: two float4 per thread per K tile (ld.global.v4), B: two 16-byte cp.async; both at the
    # prologue's and the loop's call sites. Shared: two stages of A^T (rows padded by 4) and of B.
    assert row["ld_global_128"] == 4 and row["st_global_128"] == 16  # 8 rows x 2 float4 of C
    assert row["static_smem"] == 4 * (2 * 16 * (128 + 4) + 2 * 16 * 128)


@pytest.mark.parametrize(("variant", "kernel", "smem"), [
    ("staged128", "matmul_f32_128", 4 * 2 * 2 * 8 * 128),
    ("bk8", "matmul_f32_tiled<128, 128, 8, 8>", 4 * (2 * 8 * 132 + 2 * 8 * 128)),
    ("warp_tiles", BIG, 4 * (2 * 16 * 132 + 2 * 16 * 128)),
    ("tile128x64", "matmul_f32_tiled<128, 64, 16, 8>", 4 * (2 * 16 * 132 + 2 * 16 * 64)),
    ("tile64x128", "matmul_f32_tiled<64, 128, 16, 4>", 4 * (2 * 16 * 68 + 2 * 16 * 128)),
    ("small64", "matmul_f32_tiled<64, 64, 32, 4>", 4 * (2 * 32 * 68 + 2 * 32 * 64)),
    ("small64_bk16", "matmul_f32_tiled<64, 64, 16, 4>", 4 * (2 * 16 * 68 + 2 * 16 * 64)),
    ("small64_rows8", "matmul_f32_tiled<64, 64, 32, 8>", 4 * (2 * 32 * 68 + 2 * 32 * 64)),
])
def test_census_of_the_tiled_variants(variant: str, kernel: str, smem: int, tmp_path: Path) -> None:
    """Each config variant of the large-tile kernels builds the instance its defines name, with the
    shared memory of its tile, rows x 8 FFMA per k and no tensor-core instruction."""
    from harness import config
    from harness.build.build import build_census
    from harness.ops import variants

    if toolchain.load_nvrtc() is None:
        pytest.skip("NVRTC is not available here")
    cfg = config.load(config.ROOT / "config.yaml")
    options = variants.compiler_options(cfg["operations"]["matmul"], f"cuda.{variant}")
    rows = build_census("matmul", "cuda", [(4096, 4096, 4096)], arch="sm_90", outdir=tmp_path,
                        variant=(f"cuda.{variant}", options))
    (row,) = rows
    assert row["kernel"] == kernel and row["impl"] == f"cuda.{variant}"
    assert row["static_smem"] == smem and row["barriers"] >= 2
    if kernel == "matmul_f32_128":
        bk, rows_per_thread = 8, 8
    else:
        _, _, bk, rows_per_thread = (int(x) for x in kernel[kernel.index("<") + 1:-1].split(","))
    (sass_path,) = [p for p in tmp_path.glob("*.sass") if row["symbol"] in census.sass_opcodes(p.read_text())]
    sass = _sass_ops(sass_path, row["symbol"])
    assert sum(n for op, n in sass.items() if op.startswith("FFMA")) == 8 * rows_per_thread * bk
    assert sass["LDS.128"] == (rows_per_thread // 4 + 2) * bk  # A^T float4 per row block, two of B, per k
    assert not any(op.startswith(("HMMA", "HGMMA")) for op in sass)


@pytest.mark.parametrize(("variant", "shape", "kernel", "smem"), [
    ("ring2", (1024, 1024, 1024), "matmul_f32_ring<64, 64, 32, 4, 2>", 4 * 2 * (64 * 32 + 32 * 64)),
    ("ring3", (1024, 1024, 1024), "matmul_f32_ring<64, 64, 32, 4, 3>", 4 * 3 * (64 * 32 + 32 * 64)),
    ("ring3", (4096, 4096, 4096), "matmul_f32_ring<128, 128, 16, 8, 3>", 4 * 3 * (128 * 16 + 16 * 128)),
    ("ring3_bk16", (1024, 1024, 1024), "matmul_f32_ring<64, 64, 16, 4, 3>", 4 * 3 * (64 * 16 + 16 * 64)),
    ("ring3_128x64", (4096, 4096, 4096), "matmul_f32_ring<128, 64, 16, 8, 3>", 4 * 3 * (128 * 16 + 16 * 64)),
    ("ring3_128x64", (1024, 1024, 1024), "matmul_f32_ring<64, 64, 32, 4, 3>", 4 * 3 * (64 * 32 + 32 * 64)),
    ("ring3_64x128", (4096, 4096, 4096), "matmul_f32_ring<64, 128, 16, 4, 3>", 4 * 3 * (64 * 16 + 16 * 128)),
    ("ring4_bk8", (4096, 4096, 4096), "matmul_f32_ring<128, 128, 8, 8, 4>", 4 * 4 * (128 * 8 + 8 * 128)),
    ("ring2_wide", (4096, 4096, 4096), "matmul_f32_ring16<128, 256, 16, 8, 2>", 4 * 2 * (128 * 16 + 16 * 256)),
    ("ring2_wide", (1024, 1024, 1024), "matmul_f32_ring16<64, 256, 16, 4, 2>", 4 * 2 * (64 * 16 + 16 * 256)),
    ("ring2_wide128", (4096, 4096, 4096), "matmul_f32_ring16<128, 128, 16, 8, 2>", 4 * 2 * (128 * 16 + 16 * 128)),
    ("ring3_wide128", (4096, 4096, 4096), "matmul_f32_ring16<128, 128, 16, 8, 3>", 4 * 3 * (128 * 16 + 16 * 128)),
])
def test_census_of_the_ring_variants(variant: str, shape: tuple[int, int, int], kernel: str, smem: int,
                                     tmp_path: Path) -> None:
    """Each ring variant builds the instance its defines name: its stages of unpadded A and B tiles,
    no global load outside cp.async (A no longer passes through registers), rows x cols FFMA per k
    (cols 8, or 16 for matmul_f32_ring16), per 4 k one float4 of A per output row, and
    cols / 4 float4 of B per k; no spills."""
    from harness import config
    from harness.build.build import build_census
    from harness.ops import variants

    if toolchain.load_nvrtc() is None:
        pytest.skip("NVRTC is not available here")
    cfg = config.load(config.ROOT / "config.yaml")
    options = variants.compiler_options(cfg["operations"]["matmul"], f"cuda.{variant}")
    (row,) = build_census("matmul", "cuda", [shape], arch="sm_90", outdir=tmp_path, variant=(f"cuda.{variant}", options))
    assert row["kernel"] == kernel and row["static_smem"] == smem and row["ld_global_128"] == 0
    args = [int(x) for x in kernel[kernel.index("<") + 1:-1].split(",")]
    bk, rows_per_thread, cols = args[2], args[3], (16 if kernel.startswith("matmul_f32_ring16<") else 8)
    (sass_path,) = [p for p in tmp_path.glob("*.sass") if row["symbol"] in census.sass_opcodes(p.read_text())]
    sass = _sass_ops(sass_path, row["symbol"])
    assert sum(n for op, n in sass.items() if op.startswith("FFMA")) == cols * rows_per_thread * bk
    assert sass["LDS.128"] == rows_per_thread * bk // 4 + cols // 4 * bk
    if cols == 16:
        assert row["block"] == args[0] * args[1] // (16 * rows_per_thread) and row["spill_stores"] == 0
    assert not any(op.startswith(("HMMA", "HGMMA", "LDG.")) for op in sass)  # LDGSTS: cp.async


def test_the_ring_switch_serves_the_tiled_instance_within_the_shared_memory() -> None:
    """MM_STAGES (the variants ring*) serves the tiled kernel's instance through matmul_f32_ring with
    that many stages; a ring past 48 KB of shared memory, and MM_STAGES beside MM_SPLIT_K, are
    refused by the host first."""
    from harness.ops.matmul.kernels import SMEM_LIMIT, cuda_instance, ring_instance

    with cuda_module.variant_options(("-DMM_STAGES=3",)):
        v = cuda_instance(1024, 1024, 1024)
        assert (v.family, v.kernel, v.block, v.stages) == ("ring", "matmul_f32_ring<64, 64, 32, 4, 3>", 128, 3)
        assert "stages=3" in v.specialization and v.tile_mn == (64, 64)
        assert cuda_instance(4096, 4096, 4096).kernel == "matmul_f32_ring<128, 128, 16, 8, 3>"
        assert cuda_instance(1024, 1022, 1024).kernel == "matmul_f32<1>"  # N % 4 != 0: the cp.async kernel
    assert cuda_instance(1024, 1024, 1024).kernel == "matmul_f32_ring<64, 64, 32, 4, 3>"  # the small default
    assert cuda_instance(4096, 4096, 4096).family == "tiled"  # the large default
    with cuda_module.variant_options(("-DMM_STAGES=0",)):  # small_tiled: the tiled kernel at every shape
        assert cuda_instance(1024, 1024, 1024).kernel == "matmul_f32_tiled<64, 64, 32, 4>"
        assert cuda_instance(4096, 4096, 4096).kernel == "matmul_f32_tiled<128, 128, 16, 8>"
    assert ring_instance(128, 128, 16, 3) is None and ring_instance(64, 64, 32, 3) is None
    assert 4 * 3 * (128 * 16 + 16 * 128) == SMEM_LIMIT
    assert ring_instance(128, 128, 16, 4) is not None and ring_instance(64, 64, 12, 2) is not None
    with cuda_module.variant_options(("-DMM_STAGES=4",)), pytest.raises(EvidenceError, match="MM_STAGES=4"):
        cuda_instance(4096, 4096, 4096)
    with cuda_module.variant_options(("-DMM_STAGES=3", "-DMM_SPLIT_K=2")), pytest.raises(EvidenceError, match="MM_STAGES"):
        cuda_instance(1024, 1024, 1024)


def test_sixteen_outputs_a_row_are_the_ring_kernels_only() -> None:
    """MM_COLS=16 (the variants *wide*) names the ring instance with 16 outputs a thread in each of
    its rows, half the threads of 8; beside the tiled kernel (MM_STAGES=0, or the large default
    without MM_STAGES) or MM_SPLIT_K it is refused, and a tile whose threads would not carry whole
    float4s of A and B is refused by the host first."""
    from harness.ops.matmul.kernels import cuda_instance

    with cuda_module.variant_options(("-DMM_STAGES=2", "-DMM_BN=256", "-DMM_BK=16", "-DMM_COLS=16")):
        v = cuda_instance(4096, 4096, 4096)
        assert (v.kernel, v.block, v.tile_mn) == ("matmul_f32_ring16<128, 256, 16, 8, 2>", 256, (128, 256))
        assert "cols=16" in v.specialization
        assert cuda_instance(1024, 1024, 1024).kernel == "matmul_f32_ring16<64, 256, 16, 4, 2>"
    with cuda_module.variant_options(("-DMM_STAGES=3", "-DMM_BK=16", "-DMM_COLS=16")):
        assert cuda_instance(1024, 1024, 1024).block == 64  # 64x64 at 4x16 outputs
    for options in (("-DMM_COLS=16",), ("-DMM_STAGES=0", "-DMM_COLS=16"), ("-DMM_STAGES=2", "-DMM_SPLIT_K=2", "-DMM_COLS=16")):
        with cuda_module.variant_options(options), pytest.raises(EvidenceError, match="MM_COLS=16"):
            cuda_instance(4096, 4096, 4096)
    with cuda_module.variant_options(("-DMM_STAGES=2", "-DMM_BN=256", "-DMM_BK=8", "-DMM_COLS=16")), \
            pytest.raises(EvidenceError, match="whole float4s"):
        cuda_instance(1024, 1024, 1024)  # 64x256x8: 256 threads, 128 float4s of A


def test_the_split_k_variants_dispatch_a_cluster_kernel_of_split_times_the_blocks() -> None:
    """MM_SPLIT_K (the variants splitk*) serves the tiled kernel's instance through
    matmul_f32_splitk with `split` blocks a tile of C; an instance whose partial sums cannot pass
    through its shared memory, and a split other than 2 or 4, are refused by the host first."""
    from harness.ops.matmul.kernels import cuda_grid, cuda_instance, split_instance

    with cuda_module.variant_options(("-DMM_SPLIT_K=2",)):
        v = cuda_instance(1024, 1024, 1024)
        assert v.kernel == "matmul_f32_splitk<64, 64, 32, 4, 2>" and v.block == 128 and v.split == 2
        assert cuda_grid(1024, 1024, v.tile_mn) * v.split == 512
        assert "split_k=2" in v.specialization
        assert cuda_instance(1024, 1022, 1024).kernel == "matmul_f32<1>"  # N % 4 != 0: no split kernel
    with cuda_module.variant_options(("-DMM_SPLIT_K=4", "-DMM_TILE=128")):
        v = cuda_instance(1024, 1024, 1024)
        assert v.kernel == "matmul_f32_splitk<128, 128, 16, 8, 4>" and v.block == 256
        assert cuda_grid(1024, 1024, v.tile_mn) * v.split == 256
    assert cuda_instance(1024, 1024, 1024).split == 1
    # 128x128x8: 16 float4s a thread, 4 fit the stages -> refused, as the static_assert would.
    assert split_instance(128, 128, 8, 8, 2) is not None
    assert split_instance(64, 64, 32, 4, 2) is None and split_instance(128, 128, 16, 8, 4) is None
    with cuda_module.variant_options(("-DMM_SPLIT_K=2", "-DMM_BK=8")), pytest.raises(EvidenceError, match="MM_SPLIT_K"):
        cuda_instance(4096, 4096, 4096)
    with cuda_module.variant_options(("-DMM_SPLIT_K=3",)), pytest.raises(EvidenceError, match="MM_SPLIT_K"):
        cuda_instance(1024, 1024, 1024)


# ----------------------------------------------------------------------------- one PTX a source


def test_a_ring_instance_builds_to_the_same_ptx_in_every_process() -> None:
    """The same source and options give the same PTX from one process to the next (the census's
    identity of code rests on it): with plain float4 reads of its stages, NVRTC 13.5 wrote two to
    four distinct PTX for the 128x128 ring instance in 24 processes (scripts/nvrtc_determinism.py),
    so six processes agreeing by chance was about 3% likely there."""
    import re
    import subprocess
    import sys

    if toolchain.load_nvrtc() is None:
        pytest.skip("no NVRTC library here")
    script = Path(__file__).resolve().parent.parent / "scripts" / "nvrtc_determinism.py"
    proc = subprocess.run([sys.executable, str(script), "--op", "matmul", "--impl", "cuda.ring3",
                           "--shapes", "2048x2048x2048", "--runs", "6", "--jobs", "2", "--bare"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    counts = re.findall(r"(\d+) distinct PTX", proc.stdout)
    assert counts == ["1"], proc.stdout
