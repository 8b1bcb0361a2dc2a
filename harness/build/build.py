"""Offline build and census of our kernels: compile every specialization the configured shapes
need, without a GPU, and describe each compiled kernel function by its resource report and static
instruction counts (see harness/build/census.py: counts are of instructions in the code, not executed).

CUDA: a kernels/*.cu file through NVRTC (the compiler CuPy uses at run time, same options) or,
where libnvrtc is missing, `nvcc -ptx` + `ptxas -v`; PTX, cubin, ptxas log; SASS by cuobjdump.
Triton: `triton.compile` of an `ASTSource` with the signature, constexprs and alignment
specialization the JIT uses at run time, for `GPUTarget('cuda', <cc>, 32)`; its PTX, cubin and
the log of the ptxas run that made the cubin; SASS by cuobjdump.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness import ops
from harness.build import cache, census, toolchain
from harness.errors import EvidenceError, ToolMissing
from harness.launch import cuda as cuda_module
from harness.launch import sources
from harness.launch.instances import CudaSpec, TritonSpec, InstanceShapes

CENSUS_COLUMNS: tuple[str, ...] = (
    "op", "impl", "kernel", "specialization", "shapes", "arch", "symbol", "block",
    "registers", "spill_stores", "spill_loads", "stack_bytes", "static_smem", "dynamic_smem",
    "constant_bytes",
    "ld_global_32", "ld_global_64", "ld_global_128", "st_global_32", "st_global_64",
    "st_global_128", "ld_global_nc", "barriers", "shuffles",
    "sass_ldg_128", "sass_ldg_32", "sass_stg_128", "sass_stg_32", "sass_bar", "sass_shfl",
    "sass_local", "sass_instructions",
    "source_sha256", "sass_sha256", "compiler", "options",
)
"""Keys of every census row, in order (the same for every op and implementation)."""

IMPLS = ("cuda", "triton")


def kernels_module(op: str) -> Any:
    """The module that describes an operation's kernels in force (harness.ops.dispatch: this
    checkout's harness/ops/<op>/kernels.py, or a baseline revision's inside sources.at)."""
    if op not in ops.known():
        raise EvidenceError(f"The census knows operation(s) {', '.join(ops.known())}, not {op!r}.")
    return ops.dispatch(op)


def build_census(op: str, impl: str, shapes: Sequence[Sequence[int]], arch: str = "sm_90",
                 outdir: Path | None = None, *, cuda_compiler: str = "auto",
                 variant: tuple[str, tuple[str, ...]] | None = None,
                 sources_root: Path | None = None,
                 cache_key: Callable[[Any], str] | None = None) -> list[dict[str, Any]]:
    """Compile, offline, every specialization of `impl` that `shapes` need and return one census
    row per compiled kernel function (keys: CENSUS_COLUMNS). With `outdir`, the PTX, SASS, cubin,
    ptxas log and resource report of each specialization are written there.

    `cuda_compiler` ('auto', 'nvrtc' or 'nvcc') picks the CUDA compiler; 'auto' prefers NVRTC,
    the one CuPy uses at run time. `variant` = (implementation name, extra options) builds a named
    variant of the CUDA kernels (harness.ops.variants): the same specializations with its -D options,
    the rows named after the variant. `sources_root` builds the kernel sources under that tree's
    kernels/ (another revision's, harness.baseline) with its own dispatch where the tree holds one
    (harness.ops.dispatch). With `outdir`
    and `cache_key` (an instance -> its build cache key, harness.build.cache.key), each instance
    comes from the build cache where nothing it depends on changed, whatever other shapes the
    namespace has; each row's `build` says which ('cache <key>' or 'built'). Raises ToolMissing
    (one sentence) if no compiler or disassembler is available.
    """
    with sources.at(sources_root):
        return _build_census(op, impl, shapes, arch, outdir, cuda_compiler, variant, cache_key)


def _build_census(op: str, impl: str, shapes: Sequence[Sequence[int]], arch: str, outdir: Path | None,
                  cuda_compiler: str, variant: tuple[str, tuple[str, ...]] | None,
                  cache_key: Callable[[Any], str] | None = None) -> list[dict[str, Any]]:
    module = kernels_module(op)
    if impl not in IMPLS:
        raise EvidenceError(f"The census builds our implementations {', '.join(IMPLS)}, "
                            f"not {impl!r}.")
    if not re.fullmatch(r"sm_\d+a?", arch):
        raise EvidenceError(f"Architecture {arch!r} is not of the form sm_90.")
    if outdir is not None:
        outdir = Path(outdir)
        outdir.mkdir(parents=True, exist_ok=True)
    with cuda_module.variant_options(variant[1] if variant else ()):  # dispatch may read the defines
        plan = module.instances_for(impl, shapes)
    rows: list[dict[str, Any]] = []
    if variant is not None and impl != "cuda":
        raise EvidenceError(f"Variants vary our CUDA kernels (preprocessor defines), not {impl!r}.")
    for item in plan:
        def make(folder: Path | None, item: InstanceShapes = item) -> list[dict[str, Any]]:
            if impl == "cuda":
                return _cuda_rows(op, item, arch, folder, cuda_compiler, variant)
            return _triton_rows(op, item, arch, folder)

        if outdir is None or cache_key is None:
            rows.extend(make(outdir))
            continue
        key = cache_key(item.instance)
        got, hit = cache.built_into(key, outdir, make)
        # the rows of an instance taken from the cache name the shapes it serves here
        rows.extend({**row, "shapes": item.shapes_text, "build": cache.describe(key, hit)} for row in got)
    return rows


# ----------------------------------------------------------------------------- rows


def census_row(*, op: str, impl: str, kernel: str, item: InstanceShapes, arch: str, symbol: str,
               block: int, ptxas: census.PtxasInfo, res: census.ResUsage | None,
               ptx: census.PtxCounts, sass: census.SassCounts, dynamic_smem: int,
               source_sha256: str, sass_text: str, compiler: str, options: str) -> dict[str, Any]:
    """One census row from the parsed reports of one kernel function and the SASS of its cubin.

    Registers come from the cubin's own resource table when there is one (they equal ptxas's
    report when both exist); spills and the stack frame from ptxas's report. `sass_sha256` names
    the code the GPU runs, instruction for instruction with their encodings: two implementations
    whose rows serving a shape name the same SASS run the same code there
    (harness.tables.binaries). Not the cubin's bytes: those also hold the source's path in the line
    table, so a Triton kernel built from another folder (a baseline revision's) differs byte for
    byte while its code does not."""
    row: dict[str, Any] = {
        "op": op, "impl": impl, "kernel": kernel, "specialization": item.instance.specialization,
        "shapes": item.shapes_text, "arch": arch, "symbol": symbol, "block": block,
        "registers": res.registers if res is not None else ptxas.registers,
        "spill_stores": ptxas.spill_stores, "spill_loads": ptxas.spill_loads,
        "stack_bytes": ptxas.stack_bytes, "static_smem": ptxas.smem_bytes,
        "dynamic_smem": dynamic_smem,
        "constant_bytes": (sum(res.constant.values()) if res is not None
                           else sum(ptxas.cmem_bytes.values())),
        "ld_global_32": ptx.ld_global[32], "ld_global_64": ptx.ld_global[64],
        "ld_global_128": ptx.ld_global[128], "st_global_32": ptx.st_global[32],
        "st_global_64": ptx.st_global[64], "st_global_128": ptx.st_global[128],
        "ld_global_nc": ptx.ld_global_nc, "barriers": ptx.barriers, "shuffles": ptx.shuffles,
        "sass_ldg_128": sass.ldg[128], "sass_ldg_32": sass.ldg[32], "sass_stg_128": sass.stg[128],
        "sass_stg_32": sass.stg[32], "sass_bar": sass.bar, "sass_shfl": sass.shfl,
        "sass_local": sass.local, "sass_instructions": sass.instructions,
        "source_sha256": source_sha256, "sass_sha256": hashlib.sha256(sass_text.encode()).hexdigest(),
        "compiler": compiler, "options": options,
    }
    assert tuple(row) == CENSUS_COLUMNS
    return row


def slug(text: str) -> str:
    """A file-name-safe form of a kernel or specialization name."""
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


def artifact_stem(family: str, kernel: str, specialization: str) -> str:
    """The file stem of one build's PTX, SASS, cubin and reports in its folder: 'cuda_<kernel>' (one
    build a name expression) or 'triton_<kernel>_<specialization>' (one a specialization)."""
    return f"cuda_{slug(kernel)}" if family == "cuda" else f"triton_{slug(kernel)}_{slug(specialization)}"


def write_artifacts(outdir: Path | None, stem: str, files: dict[str, str | bytes]) -> None:
    """Write {suffix: text or bytes} as outdir/stem.suffix when outdir is given."""
    if outdir is None:
        return
    outdir.mkdir(parents=True, exist_ok=True)
    for suffix, content in files.items():
        path = outdir / f"{stem}.{suffix}"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def pick(table: dict[str, Any], symbol: str, what: str) -> Any:
    """table[symbol], or one sentence naming the table that lacks the kernel."""
    if symbol not in table:
        raise EvidenceError(f"The {what} has no entry for kernel function {symbol}.")
    return table[symbol]


# ----------------------------------------------------------------------------- CUDA


def _ptxas_from_cubin(symbol: str, res: census.ResUsage, sass: census.SassCounts) -> census.PtxasInfo:
    """ptxas's report rebuilt from the cubin, for a compile whose log lacks the function (NVRTC 13.0
    on the lent H200s returned an empty log for every compile of matmul.cu, whatever the options,
    while layernorm.cu logged normally): registers, stack and shared memory from the resource
    table, and the spill bytes as ptxas counts them, one access per local-memory instruction of the
    SASS (STL.64 is 8 bytes): our kernels keep no array in local memory, so every local access is
    a spill (tests/test_census.py checks these figures against ptxas's own log). Local instructions
    with no stack frame in the cubin are not understood, and the census refuses (EvidenceError)
    rather than guess."""
    if sass.local and not res.stack:
        raise EvidenceError(f"The ptxas log has no entry for kernel function {symbol}, and its SASS "
                            f"has {sass.local} local-memory instructions but no stack frame, so its "
                            f"spills are unknown.")
    return census.PtxasInfo(registers=res.registers, stack_bytes=res.stack,
                            smem_bytes=max(res.shared - census.SYSTEM_SMEM_BYTES, 0),
                            spill_stores=sass.stl_bytes, spill_loads=sass.ldl_bytes, entry=True)


def _cuda_rows(op: str, item: InstanceShapes, arch: str, outdir: Path | None,
               compiler: str, variant: tuple[str, tuple[str, ...]] | None = None) -> list[dict[str, Any]]:
    """Compile one CUDA specialization as CuPy would (one name expression) and census it."""
    v: CudaSpec = item.instance
    impl, extra = variant or ("cuda", ())
    build = toolchain.compile_offline(v.source, [v.kernel], arch=arch, compiler=compiler,
                                        options=(*cuda_module.RUNTIME_OPTIONS, *extra))
    symbol = build.lowered[v.kernel]
    sass_text = toolchain.disassemble(build.cubin)
    res_text = toolchain.resource_usage(build.cubin)
    write_artifacts(outdir, artifact_stem("cuda", v.kernel, v.specialization), {
        "ptx": build.ptx, "sass": sass_text, "ptxas.log": build.ptxas_log, "res-usage.txt": res_text,
        "cubin": build.cubin,
    })
    res = pick(census.parse_res_usage(res_text), symbol, "cubin resource table")
    sass = pick(census.parse_sass(sass_text), symbol, "SASS")
    ptxas = census.parse_ptxas_log(build.ptxas_log).get(symbol) or _ptxas_from_cubin(symbol, res, sass)
    row = census_row(
        op=op, impl=impl, kernel=v.kernel, item=item, arch=arch, symbol=symbol, block=v.block,
        ptxas=ptxas, res=res, ptx=pick(census.parse_ptx(build.ptx), symbol, "PTX"), sass=sass,
        dynamic_smem=v.dynamic_smem, source_sha256=cuda_module.source_sha256(v.source), sass_text=sass_text,
        compiler=build.compiler, options=" ".join(build.options))
    return [row]


# ----------------------------------------------------------------------------- Triton


def device_arch() -> str:
    """The architecture of the visible GPU as the build names it ('sm_90' for an H200)."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def triton_target(arch: str) -> tuple[str, int, int]:
    """('cuda', 90, 32) for 'sm_90' (Triton itself picks sm_90a for capability 9.0)."""
    match = re.fullmatch(r"sm_(\d+)a?", arch)
    if match is None:
        raise EvidenceError(f"Architecture {arch!r} is not of the form sm_90.")
    return "cuda", int(match.group(1)), 32


def _triton_modules() -> Any:
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:
        raise ToolMissing(f"Triton could not be imported ({exc}), so the Triton kernels cannot "
                          f"be compiled.") from None
    return triton, ASTSource, GPUTarget


def triton_ptxas(capability: int) -> Path | None:
    """The ptxas Triton uses for a target capability (its bundled one unless overridden)."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        return Path(get_ptxas(capability).path)
    except Exception:  # noqa: BLE001 - older/newer Triton: fall back to the bundled binary
        return toolchain.find_tool("ptxas")


def compile_triton(v: TritonSpec, arch: str) -> tuple[Any, str]:
    """Compile one Triton specialization offline; return (compiled kernel, ptxas log).

    The log is the one Triton's own ptxas run printed (`dump_ptxas_log`, with the cache bypassed
    so that ptxas does run); if a Triton version prints nothing, ptxas -v is re-run on the PTX.
    """
    triton, ASTSource, GPUTarget = _triton_modules()
    from triton import knobs

    source = ASTSource(fn=v.jit_function(), signature=v.signature(), constexprs=v.constexprs(),
                       attrs={(i,): [["tt.divisibility", 16]] for i in v.aligned_args()})
    target = GPUTarget(*triton_target(arch))
    printed = io.StringIO()
    with knobs.compilation.scope(), knobs.nvidia.scope(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # e.g. Triton 3.9's FP-fusion default notice
        knobs.compilation.always_compile = True
        knobs.nvidia.dump_ptxas_log = True
        with contextlib.redirect_stdout(printed):
            kernel = triton.compile(source, target=target, options=v.compile_options())
    log = printed.getvalue()
    if "registers" not in log:
        log = _rerun_ptxas(kernel.asm["ptx"], target.arch)
    return kernel, log


def _rerun_ptxas(ptx: str, capability: int) -> str:
    """ptxas -v on Triton's PTX for the target Triton uses (sm_90a for 9.0)."""
    ptxas = triton_ptxas(capability)
    if ptxas is None:
        raise ToolMissing("No ptxas was found to report the Triton kernel's resources.")
    gpu = f"sm_{capability}a" if capability >= 90 else f"sm_{capability}"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        proc = toolchain.run_tool([ptxas, "-v", "-lineinfo", f"--gpu-name={gpu}", src, "-o",
                                     Path(tmp) / "kernel.cubin"], "ptxas on Triton's PTX")
    return proc.stderr + proc.stdout


def _triton_rows(op: str, item: InstanceShapes, arch: str,
                 outdir: Path | None) -> list[dict[str, Any]]:
    """Compile one Triton specialization and census it."""
    v: TritonSpec = item.instance
    triton, _, _ = _triton_modules()
    kernel, log = compile_triton(v, arch)
    symbol = kernel.metadata.name
    ptx = kernel.asm["ptx"]
    sass_text = toolchain.disassemble(kernel.asm["cubin"])
    res_text = toolchain.resource_usage(kernel.asm["cubin"])
    write_artifacts(outdir, artifact_stem("triton", v.kernel, v.specialization), {
        "ptx": ptx, "sass": sass_text, "ptxas.log": log, "res-usage.txt": res_text,
        "cubin": kernel.asm["cubin"],
    })
    ptxas_path = triton_ptxas(triton_target(arch)[1])
    ptxas_version = toolchain.tool_version(ptxas_path) if ptxas_path else "unknown"
    compiled_for = re.search(r"for '(sm_\w+)'", log)
    row = census_row(
        op=op, impl="triton", kernel=v.kernel, item=item,
        arch=compiled_for.group(1) if compiled_for else arch, symbol=symbol, block=v.block,
        ptxas=pick(census.parse_ptxas_log(log), symbol, "ptxas log"),
        res=pick(census.parse_res_usage(res_text), symbol, "cubin resource table"),
        ptx=pick(census.parse_ptx(ptx), symbol, "PTX"),
        sass=pick(census.parse_sass(sass_text), symbol, "SASS"),
        dynamic_smem=int(kernel.metadata.shared),
        source_sha256=cuda_module.source_sha256(v.source), sass_text=sass_text,
        compiler=f"triton {triton.__version__} / ptxas {ptxas_version}",
        options=f"num_warps={v.num_warps} num_stages={kernel.metadata.num_stages} "
                f"target=cuda:{triton_target(arch)[1]}")
    return [row]
