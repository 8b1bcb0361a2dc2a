"""Our CUDA C++ kernels: compile them at run time through CuPy/NVRTC and launch them on torch
tensors, or compile them offline (no GPU needed) for the census.

Run time: `get_function` builds a `cupy.RawModule` from a `.cu` file under `kernels/` with
`RUNTIME_OPTIONS` and the name expressions that instantiate its templates (cached per file,
options and name expressions), and `launch` runs a kernel on torch's current stream of the
tensors' device. CuPy adds options of its own before calling NVRTC (`CUPY_IMPLICIT_OPTIONS`, and
`-arch=sm_XX` for the current device); the offline compile adds the same ones, so that the census
describes the code that runs.

Offline: `compile_offline` compiles the same source with the same options to PTX, a cubin and the
ptxas resource report, through NVRTC when its library can be loaded (the compiler CuPy uses) and
otherwise through `nvcc -ptx` plus `ptxas -v` with equivalent options; `CudaBuild.compiler` says
which. NVRTC is called through ctypes because CuPy's wrapper returns the cubin one byte short
(CuPy 14.2; the driver tolerates it, cuobjdump does not).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.errors import EvidenceError, ToolMissing

KERNELS_DIR = ROOT / "kernels"
"""Folder holding the `.cu` sources."""

RUNTIME_OPTIONS: tuple[str, ...] = ("-std=c++17",)
"""Options we give NVRTC (through cupy.RawModule) for every kernel file."""

CUPY_IMPLICIT_OPTIONS: tuple[str, ...] = ("-ftz=true", "--device-as-default-execution-space")
"""Options CuPy 13/14 appends for NVRTC on its own (besides `-arch` and `--pch`, which changes no
code): the census compile adds them too, since `-ftz=true` changes the generated code."""

NVCC_DROPPED_OPTIONS: frozenset[str] = frozenset({"--device-as-default-execution-space"})
"""NVRTC-only options with no nvcc counterpart (our sources mark every function explicitly)."""


# ----------------------------------------------------------------------------- sources


def source_path(filename: str) -> Path:
    """Path of a kernel source under `kernels/`; EvidenceError if it does not exist."""
    path = KERNELS_DIR / filename
    if not path.is_file():
        raise EvidenceError(f"Kernel source {path} does not exist.")
    return path


def read_source(filename: str) -> str:
    """Text of a kernel source under `kernels/`."""
    return source_path(filename).read_text()


def source_sha256(filename: str) -> str:
    """SHA-256 (hex) of a kernel source's bytes, for provenance."""
    return hashlib.sha256(source_path(filename).read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- run time


@functools.cache
def _raw_module(filename: str, options: tuple[str, ...], name_expressions: tuple[str, ...]) -> Any:
    """A `cupy.RawModule` for one source, option set and set of name expressions (cached)."""
    import cupy

    return cupy.RawModule(code=read_source(filename), options=options, backend="nvrtc",
                          name_expressions=name_expressions)


_VARIANT_OPTIONS: tuple[str, ...] = ()
"""Options of the kernel variant being launched (see `variant_options`), appended to every build."""


@contextlib.contextmanager
def variant_options(options: tuple[str, ...]) -> Any:
    """Within this block, `get_function` builds with `options` added (a variant's -D defines), so a
    variant launches through the base implementation's launcher unchanged."""
    global _VARIANT_OPTIONS
    saved, _VARIANT_OPTIONS = _VARIANT_OPTIONS, tuple(options)
    try:
        yield
    finally:
        _VARIANT_OPTIONS = saved


def active_defines() -> dict[str, str]:
    """The -DNAME=value defines of the variant being launched or built (empty for a base
    implementation): host-side dispatch that depends on a variant's switches reads them here."""
    out = {}
    for option in _VARIANT_OPTIONS:
        if option.startswith("-D"):
            name, _, value = option[2:].partition("=")
            out[name] = value or "1"
    return out


def dispatch_define(name: str, valid: Callable[[str], bool], expected: str, what: str) -> str | None:
    """The value the variant being launched or built gives the define `name` (None where it gives
    none), for a host dispatch that reads it; EvidenceError naming `what`'s switch and `expected`
    when the value is not `valid`."""
    value = active_defines().get(name)
    if value is not None and not valid(value):
        raise EvidenceError(f"{what} switch {name} is {value!r}, but must be {expected}.")
    return value


def get_function(filename: str, name_expression: str,
                 options: tuple[str, ...] = RUNTIME_OPTIONS) -> Any:
    """The `cupy.RawKernel` for one name expression (e.g. "layernorm_fwd_vec4<128, 2>").

    The module holding it is compiled once per process for (file, options, name expression), on
    CuPy's current device when first used; CuPy also keeps compiled cubins in its disk cache.
    Inside `variant_options(...)` the variant's options are added.
    """
    module = _raw_module(filename, (*options, *_VARIANT_OPTIONS), (name_expression,))
    return module.get_function(name_expression)


def pointer(tensor: Any) -> Any:
    """A torch tensor's device address as a kernel argument (`numpy.uint64`)."""
    import numpy

    return numpy.uint64(tensor.data_ptr())


def device_index(device: Any) -> int:
    """The index of a torch CUDA device (the current one if the device has no index)."""
    import torch

    return device.index if device.index is not None else torch.cuda.current_device()


def on_device(device: Any) -> Any:
    """Context manager making a torch CUDA device CuPy's current device (kernels compile and
    load per device, so get functions and launch inside it)."""
    import cupy

    return cupy.cuda.Device(device_index(device))


def launch(kernel: Any, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
           device: Any, shared_mem: int = 0) -> None:
    """Launch a CuPy kernel on torch's current stream of `device` (a torch CUDA device).

    Pass pointers as `pointer(t)` and scalars as sized numpy scalars (`numpy.int32`,
    `numpy.float32`): a bare Python float would be passed as a double.
    """
    import torch

    index = device_index(device)
    with on_device(device), _cupy_stream(torch.cuda.current_stream(index), index):
        kernel(grid, block, tuple(args), shared_mem=shared_mem)


_STREAMS: dict[tuple[int, int], Any] = {}


def _cupy_stream(torch_stream: Any, index: int) -> Any:
    """A CuPy stream object for a torch CUDA stream (cached per device and handle).

    CuPy 14 prefers `Stream.from_external` (CUDA stream protocol, which recent torch streams
    implement); `ExternalStream(handle, device)` is the deprecated fallback.
    """
    import cupy

    key = (index, int(torch_stream.cuda_stream))
    stream = _STREAMS.get(key)
    if stream is None:
        if hasattr(cupy.cuda.Stream, "from_external") and hasattr(torch_stream, "__cuda_stream__"):
            stream = cupy.cuda.Stream.from_external(torch_stream)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                stream = cupy.cuda.ExternalStream(key[1], index)
        _STREAMS[key] = stream
    return stream


# ----------------------------------------------------------------------------- tools


def find_tool(name: str) -> Path | None:
    """An NVIDIA command-line tool: PATH, then $CUDA_HOME/bin, /usr/local/cuda/bin, then the copy
    bundled with Triton's wheel (ptxas, cuobjdump, nvdisasm); None if nowhere."""
    found = shutil.which(name)
    if found:
        return Path(found)
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in homes:
        if home and (Path(home) / "bin" / name).is_file():
            return Path(home) / "bin" / name
    bundled = triton_bin_dir()
    if bundled is not None and (bundled / name).is_file():
        return bundled / name
    return None


def triton_bin_dir() -> Path | None:
    """The `backends/nvidia/bin` folder of the installed Triton wheel, without importing Triton."""
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "backends" / "nvidia" / "bin"
    return path if path.is_dir() else None


def require_tool(name: str) -> Path:
    """Like `find_tool`, but raises ToolMissing."""
    path = find_tool(name)
    if path is None:
        raise ToolMissing(f"The NVIDIA tool '{name}' was not found on PATH, in CUDA_HOME or "
                          f"/usr/local/cuda, nor in Triton's wheel.")
    return path


def tool_version(path: Path) -> str:
    """'13.0.88' from an NVIDIA tool's `--version` text ('V13.0.88'); 'unknown' if absent."""
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True).stdout
    match = re.search(r"\bV(\d+\.\d+\.\d+)", out)
    return match.group(1) if match else "unknown"


def run_tool(args: Sequence[str | Path], what: str) -> subprocess.CompletedProcess[str]:
    """Run a tool; EvidenceError naming `what` and the tool's last line on failure."""
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise EvidenceError(f"{what} failed with exit code {proc.returncode}: {tail[0]}")
    return proc


def disassemble(cubin: bytes) -> str:
    """SASS of a cubin as printed by `cuobjdump -sass`."""
    cuobjdump = require_tool("cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return run_tool([cuobjdump, "-sass", path], "cuobjdump -sass").stdout


def resource_usage(cubin: bytes) -> str:
    """The `cuobjdump -res-usage` report of a cubin (registers, stack, shared, local, constant)."""
    cuobjdump = require_tool("cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return run_tool([cuobjdump, "-res-usage", path], "cuobjdump -res-usage").stdout


# ----------------------------------------------------------------------------- NVRTC


class _Nvrtc:
    """Minimal ctypes binding of the NVRTC library (the one CuPy would load)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def check(self, status: int, what: str) -> None:
        """Raise EvidenceError if an NVRTC call failed."""
        if status != 0:
            msg = self.lib.nvrtcGetErrorString(status).decode()
            raise EvidenceError(f"NVRTC {what} failed: {msg}.")

    def version(self) -> tuple[int, int]:
        """(major, minor) of the loaded NVRTC."""
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "version")
        return major.value, minor.value

    def _bytes(self, prog: ctypes.c_void_p, size_fn: str, get_fn: str) -> bytes:
        size = ctypes.c_size_t()
        self.check(getattr(self.lib, size_fn)(prog, ctypes.byref(size)), size_fn)
        buf = ctypes.create_string_buffer(size.value)
        self.check(getattr(self.lib, get_fn)(prog, buf), get_fn)
        return buf.raw[: size.value]

    def compile(self, source: str, filename: str, options: Sequence[str],
                name_expressions: Sequence[str]) -> tuple[str, bytes, str, dict[str, str]]:
        """Compile; return (PTX, cubin, program log, name expression -> lowered name)."""
        prog = ctypes.c_void_p()
        self.check(self.lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(),
                                               filename.encode(), 0, None, None), "createProgram")
        try:
            for expr in name_expressions:
                self.check(self.lib.nvrtcAddNameExpression(prog, expr.encode()), "addNameExpression")
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            status = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            log = self._bytes(prog, "nvrtcGetProgramLogSize", "nvrtcGetProgramLog")
            log_text = log.rstrip(b"\0").decode(errors="replace")
            if status != 0:
                raise EvidenceError(f"NVRTC could not compile {filename}: "
                                    f"{_first_error(log_text)}")
            ptx = self._bytes(prog, "nvrtcGetPTXSize", "nvrtcGetPTX").rstrip(b"\0").decode()
            cubin = self._bytes(prog, "nvrtcGetCUBINSize", "nvrtcGetCUBIN")
            lowered: dict[str, str] = {}
            for expr in name_expressions:
                name = ctypes.c_char_p()
                self.check(self.lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(name)),
                           "getLoweredName")
                lowered[expr] = (name.value or b"").decode()
            return ptx, cubin, log_text, lowered
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _first_error(log: str) -> str:
    """The first error line of a compiler log, or its first line."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln]
    return (errors or lines or ["no log"])[0]


@functools.lru_cache(maxsize=1)
def load_nvrtc() -> _Nvrtc | None:
    """The NVRTC library CuPy would use (found by cuda.pathfinder, else by soname); None if none."""
    candidates: list[str] = []
    try:
        import cuda.pathfinder as pathfinder  # shipped with CuPy 14

        candidates.append(pathfinder.load_nvidia_dynamic_lib("nvrtc").abs_path)
    except Exception:  # noqa: BLE001 - any failure just means "try the sonames"
        pass
    candidates += ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    for name in candidates:
        try:
            return _Nvrtc(ctypes.CDLL(name))
        except OSError:
            continue
    return None


# ----------------------------------------------------------------------------- offline builds


@dataclass(frozen=True)
class CudaBuild:
    """One offline compile of a kernel source for some name expressions."""

    compiler: str
    """Name and version of what produced the code, e.g. 'NVRTC 13.0' or 'nvcc 13.0.88 + ptxas
    13.0.88'."""
    options: tuple[str, ...]
    """Options as given to the compiler (without the file names)."""
    arch: str
    ptx: str
    cubin: bytes
    ptxas_log: str
    """ptxas's `-v` report: per function registers, spills, stack frame, smem, cmem."""
    lowered: dict[str, str] = field(default_factory=dict)
    """Name expression -> mangled function name in the PTX and cubin."""


def census_options(options: Sequence[str], arch: str) -> tuple[str, ...]:
    """The NVRTC options of the runtime compile: ours, CuPy's implicit ones and the arch."""
    extra = [o for o in CUPY_IMPLICIT_OPTIONS if o not in options]
    return (*options, *extra, f"-arch={arch}")


def compile_offline(filename: str, name_expressions: Sequence[str], arch: str = "sm_90",
                    options: Sequence[str] = RUNTIME_OPTIONS,
                    compiler: str = "auto") -> CudaBuild:
    """Compile a kernel source to PTX and a cubin without a GPU.

    `compiler` is 'nvrtc', 'nvcc' or 'auto' (NVRTC when its library loads, else nvcc). Raises
    ToolMissing if the chosen compiler is not available.
    """
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise EvidenceError(f"Architecture {arch!r} is not of the form sm_90.")
    opts = census_options(options, arch)
    if compiler in ("auto", "nvrtc"):
        nvrtc = load_nvrtc()
        if nvrtc is not None:
            return _compile_nvrtc(nvrtc, filename, name_expressions, arch, opts)
        if compiler == "nvrtc":
            raise ToolMissing("The NVRTC library (libnvrtc) could not be loaded.")
    if compiler not in ("auto", "nvcc"):
        raise EvidenceError(f"Unknown compiler {compiler!r}; use 'nvrtc', 'nvcc' or 'auto'.")
    if find_tool("nvcc") is None:
        raise ToolMissing("Neither the NVRTC library nor nvcc was found, so CUDA kernels cannot "
                          "be compiled.")
    return _compile_nvcc(filename, name_expressions, arch, opts)


def _compile_nvrtc(nvrtc: _Nvrtc, filename: str, name_expressions: Sequence[str], arch: str,
                   opts: tuple[str, ...]) -> CudaBuild:
    """NVRTC with -arch=sm_XX: PTX, the cubin CuPy would load, and ptxas's -v log."""
    full = (*opts, "-Xptxas=-v")
    ptx, cubin, log, lowered = nvrtc.compile(read_source(filename), filename, full,
                                             name_expressions)
    major, minor = nvrtc.version()
    return CudaBuild(compiler=f"NVRTC {major}.{minor}", options=full, arch=arch, ptx=ptx,
                     cubin=cubin, ptxas_log=log, lowered=lowered)


def _instantiations(name_expressions: Sequence[str]) -> str:
    """Host code that instantiates each kernel template (nvcc has no name expressions)."""
    refs = ", ".join(f"(void*)&{expr}" for expr in name_expressions)
    return f"\n[[maybe_unused]] static void* const census_instances[] = {{ {refs} }};\n"


def _compile_nvcc(filename: str, name_expressions: Sequence[str], arch: str,
                  opts: tuple[str, ...]) -> CudaBuild:
    """nvcc -ptx with the NVRTC options it understands, then ptxas -v to a cubin."""
    nvcc = require_tool("nvcc")
    ptxas = require_tool("ptxas")
    nvcc_opts = tuple(o for o in opts if o not in NVCC_DROPPED_OPTIONS)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / filename
        src.write_text(read_source(filename) + _instantiations(name_expressions))
        ptx_path, cubin_path = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        run_tool([nvcc, "-ptx", *nvcc_opts, src, "-o", ptx_path], f"nvcc -ptx {filename}")
        proc = run_tool([ptxas, "-v", f"-arch={arch}", ptx_path, "-o", cubin_path],
                        f"ptxas {filename}")
        ptx, cubin = ptx_path.read_text(), cubin_path.read_bytes()
    lowered = lowered_names_from_ptx(ptx, name_expressions)
    compiler = f"nvcc {tool_version(nvcc)} + ptxas {tool_version(ptxas)}"
    return CudaBuild(compiler=compiler, options=nvcc_opts,
                     arch=arch, ptx=ptx, cubin=cubin, ptxas_log=proc.stderr + proc.stdout,
                     lowered=lowered)


def lowered_names_from_ptx(ptx: str, name_expressions: Sequence[str]) -> dict[str, str]:
    """Map name expressions to the mangled entry names in PTX by demangling them with c++filt."""
    entries = re.findall(r"\.entry\s+([A-Za-z_$][\w$]*)", ptx)
    filt = shutil.which("cu++filt") or shutil.which("c++filt")
    if filt is None:
        raise ToolMissing("c++filt was not found, so nvcc's mangled kernel names cannot be mapped.")
    demangled = subprocess.run([filt], input="\n".join(entries), capture_output=True,
                               text=True, check=True).stdout.splitlines()
    by_name = {_strip_signature(d): m for d, m in zip(demangled, entries, strict=True)}
    lowered: dict[str, str] = {}
    for expr in name_expressions:
        key = expr.replace(" ", "")
        if key not in by_name:
            raise EvidenceError(f"nvcc produced no entry function for {expr!r}.")
        lowered[expr] = by_name[key]
    return lowered


def _strip_signature(demangled: str) -> str:
    """'void f<128, 2>(float const*, int)' -> 'f<128,2>'."""
    text = demangled.strip()
    if text.startswith("void "):
        text = text[len("void "):]
    depth = 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            text = text[:i]
            break
    return text.replace(" ", "")
