"""Compile our CUDA C++ kernels offline (no GPU needed) for the census: PTX, a cubin and the
ptxas resource report, with the options the run-time compile uses (harness.launch.cuda).

`compile_offline` goes through NVRTC when its library can be loaded (the compiler CuPy uses) and
otherwise through `nvcc -ptx` plus `ptxas -v` with equivalent options; `CudaBuild.compiler` says
which. NVRTC is called through ctypes because CuPy's wrapper returns the cubin one byte short
(CuPy 14.2; the driver tolerates it, cuobjdump does not).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import EvidenceError, ToolMissing
from harness.launch import modules
from harness.launch.cuda import RUNTIME_OPTIONS, read_source

NVCC_DROPPED_OPTIONS: frozenset[str] = frozenset({"--device-as-default-execution-space"})
"""NVRTC-only options with no nvcc counterpart (our sources mark every function explicitly)."""


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


_DUMPS: dict[tuple[str, str, str], str] = {}


def _cuobjdump(cubin: bytes, flag: str) -> str:
    """What `cuobjdump <flag>` prints for a cubin, once per process for each distinct cubin: the
    disassembler costs about 0.4 s a call whatever the cubin's size, and a variant whose defines
    leave an instance as it was compiles to its base's cubin byte for byte."""
    cuobjdump = require_tool("cuobjdump")
    key = (str(cuobjdump), flag, hashlib.sha256(cubin).hexdigest())
    if key not in _DUMPS:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "kernel.cubin"
            path.write_bytes(cubin)
            _DUMPS[key] = run_tool([cuobjdump, flag, path], f"cuobjdump {flag}").stdout
    return _DUMPS[key]


def disassemble(cubin: bytes) -> str:
    """SASS of a cubin as printed by `cuobjdump -sass`."""
    return _cuobjdump(cubin, "-sass")


def resource_usage(cubin: bytes) -> str:
    """The `cuobjdump -res-usage` report of a cubin (registers, stack, shared, local, constant)."""
    return _cuobjdump(cubin, "-res-usage")


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
    return modules.nvrtc_options(options, arch)


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
    full = (*opts, "-Xptxas=-v")  # -v only reports: the code is the run-time compile's
    source = read_source(filename, name_expressions)
    ptx, cubin, log, lowered = nvrtc.compile(source, filename, full, name_expressions)
    major, minor = nvrtc.version()
    if len(name_expressions) == 1:  # the run loads this cubin instead of compiling it again
        expr = name_expressions[0]
        modules.store(modules.key(source, opts, expr, f"{major}.{minor}", arch), cubin, lowered[expr])
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
        src = Path(tmp) / Path(filename).name
        src.write_text(read_source(filename, name_expressions) + _instantiations(name_expressions))
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
