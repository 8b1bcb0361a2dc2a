"""The census parsers on real compiler output (tests/fixtures/compiler/, made by its
regenerate.py), the width dispatch, and the offline build end to end where the tools exist.

Counts asserted here are checked against independent evidence: a plain grep of the same file,
another tool's report of the same cubin, or the kernel's structure (a vec4 thread of
layernorm_fwd_vec4<BLOCK, SLOTS> loads x, w and b once per slot and stores once per slot).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from harness.build import census, toolchain
from harness.errors import EvidenceError, ToolMissing
from harness.launch import cuda as cuda_module
from harness.launch import sources
from harness.ops.layernorm.kernels import (
    MAX_WIDTH,
    CudaInstance,
    cuda_instance,
    triton_instance,
    instances_for,
)

FIXTURES = Path(__file__).parent / "fixtures" / "compiler"
CUDA_DIRS = sorted(FIXTURES.glob("cuda-*"))
TRITON_DIRS = sorted(FIXTURES.glob("triton-*"))


def _cases(folders: list[Path]) -> list[tuple[Path, str]]:
    return [(f, p.name[: -len(".ptx")]) for f in folders for p in sorted(f.glob("*.ptx"))]


CUDA_CASES = _cases(CUDA_DIRS)
TRITON_CASES = _cases(TRITON_DIRS)
ALL_CASES = CUDA_CASES + TRITON_CASES


def _ids(cases: list[tuple[Path, str]]) -> list[str]:
    return [f"{folder.name}/{stem}" for folder, stem in cases]


def _read(folder: Path, stem: str, suffix: str) -> str:
    return (folder / f"{stem}.{suffix}").read_text()


_Record = TypeVar("_Record")


def _only(table: Mapping[str, _Record]) -> tuple[str, _Record]:
    """The single function of a one-kernel fixture."""
    assert len(table) == 1, sorted(table)
    return next(iter(table.items()))


def _slots(stem: str) -> int:
    """SLOTS of a CUDA fixture named like cuda_layernorm_fwd_vec4_128_2."""
    return int(stem.rsplit("_", 1)[1])


def test_fixtures_exist() -> None:
    assert CUDA_CASES, "no CUDA fixtures; run tests/fixtures/compiler/regenerate.py"
    assert TRITON_CASES, "no Triton fixtures; run tests/fixtures/compiler/regenerate.py"
    assert any("nvrtc" in f.name for f in CUDA_DIRS) and any("nvcc" in f.name for f in CUDA_DIRS)


# ----------------------------------------------------------------------------- ptxas -v


@pytest.mark.parametrize(("folder", "stem"), ALL_CASES, ids=_ids(ALL_CASES))
def test_ptxas_log_matches_grep(folder: Path, stem: str) -> None:
    log = _read(folder, stem, "ptxas.log")
    name, info = _only(census.parse_ptxas_log(log))
    entry = re.search(r"Compiling entry function '([^']+)'", log)
    assert entry is not None
    assert name == entry.group(1)
    assert info.entry
    used = re.search(r"Used (\d+) registers", log)
    assert used is not None
    assert info.registers == int(used.group(1)) > 0
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert frame is not None
    assert (info.stack_bytes, info.spill_stores, info.spill_loads) == tuple(map(int, frame.groups()))
    assert (info.stack_bytes, info.spill_stores, info.spill_loads) == (0, 0, 0)
    barriers = re.search(r"used (\d+) barriers", log)
    assert barriers is not None
    assert info.barriers == int(barriers.group(1))


@pytest.mark.parametrize(("folder", "stem"), ALL_CASES, ids=_ids(ALL_CASES))
def test_ptxas_log_agrees_with_cubin_resource_table(folder: Path, stem: str) -> None:
    """ptxas's report and cuobjdump's reading of the cubin it wrote: same registers and stack."""
    name, info = _only(census.parse_ptxas_log(_read(folder, stem, "ptxas.log")))
    res = census.parse_res_usage(_read(folder, stem, "res-usage.txt"))[name]
    assert res.registers == info.registers
    assert res.stack == info.stack_bytes and res.local == 0
    assert res.constant.get(0, 0) > 0  # kernel parameters live in bank 0
    if info.smem_bytes:  # sm_90 reserves 1 KB of shared memory per block for the system
        assert res.shared == info.smem_bytes + 1024


@pytest.mark.parametrize(("folder", "stem"), CUDA_CASES, ids=_ids(CUDA_CASES))
def test_cuda_ptxas_static_smem_is_the_warp_partials(folder: Path, stem: str) -> None:
    """__shared__ float warp_partials[BLOCK / 32][3]: 12 bytes per warp."""
    _, info = _only(census.parse_ptxas_log(_read(folder, stem, "ptxas.log")))
    block = int(stem.rsplit("_", 2)[1])
    assert info.smem_bytes == 12 * block // 32


def test_ptxas_log_formats() -> None:
    """Older ptxas (cmem on the 'Used' line), device functions, and a log of two kernels."""
    log = (
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Function properties for _Z6helperv\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_80'\n"
        "ptxas info    : Function properties for _Z1kPf\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 14 registers, 16 bytes smem, 360 bytes cmem[0], 8 bytes cmem[2]\n"
        "ptxas info    : Compiling entry function 'k2' for 'sm_80'\n"
        "ptxas info    : Function properties for k2\n"
        "ptxas         .     16 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers, 360 bytes cmem[0]\n")
    parsed = census.parse_ptxas_log(log)
    assert not parsed["_Z6helperv"].entry and parsed["_Z6helperv"].spill_stores == 4
    k = parsed["_Z1kPf"]
    assert (k.registers, k.smem_bytes, k.cmem_bytes, k.barriers) == (14, 16, {0: 360, 2: 8}, 0)
    k2 = parsed["k2"]
    assert (k2.registers, k2.stack_bytes, k2.spill_stores, k2.spill_loads) == (255, 16, 12, 8)
    assert k2.entry and k2.barriers == 1


# ----------------------------------------------------------------------------- PTX


def _grep_ptx(text: str) -> dict[str, int]:
    """Independent line-based counts (each of these PTX files has one instruction per line)."""
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith("//")]
    ld = [ln for ln in lines if "ld.global" in ln]
    st = [ln for ln in lines if "st.global" in ln]
    return {
        "ld": len(ld), "ld128": sum(".v4." in ln for ln in ld),
        "ld32": sum(".v" not in ln and re.search(r"\.[bf]32\b", ln) is not None for ln in ld),
        "nc": sum("ld.global.nc" in ln for ln in ld),
        "st": len(st), "st128": sum(".v4." in ln for ln in st),
        "st32": sum(".v" not in ln and re.search(r"\.[bf]32\b", ln) is not None for ln in st),
        "bar": sum(re.match(r"\s*(?:bar|barrier)\.sync\b", ln) is not None for ln in lines),
        "shfl": sum("shfl.sync" in ln for ln in lines),
    }


@pytest.mark.parametrize(("folder", "stem"), ALL_CASES, ids=_ids(ALL_CASES))
def test_ptx_counts_match_grep(folder: Path, stem: str) -> None:
    text = _read(folder, stem, "ptx")
    name, counts = _only(census.parse_ptx(text))
    assert counts.entry
    grep = _grep_ptx(text)
    assert sum(counts.ld_global.values()) == grep["ld"]
    assert counts.ld_global[128] == grep["ld128"] and counts.ld_global[32] == grep["ld32"]
    assert sum(counts.st_global.values()) == grep["st"]
    assert counts.st_global[128] == grep["st128"] and counts.st_global[32] == grep["st32"]
    assert counts.ld_global_nc == grep["nc"]
    assert counts.barriers == grep["bar"]
    assert counts.shuffles == grep["shfl"]


@pytest.mark.parametrize(("folder", "stem"), CUDA_CASES, ids=_ids(CUDA_CASES))
def test_cuda_ptx_matches_kernel_structure(folder: Path, stem: str) -> None:
    """Per slot: one load each of x, w, b and one store, as wide as the path's vectors, plus the
    32-bit broadcast load of the row's first element (the shift); all loads read-only; one
    barrier."""
    _, counts = _only(census.parse_ptx(_read(folder, stem, "ptx")))
    slots = _slots(stem)
    width = 128 if "vec4" in stem else 32
    assert counts.ld_global == Counter({width: 3 * slots}) + Counter({32: 1})
    assert counts.st_global == {width: slots}
    assert counts.ld_global_nc == 3 * slots + 1
    assert counts.barriers == 1
    assert counts.shuffles > 0


def test_triton_ptx_widths() -> None:
    """N=768 is a multiple of 16: Triton loads 128 bits at a time; N=771 is odd: 32 bits."""
    for folder in TRITON_DIRS:
        aligned = census.parse_ptx(_read(folder, folder.glob("*N_768_*.ptx").__next__().stem, "ptx"))
        odd = census.parse_ptx(_read(folder, folder.glob("*N_771_*.ptx").__next__().stem, "ptx"))
        (_, a), (_, o) = _only(aligned), _only(odd)
        assert a.ld_global[128] == 6  # x, w, b: 1024 / 128 threads = 8 floats = 2 x 128 bits
        assert a.ld_global[32] == 1  # the row's first element (the shift)
        assert a.st_global[128] == 2
        assert o.ld_global[128] == 0 and o.ld_global[32] > 0


def test_ptx_parser_edge_cases() -> None:
    ptx = """
.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);
.func (.param .b32 func_retval0) helper(.param .b64 p)
{
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [p];
	ld.global.v2.f64 {%fd1, %fd2}, [%rd1];   // ld.global.f32 in a comment
	ret;
}
.visible .entry kern(
	.param .u64 kern_param_0
)
.maxntid 128, 1, 1
{
	.reg .pred %p<3>;
	.loc	1 38 5
	@%p1 ld.global.nc.L1::no_allocate.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];
$L__BB0_2:
	@!%p2 ld.global.u8 %rs1, [%rd2];
	{ .reg .b32 tmp; ld.global.b32 tmp, [%rd3]; }
	bar.warp.sync -1;
	barrier.sync 0;
	bar.sync 1, 64;
	shfl.sync.bfly.b32 %r1|%p3, %r2, 1, 31, -1;
	st.global.v2.f32 [%rd4], {%f5, %f6};
	ret;
}
"""
    parsed = census.parse_ptx(ptx)
    assert set(parsed) == {"helper", "kern"}  # the vprintf prototype has no body
    assert not parsed["helper"].entry and parsed["helper"].ld_global == {128: 1}
    k = parsed["kern"]
    assert k.entry
    assert k.ld_global == {128: 1, 8: 1, 32: 1} and k.ld_global_nc == 1
    assert k.st_global == {64: 1}
    assert k.barriers == 2 and k.shuffles == 1  # bar.warp.sync is not a CTA barrier
    assert census.ptx_access_bits("ld.global.nc.v4.f32") == 128
    assert census.ptx_access_bits("st.global.b16") == 16


# ----------------------------------------------------------------------------- SASS


def _grep_sass(text: str) -> dict[str, int]:
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9._]*)", text)
    return {
        "ldg128": sum(o.startswith("LDG.") and ".128" in o for o in ops),
        "ldg32": sum(o.startswith("LDG") and not re.search(r"\.(64|128|U8|S8|U16|S16)\b", o) for o in ops),
        "stg128": sum(o.startswith("STG.") and ".128" in o for o in ops),
        "stg32": sum(o.startswith("STG") and not re.search(r"\.(64|128|U8|S8|U16|S16)\b", o) for o in ops),
        "bar": sum(o.startswith("BAR") for o in ops), "shfl": sum(o.startswith("SHFL") for o in ops),
        "local": sum(o.startswith(("LDL", "STL")) for o in ops), "all": len(ops),
    }


@pytest.mark.parametrize(("folder", "stem"), ALL_CASES, ids=_ids(ALL_CASES))
def test_sass_counts_match_grep(folder: Path, stem: str) -> None:
    text = _read(folder, stem, "sass")
    _, counts = _only(census.parse_sass(text))
    grep = _grep_sass(text)
    assert (counts.ldg[128], counts.ldg[32]) == (grep["ldg128"], grep["ldg32"])
    assert (counts.stg[128], counts.stg[32]) == (grep["stg128"], grep["stg32"])
    assert (counts.bar, counts.shfl, counts.local) == (grep["bar"], grep["shfl"], grep["local"])
    assert counts.instructions == grep["all"]
    assert counts.local == 0  # register arrays stayed in registers: no LDL/STL


@pytest.mark.parametrize(("folder", "stem"), CUDA_CASES, ids=_ids(CUDA_CASES))
def test_cuda_sass_keeps_the_ptx_accesses(folder: Path, stem: str) -> None:
    """ptxas turned every PTX global access into one SASS access of the same width."""
    _, ptx = _only(census.parse_ptx(_read(folder, stem, "ptx")))
    _, sass = _only(census.parse_sass(_read(folder, stem, "sass")))
    assert sass.ldg == ptx.ld_global and sass.stg == ptx.st_global
    assert sass.bar == 1
    if "vec4" in stem:  # 128-bit accesses only, but for the 32-bit broadcast of the shift
        assert sass.ldg[128] > 0 and sass.ldg[32] == 1 and sass.stg[32] == 0
    else:
        assert sass.ldg[128] == 0 and sass.ldg[32] > 0


def test_nvdisasm_and_cuobjdump_agree() -> None:
    pairs = sorted(FIXTURES.glob("*/*.nvdisasm.sass"))
    assert pairs, "no nvdisasm fixture"
    for path in pairs:
        stem = path.name[: -len(".nvdisasm.sass")]
        a = census.parse_sass(path.read_text())
        b = census.parse_sass(_read(path.parent, stem, "sass"))
        assert a.keys() == b.keys()
        for name in a:
            assert (a[name].ldg, a[name].stg, a[name].bar, a[name].shfl, a[name].local) == \
                   (b[name].ldg, b[name].stg, b[name].bar, b[name].shfl, b[name].local)


def test_sass_access_bits() -> None:
    assert census.sass_access_bits("LDG.E.128.CONSTANT") == 128
    assert census.sass_access_bits("LDG.E.LTC128B.128") == 128
    assert census.sass_access_bits("LDG.E.CONSTANT") == 32
    assert census.sass_access_bits("STG.E.64") == 64
    assert census.sass_access_bits("LDG.E.U8") == 8


# ----------------------------------------------------------------------------- dispatch


@pytest.mark.parametrize(("n", "expected"), [
    (768, CudaInstance("rows128", 4, 128, 2, True, 768)), (1024, CudaInstance("rows128", 4, 128, 2, True, 1024)),
    (4, CudaInstance("rows128", 4, 128, 1, True, 4)), (1000, CudaInstance("rows128", 4, 128, 2, True, 1000)),
    (2048, CudaInstance("wide", 4, 256, 2, True, 2048)), (4096, CudaInstance("wide", 4, 256, 4, True, 4096)),
    (8192, CudaInstance("wide", 4, 512, 4, True, 8192)), (771, CudaInstance("scalar", 1, 128, 7, True)),
    (33, CudaInstance("scalar", 1, 128, 1, True)), (8191, CudaInstance("scalar", 1, 1024, 8, True)),
])
def test_cuda_variant(n: int, expected: CudaInstance) -> None:
    """The dispatch: block paths with w and b loaded late at every width (h200-dispatch-1), the
    vec4 ones with the width compiled in (fixed_width, h200-ops-29 and -30); the scalar path reads it."""
    assert cuda_instance(n) == expected


def test_cuda_variant_covers_every_width_without_empty_slots() -> None:
    for n in range(1, MAX_WIDTH + 1):
        v = cuda_instance(n)
        per_slot = v.vec * v.block
        assert (v.slots - 1) * per_slot < n <= v.slots * per_slot, n
        assert v.block % 32 == 0 and (v.block & (v.block - 1)) == 0 and v.block <= 1024
        assert v.slots <= (4 if v.vec == 4 else 8)
        assert (v.vec == 4) == (n % 4 == 0)


def test_switches_override_the_dispatch() -> None:
    """LN_LATE_WB and LN_WARP_ROWS (the variants early_params and warp_rows) replace the dispatch's
    choice for one run; the warp path serves only n % 4 == 0 up to 1024, 4 rows per block."""
    with cuda_module.variant_options(("-DLN_LATE_WB=1",)):
        assert cuda_instance(768) == CudaInstance("rows128", 4, 128, 2, late_wb=True, fixed_width=768)
        assert cuda_instance(771).late_wb and cuda_instance(4096).kernel == "layernorm_fwd_vec4_fixed<256, 4, true, 4096>"
    with cuda_module.variant_options(("-DLN_LATE_WB=0",)):
        assert not any(cuda_instance(n).late_wb for n in (768, 2048, 4096, 771))
    with cuda_module.variant_options(("-DLN_WARP_ROWS=1",)):
        warp = cuda_instance(768)
        assert (warp.path, warp.block, warp.slots, warp.rows_per_block) == ("warp", 128, 6, 4)
        assert warp.kernel == "layernorm_fwd_warp_vec4<6, 4>" and warp.grid(4097) == 1025
        assert cuda_instance(1024).slots == 8 and cuda_instance(4).slots == 1
        assert cuda_instance(2048).path == "wide" and cuda_instance(770).path == "scalar"
    with cuda_module.variant_options(("-DLN_WARP_ROWS=0",)):
        assert cuda_instance(768).path == "rows128" and cuda_instance(768).grid(4097) == 4097
    with cuda_module.variant_options(("-DLN_LATE_WB=yes",)), pytest.raises(EvidenceError, match="LN_LATE_WB"):
        cuda_instance(768)


def test_block_switch_sets_the_wide_paths_threads() -> None:
    """LN_BLOCK (the variants block512 and block128) sets the threads of the vec4 wide path where
    the row then fits 8 slots; narrower rows, the scalar path and rows too wide keep the dispatch."""
    assert cuda_instance(4096) == CudaInstance("wide", 4, 256, 4, late_wb=True, fixed_width=4096)
    with cuda_module.variant_options(("-DLN_BLOCK=512",)):
        assert cuda_instance(4096) == CudaInstance("wide", 4, 512, 2, late_wb=True, fixed_width=4096)
        assert cuda_instance(2048) == CudaInstance("wide", 4, 512, 1, late_wb=True, fixed_width=2048)
        assert cuda_instance(768).block == 128 and cuda_instance(4095).block == 512  # scalar: its own
    with cuda_module.variant_options(("-DLN_BLOCK=128",)):
        assert cuda_instance(4096) == CudaInstance("wide", 4, 128, 8, late_wb=True, fixed_width=4096)
        assert cuda_instance(8192) == CudaInstance("wide", 4, 512, 4, late_wb=True, fixed_width=8192)  # 16 slots: no
        for n in range(1028, MAX_WIDTH + 1, 4):
            v = cuda_instance(n)
            assert (v.slots - 1) * 4 * v.block < n <= v.slots * 4 * v.block <= 4 * 8 * v.block, n
    with cuda_module.variant_options(("-DLN_BLOCK=300",)), pytest.raises(EvidenceError, match="LN_BLOCK"):
        cuda_instance(4096)


def test_narrow_block_switch_sets_the_narrow_paths_threads() -> None:
    """LN_NARROW_BLOCK (the variant narrow64) sets the threads of the vec4 path at widths up to 1024
    where the row then fits 8 slots; wider rows and the scalar path keep the dispatch."""
    assert cuda_instance(768) == CudaInstance("rows128", 4, 128, 2, late_wb=True, fixed_width=768)
    with cuda_module.variant_options(("-DLN_NARROW_BLOCK=64",)):
        assert cuda_instance(768) == CudaInstance("rows128", 4, 64, 3, late_wb=True, fixed_width=768)
        assert cuda_instance(1024) == CudaInstance("rows128", 4, 64, 4, late_wb=True, fixed_width=1024)
        assert cuda_instance(4) == CudaInstance("rows128", 4, 64, 1, late_wb=True, fixed_width=4)
        assert cuda_instance(2048).block == 256 and cuda_instance(770).block == 128  # wide, scalar: theirs
        for n in range(4, 1025, 4):
            v = cuda_instance(n)
            assert (v.slots - 1) * 4 * v.block < n <= v.slots * 4 * v.block, n
    with cuda_module.variant_options(("-DLN_NARROW_BLOCK=96",)), pytest.raises(EvidenceError, match="LN_NARROW_BLOCK"):
        cuda_instance(768)


def test_fixed_width_switch_compiles_the_width_into_the_vec4_block_paths() -> None:
    """By default (DEFAULT_FIXED_WIDTH, and LN_FIXED_WIDTH=1) each vec4 block-path width has its own
    instance, the width a template argument; LN_FIXED_WIDTH=0 (the variant runtime_width) gives
    the kernel that reads it at run time, one instance for the widths of a path; the warp and
    scalar paths read it at run time either way."""
    for options in ((), ("-DLN_FIXED_WIDTH=1",)):
        with cuda_module.variant_options(options):
            v = cuda_instance(768)
            assert v == CudaInstance("rows128", 4, 128, 2, True, 768)
            assert v.kernel == "layernorm_fwd_vec4_fixed<128, 2, true, 768>" and v.specialization.endswith(" n=768")
            assert cuda_instance(4096).kernel == "layernorm_fwd_vec4_fixed<256, 4, true, 4096>"
            assert cuda_instance(770).fixed_width == 0 and cuda_instance(770).kernel.startswith("layernorm_fwd_scalar<")
            assert cuda_instance(772).kernel != cuda_instance(768).kernel  # one instance a width
    with cuda_module.variant_options(("-DLN_FIXED_WIDTH=0",)):
        v = cuda_instance(768)
        assert v == CudaInstance("rows128", 4, 128, 2, True) and v.kernel == "layernorm_fwd_vec4<128, 2, true>"
        assert cuda_instance(772).kernel == v.kernel and " n=" not in v.specialization
    with cuda_module.variant_options(("-DLN_FIXED_WIDTH=1", "-DLN_WARP_ROWS=1")):
        assert cuda_instance(768).kernel == "layernorm_fwd_warp_vec4<6, 4>"


def test_warp_path_holds_every_width_it_serves() -> None:
    with cuda_module.variant_options(("-DLN_WARP_ROWS=1",)):
        for n in range(4, 1025, 4):
            v = cuda_instance(n)
            assert v.path == "warp" and (v.slots - 1) * 128 < n <= v.slots * 128, n


@pytest.mark.parametrize("n", [0, -1, MAX_WIDTH + 1])
def test_widths_out_of_range_are_refused(n: int) -> None:
    with pytest.raises(EvidenceError, match="outside the supported range"):
        cuda_instance(n)
    with pytest.raises(EvidenceError, match="outside the supported range"):
        triton_instance(n)


def test_triton_variant() -> None:
    assert (triton_instance(768).block_n, triton_instance(768).num_warps) == (1024, 4)
    assert (triton_instance(33).block_n, triton_instance(33).num_warps) == (64, 1)
    assert (triton_instance(4096).block_n, triton_instance(4096).num_warps) == (4096, 16)
    assert (triton_instance(8192).block_n, triton_instance(8192).num_warps) == (8192, 16)


def test_variants_for_groups_shapes_by_specialization() -> None:
    shapes = [(4096, 768), (8192, 768), (1024, 2048), (4096, 4096), (4096, 768)]
    cuda = instances_for("cuda", shapes)
    assert [v.instance.kernel for v in cuda] == [
        "layernorm_fwd_vec4_fixed<128, 2, true, 768>", "layernorm_fwd_vec4_fixed<256, 2, true, 2048>",
        "layernorm_fwd_vec4_fixed<256, 4, true, 4096>"]
    assert cuda[0].shapes_text == "4096x768;8192x768"
    triton = instances_for("triton", shapes)
    assert [v.instance.specialization for v in triton] == [
        "N=768 BLOCK_N=1024 num_warps=4", "N=2048 BLOCK_N=2048 num_warps=8",
        "N=4096 BLOCK_N=4096 num_warps=16"]
    with pytest.raises(EvidenceError, match="not ours"):
        instances_for("torch", shapes)


def test_launchers_refuse_cpu_tensors() -> None:
    torch = pytest.importorskip("torch")
    from harness.ops.layernorm.kernels import launch_cuda, launch_triton

    x = torch.randn(4, 8)
    w, b, out = torch.randn(8), torch.randn(8), torch.empty(4, 8)
    for launch in (launch_cuda, launch_triton):
        with pytest.raises(EvidenceError, match="CUDA device"):
            launch(x, w, b, 1e-5, out)


# ----------------------------------------------------------------------------- offline build


def _census_or_skip(impl: str, shapes: list[tuple[int, int]], outdir: Path, *,
                    cuda_compiler: str = "auto") -> list[dict[str, Any]]:
    from harness.build.build import build_census

    try:
        return build_census("layernorm", impl, shapes, arch="sm_90", outdir=outdir,
                            cuda_compiler=cuda_compiler)
    except ToolMissing as exc:
        pytest.skip(f"{impl} census tools missing: {exc}")


@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_build_census_cuda(tmp_path: Path, compiler: str) -> None:
    from harness.build.build import CENSUS_COLUMNS

    rows = _census_or_skip("cuda", [(4096, 768), (8192, 768), (64, 771)], tmp_path,
                           cuda_compiler=compiler)
    assert [tuple(r) for r in rows] == [CENSUS_COLUMNS] * 2
    vec4, scalar = rows
    assert vec4["kernel"] == "layernorm_fwd_vec4_fixed<128, 2, true, 768>" and vec4["shapes"] == "4096x768;8192x768"
    assert vec4["compiler"].lower().startswith(compiler)
    assert "-ftz=true" in vec4["options"] and "-arch=sm_90" in vec4["options"]
    assert (vec4["ld_global_128"], vec4["ld_global_32"], vec4["st_global_128"]) == (6, 1, 2)
    assert (vec4["sass_ldg_128"], vec4["sass_stg_128"], vec4["sass_bar"]) == (6, 2, 1)
    assert (scalar["ld_global_128"], scalar["ld_global_32"], scalar["sass_ldg_128"]) == (0, 22, 0)
    for row in rows:
        assert row["registers"] > 0 and row["block"] in (128, 256, 512, 1024)
        assert (row["spill_stores"], row["spill_loads"], row["stack_bytes"], row["sass_local"]) == (0, 0, 0, 0)
        assert row["source_sha256"] == hashlib.sha256(
            (sources.kernels_dir() / "layernorm/layernorm.cu").read_bytes()).hexdigest()
    written = {p.name for p in tmp_path.iterdir()}
    for suffix in ("ptx", "sass", "ptxas.log", "res-usage.txt", "cubin"):
        assert f"cuda_layernorm_fwd_vec4_fixed_128_2_true_768.{suffix}" in written


def test_build_census_triton(tmp_path: Path) -> None:
    pytest.importorskip("triton", reason="triton is not installed")
    from harness.build.build import CENSUS_COLUMNS

    rows = _census_or_skip("triton", [(4096, 768), (64, 771)], tmp_path)
    assert [tuple(r) for r in rows] == [CENSUS_COLUMNS] * 2
    aligned, odd = rows
    assert aligned["kernel"] == "layernorm_fwd" and aligned["block"] == 128
    assert aligned["arch"].startswith("sm_90")
    assert aligned["compiler"].startswith("triton ")
    assert aligned["ld_global_128"] == 6 and aligned["sass_ldg_128"] == 6
    assert odd["ld_global_128"] == 0 and odd["ld_global_32"] > 0
    for row in rows:
        assert row["registers"] > 0 and row["spill_stores"] == 0 and row["sass_local"] == 0
    assert any(p.suffix == ".ptx" for p in tmp_path.iterdir())


def test_build_census_refuses_unknown_op_and_impl() -> None:
    from harness.build.build import build_census

    with pytest.raises(EvidenceError, match="operation"):
        build_census("nonsense", "cuda", [(8, 8)])
    with pytest.raises(EvidenceError, match="implementations"):
        build_census("layernorm", "torch", [(8, 8)])


def test_compile_offline_falls_back_to_nvcc_without_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where libnvrtc cannot be loaded (as on a machine without the CUDA runtime libraries),
    'auto' compiles with nvcc and says so; 'nvrtc' then refuses with ToolMissing."""
    if toolchain.find_tool("nvcc") is None:
        pytest.skip("nvcc is not installed")
    monkeypatch.setattr(toolchain, "load_nvrtc", lambda: None)
    build = toolchain.compile_offline("layernorm/layernorm.cu", ["layernorm_fwd_scalar<128, 1, false>"])
    assert build.compiler.startswith("nvcc ")
    assert "--device-as-default-execution-space" not in build.options
    assert build.lowered["layernorm_fwd_scalar<128, 1, false>"] in build.ptx
    assert census.parse_ptxas_log(build.ptxas_log)[build.lowered["layernorm_fwd_scalar<128, 1, false>"]].registers > 0
    with pytest.raises(ToolMissing, match="NVRTC"):
        toolchain.compile_offline("layernorm/layernorm.cu", ["layernorm_fwd_scalar<128, 1, false>"], compiler="nvrtc")


def test_census_survives_a_compile_with_an_empty_ptxas_log(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile whose log lacks the function (NVRTC on the lent H200s, for matmul.cu): registers
    and shared memory come from the cubin and 'no spills' from the SASS having no local-memory
    instruction, equal to what the log would have said."""
    from dataclasses import replace

    from harness.build import build

    normal = _census_or_skip("cuda", [(4096, 768)], tmp_path / "a")
    real = toolchain.compile_offline
    calls = []

    def empty_log(*args: Any, **kwargs: Any) -> toolchain.CudaBuild:
        # Stands in for compile_offline: whatever build_census passes goes through unchanged.
        calls.append(1)
        return replace(real(*args, **kwargs), ptxas_log="")

    monkeypatch.setattr(toolchain, "compile_offline", empty_log)
    (tmp_path / "b").mkdir()
    (row,) = build.build_census("layernorm", "cuda", [(4096, 768)], arch="sm_90", outdir=tmp_path / "b")
    assert len(calls) == 1
    for key in ("registers", "spill_stores", "spill_loads", "stack_bytes", "static_smem", "sass_local"):
        assert row[key] == normal[0][key], key


@pytest.mark.parametrize(("op", "shape", "variant"), [
    # 12 B of spills with the width read at run time (compiled in, the 32 registers hold it all)
    ("layernorm", (64, 4096), ("cuda.full_occupancy", ("-DLN_MIN_BLOCKS=-1", "-DLN_FIXED_WIDTH=0"))),
    ("matmul", (4096, 4096, 4096), None),  # matmul_f32_tiled<128, 128, 16, 8>: 36 B
])
def test_an_empty_ptxas_log_with_spills_gives_ptxas_figures(op: str, shape: tuple[int, ...], variant: tuple[str, tuple[str, ...]] | None,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the SASS has local-memory instructions, the census without a log counts the spill
    bytes from them, and they equal what ptxas's log says for the same compile."""
    from dataclasses import replace

    from harness.build import build
    from harness.build.build import build_census

    try:
        (normal,) = build_census(op, "cuda", [shape], arch="sm_90", outdir=tmp_path / "a", variant=variant)
    except ToolMissing as exc:
        pytest.skip(f"cuda census tools missing: {exc}")
    assert normal["spill_stores"] > 0 and normal["spill_loads"] > 0 and normal["sass_local"] > 0
    real = toolchain.compile_offline
    monkeypatch.setattr(toolchain, "compile_offline",
                        lambda *a, **k: replace(real(*a, **k), ptxas_log=""))
    (tmp_path / "b").mkdir()
    (row,) = build.build_census(op, "cuda", [shape], arch="sm_90", outdir=tmp_path / "b", variant=variant)
    for key in ("registers", "spill_stores", "spill_loads", "stack_bytes", "static_smem", "sass_local"):
        assert row[key] == normal[key], key


def test_local_memory_without_a_stack_frame_is_refused() -> None:
    from harness.build import build

    with pytest.raises(EvidenceError, match="no stack frame, so its spills are unknown"):
        build._ptxas_from_cubin("k", census.ResUsage(registers=40, stack=0, shared=0),
                                census.SassCounts(ldl=1, ldl_bytes=4))


def test_ptx_code_is_the_ptx_without_the_paths_of_its_source() -> None:
    a = '//\n.version 8.7\n\t.file\t1 "/work/main/kernels/x.py"\n\tld.global.f32 %f1, [%rd1];\n'
    b = '//\n.version 8.7\n\t.file\t1 "/tmp/copy/kernels/x.py"\n\tld.global.f32 %f1, [%rd1];\n'
    assert a != b and census.ptx_code(a) == census.ptx_code(b)
    assert census.ptx_code(a) != census.ptx_code(b.replace("f32 %f1", "f32 %f2"))
    debug = "\t.section\t.debug_info\n\t{\n.b32 {n} // Length of Unit\n"
    assert census.ptx_code(a + debug.replace("{n}", "209")) == census.ptx_code(b + debug.replace("{n}", "264"))
