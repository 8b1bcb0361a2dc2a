"""Our CUDA C++ kernels at run time: compile them through CuPy/NVRTC and launch them on torch
tensors.

`get_function` builds a `cupy.RawModule` from a `.cu` file under `kernels/` with `RUNTIME_OPTIONS`
and the name expressions that instantiate its templates (cached per file, options and name
expressions). `bind` fixes one launch (kernel handle, grid, block, argument tuple, the tensor the
result lands in) and returns a call that only launches, on torch's current stream at the time of
the call, and returns that tensor; `launch` is the one-off form. CuPy
adds options of its own before calling NVRTC (`harness.launch.modules.CUPY_IMPLICIT_OPTIONS`, and `-arch=sm_XX` for the
current device); the offline compile of the census (harness.build.toolchain) adds the same ones, so
that the census describes the code that runs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import EvidenceError
from harness.launch import modules, sources

if TYPE_CHECKING:
    from torch import Tensor

RUNTIME_OPTIONS: tuple[str, ...] = ("-std=c++17",)
"""Options we give NVRTC (through cupy.RawModule) for every kernel file."""



# ----------------------------------------------------------------------------- sources


def source_path(filename: str) -> Path:
    """Path of a kernel source under the `kernels/` in force (harness.launch.sources); EvidenceError
    if it does not exist."""
    path = sources.kernels_dir() / filename
    if not path.is_file():
        raise EvidenceError(f"Kernel source {path} does not exist.")
    return path


def read_source(filename: str, name_expressions: Sequence[str] = ()) -> str:
    """Text of a kernel source under the `kernels/` in force, which must define the kernel of each
    of `name_expressions` ('layernorm_fwd_vec4<128, 2, true>' needs a function
    layernorm_fwd_vec4): where it does not, one sentence (EvidenceError) says so before a compiler
    gives its log. Another revision's kernels are built and launched with its own dispatch
    (harness.ops.dispatch); where its folder holds none, with this checkout's, which may choose a
    kernel that revision does not have."""
    path = source_path(filename)
    text = path.read_text()
    missing = [name for name in dict.fromkeys(expr.split("<", 1)[0].strip() for expr in name_expressions)
               if not re.search(rf"\b{re.escape(name)}\s*\(", text)]
    if missing:
        where = "this checkout's" if not sources.tag() else f"the sources under {sources.kernels_dir().parent}"
        raise EvidenceError(f"kernels/{filename} of {where} defines no {', '.join(missing)}, which this checkout's "
                            "dispatch launches (that folder holds no dispatch of its own, harness/ops/<op>/kernels.py, "
                            "so this checkout's chose; extract the revision again, or measure the earlier choice "
                            "as a variant of this checkout).")
    return text


def source_sha256(filename: str) -> str:
    """SHA-256 (hex) of a kernel source's bytes, for provenance."""
    return hashlib.sha256(source_path(filename).read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- run time


_LOADED: dict[tuple[str, str, tuple[str, ...], str], str] = {}
"""(source, name expression, options, sources in force) -> where its module came from, for this process."""


def loaded() -> list[dict[str, str]]:
    """Every kernel module this process loaded and where from: 'build cache <key>' (the build's
    cubin, harness.launch.modules) or 'compiled' (NVRTC through CuPy, whose own disk cache may
    have answered); `at` is '' for this checkout's sources, else the name of the folder of a
    revision's (harness.baseline: its label), so a kernel of both is listed twice."""
    return [{"source": f, "kernel": e, "options": " ".join(o), "at": at, "module": how}
            for (f, e, o, at), how in _LOADED.items()]


def _at() -> str:
    tree = sources.tree()
    return "" if tree is None else tree.name


def _device_arch() -> str:
    import cupy

    return f"sm_{cupy.cuda.Device().compute_capability}"


def _nvrtc_version() -> str:
    import cupy

    major, minor = cupy.cuda.nvrtc.getVersion()
    return f"{major}.{minor}"


def built_module_key(filename: str, options: tuple[str, ...], name_expression: str, arch: str,
                     nvrtc_version: str) -> str:
    """The key under which the build keeps the module of this compile (harness.launch.modules): the
    one the build's offline compile of the same source, options and expression stores under."""
    return _module_key(read_source(filename), options, name_expression, arch, nvrtc_version)


def _module_key(source: str, options: tuple[str, ...], name_expression: str, arch: str, nvrtc_version: str) -> str:
    """built_module_key of a source's text already read."""
    return modules.key(source, modules.nvrtc_options(options, arch), name_expression, nvrtc_version, arch)


@functools.cache
def _raw_module(filename: str, options: tuple[str, ...], name_expressions: tuple[str, ...],
                tag: str) -> tuple[Any, dict[str, str]]:
    """A `cupy.RawModule` for one source (of the sources `tag` names), option set and set of name
    expressions, and the name each expression has in it (cached): the build's cubin where the
    build left one for exactly this compile (harness.launch.modules), else compiled through CuPy."""
    import cupy

    source = read_source(filename, name_expressions)
    if len(name_expressions) == 1:
        expr = name_expressions[0]
        key = _module_key(source, options, expr, _device_arch(), _nvrtc_version())
        found = modules.load(key)
        if found is not None:
            _LOADED[(filename, expr, options, _at())] = f"build cache {key[:16]}"
            return cupy.RawModule(path=str(found[0])), {expr: found[1]}
    module = cupy.RawModule(code=source, options=options, backend="nvrtc", name_expressions=name_expressions)
    for expr in name_expressions:
        _LOADED[(filename, expr, options, _at())] = "compiled"
    return module, {}


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
    module, names = _raw_module(filename, (*options, *_VARIANT_OPTIONS), (name_expression,), sources.tag())
    return module.get_function(names.get(name_expression, name_expression))


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


Launch = Callable[[], "Tensor"]
"""A bound launch: calling it launches its kernels once, asynchronously, and returns the tensor the
result lands in (the `out` it was bound to), so a caller never holds a launch where it wants data."""


class _StreamHandle:
    """The one attribute CuPy's `Function.__call__` reads of a stream object: its handle."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


def raw_stream_reader(index: int) -> Callable[[], int]:
    """A call that returns the handle of torch's current stream on device `index` (the stream a
    CUDA graph capture switches to included), at the cost of one C call."""
    import torch

    getter = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if getter is not None:
        return functools.partial(getter, index)
    return lambda: int(torch.cuda.current_stream(index).cuda_stream)


def bind(filename: str, name_expression: str, grid: tuple[int, ...], block: tuple[int, ...],
         args: Sequence[Any], device: Any, shared_mem: int = 0, *, out: Tensor) -> Launch:
    """One launch of a kernel of ours, prepared: compiled (or taken from the caches) and loaded on
    `device` now, with its grid, block and argument tuple fixed. The returned call launches on
    torch's current stream at the time of the call and returns `out` (the tensor the kernel
    writes), doing nothing else (no lookup, no context manager), so it costs what CuPy's own
    launch costs.

    Pass pointers as `pointer(t)` and scalars as sized numpy scalars (`numpy.int32`,
    `numpy.float32`): a bare Python float would be passed as a double."""
    index = device_index(device)
    with on_device(device):
        function = get_function(filename, name_expression).kernel
    return bind_function(function, grid, block, args, index, shared_mem, out=out)


def bind_function(function: Any, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
                  index: int, shared_mem: int = 0, *, out: Tensor) -> Launch:
    """`bind` for a loaded `cupy.cuda.function.Function` (a kernel of ours or an external one)."""
    import torch

    grid3 = (tuple(grid) + (1, 1))[:3]
    block3 = (tuple(block) + (1, 1))[:3]
    argv = tuple(args)
    current = raw_stream_reader(index)
    handles: dict[int, _StreamHandle] = {}

    def call() -> Tensor:
        handle = current()
        stream = handles.get(handle)
        if stream is None:
            stream = handles[handle] = _StreamHandle(handle)
        function(grid3, block3, argv, shared_mem, stream)
        return out

    if torch.cuda.device_count() == 1:
        return call

    def on_its_device() -> Tensor:  # several GPUs visible: the kernel runs where it was loaded
        with on_device(torch.device("cuda", index)):
            return call()

    return on_its_device


def sequence(*launches: Launch) -> Launch:
    """One call that makes several bound launches in order (an operation of several kernels); it
    returns what the last returns."""
    if len(launches) == 1:
        return launches[0]
    *first, last = launches

    def call() -> Tensor:
        for launch in first:
            launch()
        return last()

    return call


def nothing(out: Tensor) -> Launch:
    """The bound launch of an empty problem: no kernel runs, and the call returns `out`."""

    def empty() -> Tensor:
        return out

    return empty
