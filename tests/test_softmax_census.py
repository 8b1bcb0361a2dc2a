"""Softmax: the width dispatch, the operation's shape rules and sizes, and the offline build census
of both implementations (no GPU needed).

Counts asserted on the census are derived from the kernels' structure: a thread of the register
kernels loads and stores each of its SLOTS vectors once; a thread of the online kernels loads
UNROLL vectors in each of its two passes and stores them in the second; block-wide reductions
take one barrier each (max, sum).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest

from harness.errors import EvidenceError, ToolMissing
from harness.launch import cuda as cuda_module
from harness.launch import sources
from harness.ops.softmax.kernels import (
    MAX_WIDTH,
    ONLINE_UNROLL,
    REGISTER_MAX_SCALAR,
    REGISTER_MAX_VEC4,
    WARP_MAX,
    CudaInstance,
    cuda_instance,
    triton_instance,
    instances_for,
)

CONFIG_SHAPES = [(4096, 1024), (8192, 4096), (1024, 32768), (32768, 256)]


# ----------------------------------------------------------------------------- dispatch


@pytest.mark.parametrize(("n", "expected"), [
    (256, CudaInstance("warp", 4, 128, 2)),
    (1024, CudaInstance("warp", 4, 128, 8)),
    (4, CudaInstance("warp", 4, 128, 1)),
    (1028, CudaInstance("block", 4, 256, 2)),
    (4096, CudaInstance("block", 4, 256, 4)),
    (4100, CudaInstance("block", 4, 512, 3)),
    (8192, CudaInstance("block", 4, 512, 4)),
    (8196, CudaInstance("block", 4, 1024, 3)),
    (32768, CudaInstance("block", 4, 1024, 8)),
    (32772, CudaInstance("online", 4, 1024, 4)),
    (1, CudaInstance("warp", 1, 128, 1)),
    (771, CudaInstance("warp", 1, 128, 25)),
    (1023, CudaInstance("warp", 1, 128, 32)),
    (1025, CudaInstance("block", 1, 256, 5)),
    (8191, CudaInstance("block", 1, 1024, 8)),
    (8193, CudaInstance("online", 1, 1024, 8)),
])
def test_cuda_dispatch_table(n: int, expected: CudaInstance) -> None:
    assert cuda_instance(n) == expected


@pytest.mark.parametrize("n", [1, 2, 3, 4, 31, 32, 33, 127, 128, 129, 255, 256, 1000, 1023, 1024,
                               1025, 2047, 2048, 4095, 4096, 8191, 8192, 8193, 12345, 16384,
                               32767, 32768, 32772, 100000])
def test_cuda_dispatch_covers_the_row(n: int) -> None:
    """Every register variant holds the whole row in at most 8 vectors (vec4) / 32 floats per
    thread, in whole warps; the vector width divides n; online variants take any width."""
    v = cuda_instance(n)
    assert n % v.vec == 0 and (v.vec == 4) == (n % 4 == 0)
    assert v.block % 32 == 0 and v.block <= 1024
    assert (v.block // 32) & (v.block // 32 - 1) == 0
    group = 32 if v.path == "warp" else v.block
    if v.path == "online":
        assert n > (REGISTER_MAX_VEC4 if v.vec == 4 else REGISTER_MAX_SCALAR)
        assert v.per_thread == ONLINE_UNROLL[v.vec]
    else:
        assert v.per_thread * v.vec * group >= n > (v.per_thread - 1) * v.vec * group
        assert v.per_thread * v.vec <= 32
        assert (v.path == "warp") == (n <= WARP_MAX)


def test_cuda_kernel_names() -> None:
    assert cuda_instance(256).kernel == "softmax_warp_vec4<2, 4>"
    assert cuda_instance(256).rows_per_block == 4
    assert cuda_instance(4096).kernel == "softmax_block_vec4<256, 4>"
    assert cuda_instance(771).kernel == "softmax_warp_scalar<25, 4>"
    assert cuda_instance(40000).kernel == "softmax_online_vec4<1024, 4>"
    assert cuda_instance(40001).kernel == "softmax_online_scalar<1024, 8>"
    assert cuda_instance(4096).rows_per_block == 1
    assert cuda_instance(32768).specialization == "block vec4 block=1024 slots=8"
    assert cuda_instance(40000).specialization == "online vec4 block=1024 unroll=4"


@pytest.mark.parametrize(("n", "kernel", "block_n", "warps", "stages"), [
    (256, "softmax_row", 256, 1, None),
    (771, "softmax_row", 1024, 4, None),
    (1024, "softmax_row", 1024, 4, None),
    (4096, "softmax_row", 4096, 16, None),
    (8192, "softmax_row", 8192, 16, None),
    (8193, "softmax_online", 8192, 16, 1),
    (32768, "softmax_online", 8192, 16, 1),
])
def test_triton_dispatch(n: int, kernel: str, block_n: int, warps: int, stages: int | None) -> None:
    pytest.importorskip("triton", reason="triton is not installed")
    from kernels.softmax import softmax_triton

    v = triton_instance(n)
    assert (v.kernel, v.constexprs(), v.num_warps, v.num_stages) == (
        kernel, {"N": n, "BLOCK_N": block_n}, warps, stages)
    assert v.jit_function() is getattr(softmax_triton, kernel)
    assert v.signature() == {"X": "*fp32", "Y": "*fp32", "N": "constexpr", "BLOCK_N": "constexpr"}
    assert v.aligned_args() == (0, 1) and v.block == 32 * warps


def test_register_limit_switch() -> None:
    """The variant online_wide's SM_REGISTER_MAX_VEC4 sends wider rows through the online kernel;
    it can only lower the limit."""
    from harness.launch import cuda as cuda_module

    assert cuda_instance(32768).path == "block"
    with cuda_module.variant_options(("-DSM_REGISTER_MAX_VEC4=16384",)):
        assert cuda_instance(32768).path == "online" and cuda_instance(16384).path == "block"
        assert cuda_instance(4096) == CudaInstance("block", 4, 256, 4)
    for bad in ("65536", "512", "x"):
        with cuda_module.variant_options((f"-DSM_REGISTER_MAX_VEC4={bad}",)), \
                pytest.raises(EvidenceError, match="SM_REGISTER_MAX_VEC4"):
            cuda_instance(32768)


def test_block_and_warp_switches() -> None:
    """SM_BLOCK sets the vec4 block path's threads where the row then fits 8 slots (block512:
    width 4096 on 512 threads, 2 slots); SM_WARP_MAX sends rows wider than it to the block path
    (block_rows: width 1024 on one 256-thread block, 1 slot). Other widths keep the dispatch."""
    from harness.launch import cuda as cuda_module

    assert cuda_instance(4096) == CudaInstance("block", 4, 256, 4)
    assert cuda_instance(1024) == CudaInstance("warp", 4, 128, 8)
    with cuda_module.variant_options(("-DSM_BLOCK=512",)):
        assert cuda_instance(4096) == CudaInstance("block", 4, 512, 2)
        assert cuda_instance(32768) == CudaInstance("block", 4, 1024, 8)  # 16 slots at 512: no
        assert cuda_instance(1024).path == "warp" and cuda_instance(4095).path == "block"
        assert cuda_instance(4095).block == 512  # the scalar path keeps its own sizes
    with cuda_module.variant_options(("-DSM_WARP_MAX=512",)):
        assert cuda_instance(1024) == CudaInstance("block", 4, 256, 1)
        assert cuda_instance(512).path == "warp" and cuda_instance(256) == CudaInstance("warp", 4, 128, 2)
    for bad in ("-DSM_BLOCK=384", "-DSM_WARP_MAX=2048", "-DSM_WARP_MAX=200"):
        with cuda_module.variant_options((bad,)), pytest.raises(EvidenceError, match=bad[2:].split("=")[0]):
            cuda_instance(1024 if "WARP" in bad else 4096)


def test_dispatch_refuses_bad_widths() -> None:
    for n in (0, -4, MAX_WIDTH + 1):
        with pytest.raises(EvidenceError, match="outside the supported range"):
            cuda_instance(n)


def test_variants_for_groups_config_shapes() -> None:
    pytest.importorskip("triton", reason="triton is not installed")
    shapes = [*CONFIG_SHAPES, (64, 1024)]
    cuda = instances_for("cuda", shapes)
    assert [v.instance.kernel for v in cuda] == [
        "softmax_warp_vec4<8, 4>", "softmax_block_vec4<256, 4>", "softmax_block_vec4<1024, 8>",
        "softmax_warp_vec4<2, 4>"]
    assert cuda[0].shapes_text == "4096x1024;64x1024"
    triton = instances_for("triton", shapes)
    assert [v.instance.specialization for v in triton] == [
        "N=1024 BLOCK_N=1024 num_warps=4", "N=4096 BLOCK_N=4096 num_warps=16",
        "N=32768 BLOCK_N=8192 num_warps=16 num_stages=1", "N=256 BLOCK_N=256 num_warps=1"]
    with pytest.raises(EvidenceError, match="not ours"):
        instances_for("torch", shapes)


def test_launchers_refuse_cpu_tensors() -> None:
    torch = pytest.importorskip("torch")
    from harness.ops.softmax.kernels import launch_cuda, launch_triton

    x, out = torch.randn(4, 8), torch.empty(4, 8)
    for launch in (launch_cuda, launch_triton):
        with pytest.raises(EvidenceError, match="CUDA device"):
            launch(x, out)


# ----------------------------------------------------------------------------- operation


def test_operation_shapes_and_sizes() -> None:
    from harness.ops import get

    op = get("softmax")
    for shape in ("4096x1024", "8192x4096", "1024x32768", "32768x256", "3x771"):
        op.validate_shape(shape)
    for bad in ("4096", "2x3x4", "4096x1024-powerlaw", f"2x{MAX_WIDTH + 1}"):
        with pytest.raises(ValueError):
            op.validate_shape(bad)
    assert op.bytes_moved("4096x1024") == 4096 * 1024 * 4 * 2
    assert op.flops("1024x32768") == 4 * 1024 * 32768
    assert op.sources == {"cuda": ["softmax/softmax.cu"], "triton": ["softmax/softmax_triton.py"], "torch": []}
    assert op.kernels == "harness.ops.softmax.kernels"


def test_reference_matches_plain_python() -> None:
    """The float64 reference against exp / sum written out in Python, on the CPU."""
    torch = pytest.importorskip("torch")
    from harness.ops import get

    x = torch.tensor([[0.5, -2.0, 3.25, 1.0], [100.0, 100.0, -50.0, 99.0]], dtype=torch.float32)
    ref = get("softmax").reference({"x": x}, {})
    assert ref.dtype == torch.float64
    for r, row in enumerate(x.tolist()):
        m = max(row)
        e = [math.exp(v - m) for v in row]
        for c, v in enumerate(e):
            assert ref[r, c].item() == pytest.approx(v / sum(e), rel=1e-14, abs=0.0)


# ----------------------------------------------------------------------------- offline build


def _census_or_skip(impl: str, shapes: list[tuple[int, int]], outdir: Path) -> list[dict]:
    from harness.build.build import build_census

    try:
        return build_census("softmax", impl, shapes, arch="sm_90", outdir=outdir)
    except ToolMissing as exc:
        pytest.skip(f"{impl} census tools missing: {exc}")


def test_build_census_cuda(tmp_path: Path) -> None:
    from harness.build.build import CENSUS_COLUMNS

    shapes = [*CONFIG_SHAPES, (64, 771), (8, 40000)]
    rows = _census_or_skip("cuda", shapes, tmp_path)
    plan = [item.instance for item in instances_for("cuda", shapes)]
    assert [r["kernel"] for r in rows] == [v.kernel for v in plan]
    assert [tuple(r) for r in rows] == [CENSUS_COLUMNS] * len(plan)
    sha = hashlib.sha256((sources.kernels_dir() / "softmax/softmax.cu").read_bytes()).hexdigest()
    for row, v in zip(rows, plan, strict=True):
        wide, narrow = ("ld_global_128", "ld_global_32") if v.vec == 4 else ("ld_global_32", "ld_global_128")
        st_wide = "st_global_128" if v.vec == 4 else "st_global_32"
        passes = 2 if v.path == "online" else 1
        assert (row[wide], row[narrow]) == (passes * v.per_thread, 0), row["kernel"]
        assert row[st_wide] == v.per_thread, row["kernel"]
        assert row["ld_global_nc"] == row[wide]
        if v.vec == 4:
            assert (row["sass_ldg_128"], row["sass_stg_128"]) == (passes * v.per_thread, v.per_thread)
        assert row["barriers"] == (0 if v.path == "warp" else 2), row["kernel"]
        assert row["static_smem"] == (0 if v.path == "warp" else 2 * 4 * v.block // 32)
        assert 0 < row["registers"] <= 65536 // v.block and row["block"] == v.block
        assert (row["spill_stores"], row["spill_loads"], row["stack_bytes"], row["sass_local"]) == (0, 0, 0, 0)
        assert row["source_sha256"] == sha and "-ftz=true" in row["options"]
    assert rows[0]["shapes"] == "4096x1024"
    assert {"cuda_softmax_block_vec4_1024_8.ptx", "cuda_softmax_block_vec4_1024_8.sass"} <= {
        p.name for p in tmp_path.iterdir()}


def test_build_census_triton(tmp_path: Path) -> None:
    pytest.importorskip("triton", reason="triton is not installed")
    from harness.build.build import CENSUS_COLUMNS

    rows = _census_or_skip("triton", [*CONFIG_SHAPES, (64, 771)], tmp_path)
    assert [tuple(r) for r in rows] == [CENSUS_COLUMNS] * 5
    by_n = {int(r["specialization"].split()[0][2:]): r for r in rows}
    for n in (1024, 4096, 256):  # softmax_row: one 128-bit load/store per 4 floats of a thread
        row = by_n[n]
        v = triton_instance(n)
        per_thread = v.constexprs()["BLOCK_N"] // (32 * v.num_warps)
        assert row["kernel"] == "softmax_row" and row["block"] == v.block
        assert (row["ld_global_128"], row["st_global_128"]) == (per_thread // 4, per_thread // 4)
    online = by_n[32768]
    assert online["kernel"] == "softmax_online" and "num_stages=1" in online["options"]
    v = triton_instance(32768)
    per_thread = v.constexprs()["BLOCK_N"] // (32 * v.num_warps)
    assert (online["ld_global_128"], online["st_global_128"]) == (2 * per_thread // 4, per_thread // 4)
    odd = by_n[771]
    assert odd["ld_global_128"] == 0 and odd["ld_global_32"] > 0
    for row in rows:
        assert row["arch"].startswith("sm_90") and row["compiler"].startswith("triton ")
        assert row["registers"] > 0 and row["spill_stores"] == 0 and row["sass_local"] == 0


def test_warp_rows_switch() -> None:
    """SM_WARP_ROWS sets the rows (warps) per block of the warp-per-row path; the block path is left
    alone and other values are refused."""
    from harness.launch import cuda as cuda_module

    assert cuda_instance(1024) == CudaInstance("warp", 4, 128, 8)
    with cuda_module.variant_options(("-DSM_WARP_ROWS=8",)):
        assert cuda_instance(1024) == CudaInstance("warp", 4, 256, 8) and cuda_instance(1024).rows_per_block == 8
        assert cuda_instance(4096) == CudaInstance("block", 4, 256, 4)
    with cuda_module.variant_options(("-DSM_WARP_ROWS=3",)), pytest.raises(EvidenceError, match="SM_WARP_ROWS"):
        cuda_instance(1024)
