"""The `external` implementation kind: a kernel delivered as a PTX or cubin file by any toolchain.

The config block `operations.<op>.external` names the file (relative to the repository root), its
entry function, the launch geometry and the argument order:

    {path: tests/fixtures/external/transpose_naive.ptx, entry: transpose_naive,
     grid: ["cdiv(cols, 32)", "cdiv(rows, 32)"], block: [32, 8], shared_bytes: 0,
     args: [x, out, "rows:int32", "cols:int32"]}

Grid entries are integers or expressions over the shape's named dimensions (harness.launch.exprs). An
argument is a tensor of the operation's inputs, "out", or a typed dimension or operation parameter
("rows:int32", "eps:float32"); tensors pass as their device address.

`validate_external` checks a block, `plan_launch` turns it into (grid, block, shared bytes, args)
for one call (pure), and `make_launcher` loads the module once per device through
`cupy.RawModule(path=...)` and launches on torch's current stream. The census of an external
kernel is harness.build.external's.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.errors import EvidenceError
from harness.launch import cuda as cuda_module
from harness.launch import exprs
from harness.shapes import shape_dims

KEYS = ("path", "entry", "grid", "block", "shared_bytes", "args")
"""Keys of an external block (shared_bytes is optional, default 0)."""

SUFFIXES = (".ptx", ".cubin")

SCALAR_TYPES: dict[str, tuple[str, int | None, int | None]] = {
    "int32": ("int32", -2**31, 2**31 - 1),
    "int64": ("int64", -2**63, 2**63 - 1),
    "uint32": ("uint32", 0, 2**32 - 1),
    "float32": ("float32", None, None),
    "float64": ("float64", None, None),
}
"""Argument type -> (numpy type name, smallest, largest integer value; None for floats)."""

MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_SHARED_BYTES = 227 * 1024
"""Most dynamic shared memory one block may have on sm_90 (227 KB)."""

DEFAULT_SHARED_LIMIT = 48 * 1024
"""Dynamic shared memory a kernel gets without raising its limit attribute."""

SASS_SHARED_RESERVE = 1024
"""Bytes of system shared memory `cuobjdump -res-usage` adds on sm_80+ when a kernel uses any."""

DimsOf = Callable[[Mapping[str, Any], Any], Mapping[str, int]]
"""(inputs, out) -> the shape's named dimensions."""


# ----------------------------------------------------------------------------- arguments


@dataclass(frozen=True)
class Arg:
    """One kernel argument: a tensor ('tensor', 'out') or a typed scalar ('dim', 'param')."""

    name: str
    kind: str
    type: str | None = None


def split_arg(text: Any) -> tuple[str, str | None]:
    """'rows:int32' -> ('rows', 'int32'), 'x' -> ('x', None); EvidenceError if malformed."""
    if not isinstance(text, str):
        raise EvidenceError(f"external.args entry {text!r} is not a string.")
    match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?::([a-z0-9]+))?", text)
    if match is None:
        raise EvidenceError(f"external.args entry {text!r} is not of the form name or name:type.")
    name, typ = match.group(1), match.group(2)
    if typ is not None and typ not in SCALAR_TYPES:
        raise EvidenceError(f"external.args entry {text!r} has the type {typ!r}; the types are "
                            f"{', '.join(SCALAR_TYPES)}.")
    return name, typ


def classify_args(args: Any, dim_names: Iterable[str], input_names: Iterable[str] | None = None,
                  param_names: Iterable[str] | None = None) -> tuple[Arg, ...]:
    """The args list as `Arg`s. Untyped names are tensors (an input, or 'out'); typed names are
    dimensions (first) or operation parameters. None for input_names / param_names leaves those
    names unchecked."""
    if not isinstance(args, list | tuple) or not args:
        raise EvidenceError("external.args must be a non-empty list of argument names.")
    dims = set(dim_names)
    inputs = None if input_names is None else set(input_names)
    params = None if param_names is None else set(param_names)
    out: list[Arg] = []
    for text in args:
        name, typ = split_arg(text)
        if typ is None:
            if name != "out" and inputs is not None and name not in inputs:
                raise EvidenceError(
                    f"external.args names {name!r}, which is neither an input tensor "
                    f"({', '.join(sorted(inputs)) or 'none'}) nor 'out'; a dimension or parameter "
                    f"needs a type, as in '{name}:int32'.")
            out.append(Arg(name, "out" if name == "out" else "tensor"))
        elif name == "out" or (inputs is not None and name in inputs and name not in dims):
            raise EvidenceError(f"external.args entry {text!r} gives the tensor {name!r} a type; "
                                f"tensors pass as pointers and take none.")
        elif name in dims:
            out.append(Arg(name, "dim", typ))
        elif params is not None and name not in params:
            raise EvidenceError(
                f"external.args entry {text!r} names neither a dimension "
                f"({', '.join(sorted(dims)) or 'none'}) nor an operation parameter "
                f"({', '.join(sorted(params)) or 'none'}).")
        else:
            out.append(Arg(name, "param", typ))
    if not any(a.kind == "out" for a in out):
        raise EvidenceError("external.args does not pass 'out', so the kernel could not write "
                            "the result.")
    return tuple(out)


def scalar(value: Any, typ: str, what: str) -> Any:
    """A sized numpy scalar of `typ` holding `value`; EvidenceError if it does not fit."""
    import numpy

    np_name, low, high = SCALAR_TYPES[typ]
    if isinstance(value, bool) or not isinstance(value, int | float | numpy.integer | numpy.floating):
        raise EvidenceError(f"{what} is {value!r}, which is not a number.")
    if low is None or high is None:
        return getattr(numpy, np_name)(float(value))
    if not float(value).is_integer():
        raise EvidenceError(f"{what} is {value!r}, but {typ} needs an integer.")
    number = int(value)
    if not low <= number <= high:
        raise EvidenceError(f"{what} is {number}, outside the range of {typ}.")
    return getattr(numpy, np_name)(number)


# ----------------------------------------------------------------------------- validation


def resolve_path(path: Any, root: Path = ROOT) -> Path:
    """The absolute path of the block's file: relative to `root`, inside it, a .ptx or .cubin file
    that exists; EvidenceError otherwise."""
    if not isinstance(path, str) or not path:
        raise EvidenceError(f"external.path {path!r} is not a file name.")
    base = Path(root).resolve()
    full = (base / path).resolve()
    if Path(path).is_absolute() or not full.is_relative_to(base):
        raise EvidenceError(f"external.path {path!r} leads outside the repository; give a path "
                            f"relative to {base}.")
    if full.suffix not in SUFFIXES:
        raise EvidenceError(f"external.path {path!r} is neither a .ptx nor a .cubin file.")
    if not full.is_file():
        raise EvidenceError(f"external.path {path!r} does not exist under {base}.")
    return full


def check_entry(entry: Any, full: Path) -> str:
    """The entry name, checked to be an identifier the file defines."""
    if not isinstance(entry, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]{0,200}", entry):
        raise EvidenceError(f"external.entry {entry!r} is not a kernel function name.")
    data = full.read_bytes()
    if full.suffix == ".ptx":
        found = re.search(rb"\.entry\s+" + re.escape(entry.encode()) + rb"\s*\(", data)
    else:
        found = re.search(rb"(?:^|\x00)" + re.escape(entry.encode()) + rb"\x00", data)
    if not found:
        raise EvidenceError(f"external.entry {entry!r} is not an entry function of "
                            f"{full.name}.")
    return entry


def check_block(block: Any) -> tuple[int, int, int]:
    """The block as a 3-tuple of positive ints within CUDA's limits."""
    if (not isinstance(block, list | tuple) or not 1 <= len(block) <= 3
            or any(type(b) is not int or b < 1 for b in block)):
        raise EvidenceError(f"external.block {block!r} must be 1 to 3 positive integers.")
    full = (*block, *(1,) * (3 - len(block)))
    if any(b > m for b, m in zip(full, MAX_BLOCK, strict=True)) or math.prod(full) > MAX_THREADS:
        raise EvidenceError(f"external.block {list(block)} exceeds CUDA's limits (x, y <= 1024, "
                            f"z <= 64, at most {MAX_THREADS} threads).")
    return full  # type: ignore[return-value]


def check_shared(shared: Any) -> int:
    if type(shared) is not int or not 0 <= shared <= MAX_SHARED_BYTES:
        raise EvidenceError(f"external.shared_bytes {shared!r} must be an integer from 0 to "
                            f"{MAX_SHARED_BYTES}.")
    return shared


def _check_grid(grid: Any, dim_names: Iterable[str]) -> None:
    if not isinstance(grid, list | tuple) or not 1 <= len(grid) <= 3:
        raise EvidenceError(f"external.grid {grid!r} must be a list of 1 to 3 entries.")
    for i, entry in enumerate(grid):
        if type(entry) is int:
            if entry < 1:
                raise EvidenceError(f"external.grid[{i}] is {entry}, but must be positive.")
        elif isinstance(entry, str):
            try:
                exprs.check(entry, dim_names)
            except ValueError as exc:
                raise EvidenceError(f"external.grid[{i}]: {exc}") from None
        else:
            raise EvidenceError(f"external.grid[{i}] {entry!r} is neither an integer nor an "
                                f"expression string.")


def validate_external(ext_cfg: Any, dim_names: Iterable[str],
                      input_names: Iterable[str] | None = None,
                      param_names: Iterable[str] | None = None, *, root: Path = ROOT) -> None:
    """Check an external block; EvidenceError (one sentence naming the field) if anything is
    wrong. input_names / param_names of None leave tensor and parameter names unchecked."""
    if not isinstance(ext_cfg, Mapping):
        raise EvidenceError("The external block must be a mapping with path, entry, grid, block "
                            "and args.")
    unknown = sorted(set(ext_cfg) - set(KEYS))
    missing = [k for k in KEYS if k != "shared_bytes" and k not in ext_cfg]
    if unknown or missing:
        raise EvidenceError(f"The external block has the unknown key {unknown[0]!r}." if unknown
                            else f"The external block lacks the key {missing[0]!r}.")
    dim_names = tuple(dim_names)
    full = resolve_path(ext_cfg["path"], root)
    check_entry(ext_cfg["entry"], full)
    _check_grid(ext_cfg["grid"], dim_names)
    check_block(ext_cfg["block"])
    check_shared(ext_cfg.get("shared_bytes", 0))
    classify_args(ext_cfg["args"], dim_names, input_names, param_names)


# ----------------------------------------------------------------------------- launch plan


def plan_launch(ext_cfg: Mapping[str, Any], shape_dims: Mapping[str, int],
                inputs: Mapping[str, Any], out: Any, params: Mapping[str, Any]
                ) -> tuple[tuple[int, int, int], tuple[int, int, int], int, tuple[Any, ...]]:
    """(grid, block, shared bytes, args) of one launch: grid expressions evaluated over the
    shape's dimensions, tensors as `numpy.uint64` addresses, scalars as sized numpy scalars."""
    grid = _grid(ext_cfg["grid"], shape_dims)
    block = check_block(ext_cfg["block"])
    shared = check_shared(ext_cfg.get("shared_bytes", 0))
    args: list[Any] = []
    for arg in classify_args(ext_cfg["args"], shape_dims, inputs, None):
        args.append(_arg_value(arg, shape_dims, inputs, out, params))
    return grid, block, shared, tuple(args)


def _grid(grid: Any, shape_dims: Mapping[str, int]) -> tuple[int, int, int]:
    _check_grid(grid, shape_dims)
    values = []
    for i, entry in enumerate(grid):
        try:
            value = exprs.evaluate(entry, shape_dims)
        except ValueError as exc:
            raise EvidenceError(f"external.grid[{i}]: {exc}") from None
        if not 1 <= value <= MAX_GRID[i]:
            raise EvidenceError(f"external.grid[{i}] {entry!r} is {value} for dimensions "
                                f"{dict(shape_dims)}, outside 1..{MAX_GRID[i]}.")
        values.append(value)
    return (*values, *(1,) * (3 - len(values)))  # type: ignore[return-value]


def _arg_value(arg: Arg, shape_dims: Mapping[str, int], inputs: Mapping[str, Any], out: Any,
               params: Mapping[str, Any]) -> Any:
    import numpy

    if arg.kind == "out":
        return numpy.uint64(out.data_ptr())
    if arg.kind == "tensor":
        return numpy.uint64(inputs[arg.name].data_ptr())
    assert arg.type is not None
    if arg.kind == "dim":
        return scalar(shape_dims[arg.name], arg.type, f"dimension {arg.name}")
    if arg.name not in params:
        raise EvidenceError(f"external.args passes the parameter {arg.name!r}, which the "
                            f"operation's config block does not have.")
    return scalar(params[arg.name], arg.type, f"parameter {arg.name}")


def dims_from_shape(shape: str, dim_names: Sequence[str]) -> dict[str, int]:
    """{'rows': 4096, 'cols': 768} from '4096x768' and ('rows', 'cols'); tags are dropped."""

    dims = shape_dims(shape)  # an empty problem's zero included (an operation's edge shape)
    if len(dims) != len(dim_names):
        raise EvidenceError(f"Shape {shape!r} has {len(dims)} dimensions, but the operation names "
                            f"{len(dim_names)} ({', '.join(dim_names)}).")
    return dict(zip(dim_names, dims, strict=True))


def first_input_dims(dim_names: Sequence[str], inputs: Mapping[str, Any]) -> dict[str, int]:
    """The dimensions read off the first input tensor's shape, when its rank equals the number of
    dimension names (layer norm, softmax and transpose, whose shape string is x's shape)."""
    first = next(iter(inputs.values()), None)
    shape = tuple(getattr(first, "shape", ()))
    if not dim_names or len(shape) != len(dim_names):
        raise EvidenceError(
            f"The external launcher cannot tell the dimensions {', '.join(dim_names) or '(none)'} "
            f"from the first input's shape {shape}; give make_launcher a dims_of function or call "
            f"it with dims=.")
    return {name: int(d) for name, d in zip(dim_names, shape, strict=True)}


# ----------------------------------------------------------------------------- run time


@functools.cache
def _module(path: str, device: int) -> Any:
    """The `cupy.RawModule` of one PTX or cubin file, loaded on one device (cached)."""
    import cupy

    with cupy.cuda.Device(device):
        return cupy.RawModule(path=path)


@functools.cache
def _kernel(path: str, entry: str, device: int, shared: int) -> Any:
    """The entry function on one device, its dynamic shared-memory limit raised if needed."""
    import cupy

    with cupy.cuda.Device(device):
        kernel = _module(path, device).get_function(entry)
        if shared > DEFAULT_SHARED_LIMIT:
            kernel.max_dynamic_shared_size_bytes = shared
    return kernel


class ExternalLauncher:
    """Launches an external kernel: `launcher.bind(inputs, out, params, dims=None)` checks and
    plans one launch and returns the call that makes it; `launcher(inputs, out, params, dims=None)`
    binds and launches once, returning out.

    The shape's dimensions come from `dims` when given, else from `dims_of(inputs, out)`, else
    from the first input's shape (see `first_input_dims`)."""

    def __init__(self, op_name: str, ext_cfg: Mapping[str, Any], dim_names: Sequence[str],
                 dims_of: DimsOf | None = None, root: Path = ROOT) -> None:
        validate_external(ext_cfg, dim_names, root=root)
        self.op_name = op_name
        self.ext_cfg = dict(ext_cfg)
        self.dim_names = tuple(dim_names)
        self.dims_of = dims_of
        self.path = str(resolve_path(ext_cfg["path"], root))
        self.tensor_names = [a.name for a in classify_args(ext_cfg["args"], dim_names)
                             if a.kind == "tensor"]

    def dims(self, inputs: Mapping[str, Any], out: Any) -> dict[str, int]:
        """The shape's named dimensions for one call."""
        if self.dims_of is not None:
            return dict(self.dims_of(inputs, out))
        return first_input_dims(self.dim_names, inputs)

    def __call__(self, inputs: Mapping[str, Any], out: Any, params: Mapping[str, Any],
                 dims: Mapping[str, int] | None = None) -> Any:
        self.bind(inputs, out, params, dims)()
        return out

    def bind(self, inputs: Mapping[str, Any], out: Any, params: Mapping[str, Any],
             dims: Mapping[str, int] | None = None) -> cuda_module.Launch:
        dims = dict(dims) if dims is not None else self.dims(inputs, out)
        missing = [d for d in self.dim_names if d not in dims]
        if missing:
            raise EvidenceError(f"The external launcher got no value for the dimension "
                                f"{missing[0]!r}.")
        self._check_tensors(inputs, out)
        if out.numel() == 0:  # an empty problem: no kernel runs (its grid would hold a zero)
            return cuda_module.nothing(out)
        grid, block, shared, args = plan_launch(self.ext_cfg, dims, inputs, out, params)
        index = cuda_module.device_index(out.device)
        kernel = _kernel(self.path, self.ext_cfg["entry"], index, shared)
        with cuda_module.on_device(out.device):
            function = kernel.kernel
        return cuda_module.bind_function(function, grid, block, args, index, shared, out=out)

    def _check_tensors(self, inputs: Mapping[str, Any], out: Any) -> None:
        """One-sentence EvidenceError unless every tensor argument is a contiguous CUDA tensor on
        out's device."""
        import torch

        for name in self.tensor_names:
            if name not in inputs:
                raise EvidenceError(f"external.args names {name!r}, but operation "
                                    f"{self.op_name!r} has inputs {', '.join(inputs)}.")
        for name, t in [*((n, inputs[n]) for n in self.tensor_names), ("out", out)]:
            if not isinstance(t, torch.Tensor):
                raise EvidenceError(f"External argument {name} is a {type(t).__name__}, not a "
                                    f"tensor.")
            if t.device.type != "cuda" or t.device != out.device:
                raise EvidenceError(f"External argument {name} is on {t.device}, but every tensor "
                                    f"must be on out's CUDA device ({out.device}).")
            if not t.is_contiguous():
                raise EvidenceError(f"External argument {name} is not contiguous.")


def make_launcher(op: Any, ext_cfg: Mapping[str, Any], dim_names: Sequence[str] | None = None,
                  *, dims_of: DimsOf | None = None, root: Path = ROOT) -> ExternalLauncher:
    """The launch function of an operation's external kernel (validated now, loaded on first use).

    `op` is an `Operation` or its name; `dim_names` defaults to `op.dim_names`, `dims_of` to
    `op.dims_of` where the operation has one."""
    names = tuple(dim_names if dim_names is not None else getattr(op, "dim_names", ()) or ())
    if not names:
        raise EvidenceError(f"Operation {getattr(op, 'name', op)!r} names no dimensions, so its "
                            f"external launch geometry cannot be evaluated.")
    return ExternalLauncher(getattr(op, "name", str(op)), ext_cfg, names,
                            dims_of or getattr(op, "dims_of", None), root)
