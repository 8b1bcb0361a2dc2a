"""The operations the pipeline measures, one folder each.

An operation is the folder `harness/ops/<name>/` (its inputs, float64 reference, tolerances come
from the config) beside `kernels/<name>/` (its CUDA and Triton sources and its notebook). The
folder's `__init__.py` defines, by name:

    DESCRIPTION                              one line for tables and reports
    DIMS                                     the names of the shape's dimensions ('rows', 'width')
    validate_shape(shape)                    raise ValueError with a one-sentence reason
    make_inputs(shape, seed, params)         fresh random inputs on the GPU, never zeros
    make_output(inputs, shape)               an uninitialised output (the check poisons it)
    reference(inputs, params)                the float64 result
    bytes_moved(shape), flops(shape)         the fewest bytes and the arithmetic one call needs
    bind_torch(inputs, out, params)          the library call (see Bind)
    PARAMS (optional)                        its own config keys: name -> JSON schema with a default
    grow(inputs, out, fraction) (optional)   the problem of a planted slowdown (a variant's `grow`)
    TEST_SHAPES (optional)                   odd shapes the generic GPU test checks besides the default
    OP = define(__name__)                    last line: the Operation, derived from the above

and its `kernels.py` the dispatch and launchers of our kernels: `bind_cuda`, `bind_triton` (each a
Bind) and `instances_for(impl, shapes)` (the compiled instances the shapes need, for the census).
Everything else (the operation's name, its implementations, its kernel sources) is derived from
the folder: docs/adding-an-operation.md walks through a new one.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, cast

from harness import ROOT, baseline
from harness.errors import EvidenceError
from harness.launch import cuda as cuda_launch
from harness.launch import external
from harness.launch import sources as kernel_sources
from harness.ops import variants

if TYPE_CHECKING:
    from torch import Tensor

Tensors = dict[str, Any]  # name -> torch.Tensor
Params = Mapping[str, Any]  # the operation's config block (eps, tolerance, ...)

Call = Callable[[], "Tensor"]
"""One launch of an implementation on the inputs it was bound to; it returns the tensor holding
the result: the `out` it was bound to (ours, which write into it), or the library's fresh tensor.
Every implementation returns a tensor, so a caller never holds a call where it expects data."""

Bind = Callable[[Tensors, "Tensor", Params], Call]
"""Binds an implementation to one input set and its output: checks the tensors, chooses the
instance and prepares the launch, once; the returned Call only launches."""


class Bound(Protocol):
    """What `bind` returns: a Call on inputs of its own, with what the measurement records of it."""

    sets: list[tuple[Tensors, Tensor]]
    """The (inputs, out) sets it launches on, in turn (one in hot mode)."""
    input_sets: int
    """How many sets one call rotates through (cold mode), else 1."""
    placements: int
    """How many placements `select` chooses from (hot mode), else 1."""
    launch_path: str
    """How it launches: 'direct' (a CUDA launch or the library call), 'prepared' or 'jit' (Triton)."""

    def select(self, placement: int) -> None:
        """Launch every later call on input set `placement` (hot mode; modulo the placements)."""

    def __call__(self) -> Tensor: ...

OPS_DIR = Path(__file__).resolve().parent
KERNELS_DIR = ROOT / "kernels"
OURS = ("cuda", "triton")
"""Our implementations: `bind_<impl>` in the operation's kernels.py, sources in kernels/<name>/."""

PAIRS = (("cuda", "triton"), ("cuda", "torch"), ("external", "triton"))
"""The pairs of implementations a/b every run compares at every shape, with an interval and a
verdict: ours over the control, ours over the library, an external kernel over the control (the
sweep table's `<a>_over_<b>`; a target's verdict may ask only these, either way round)."""

SOURCE_FILES = {"cuda": "{name}.cu", "triton": "{name}_triton.py"}
"""Where an implementation of ours keeps its source under kernels/<name>/."""


@dataclass(frozen=True)
class Operation:
    name: str
    description: str
    make_inputs: Callable[[str, int, Params], Tensors]
    """(shape, seed, params) -> fresh random inputs on the GPU, never zeros. Shapes are the config's
    strings ('4096x768', '65536x1048576x64-powerlaw'); harness.shapes reads them."""
    make_output: Callable[[Tensors, str], Any]
    """(inputs, shape) -> an uninitialised output tensor (the check poisons it)."""
    reference: Callable[[Tensors, Params], Any]
    """(inputs, params) -> float64 reference output."""
    implementations: Mapping[str, Bind]
    bytes_moved: Callable[[str], int]
    """Fewest bytes a kernel must move through device memory (each input read, output written once)."""
    flops: Callable[[str], int]
    """Floating-point operations of one call (the arithmetic the operation needs, not what a kernel does)."""
    validate_shape: Callable[[str], None]
    """Raise an exception with a one-sentence reason if the shape is not one this operation takes."""
    sources: Mapping[str, list[str]] = field(default_factory=dict)
    """impl -> kernel source files under kernels/ (for source hashes)."""
    kernels: str = ""
    """The module of our kernels' dispatch and launchers, e.g. 'harness.ops.layernorm.kernels'."""
    dim_names: tuple[str, ...] = ()
    """Names of the shape's dimensions, for the external kind's launch expressions ('rows', 'width')."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """The operation's own config keys: name -> JSON schema (with its default), e.g. layernorm's eps."""
    grow: Callable[[Tensors, Any, float], tuple[Tensors, Any, Any]] | None = None
    """(inputs, out, fraction) -> (larger inputs, larger output, the view of it holding the result):
    the problem of a planted slowdown, whose extra part leaves the result as it is."""


REQUIRED = ("DESCRIPTION", "DIMS", "validate_shape", "make_inputs", "make_output", "reference",
            "bytes_moved", "flops", "bind_torch")


def define(module_name: str) -> Operation:
    """The Operation of the folder `harness/ops/<name>/`, from the names its `__init__.py` defines
    (see the module docstring) and what lies in `kernels/<name>/`: an implementation of ours
    exists where kernels.py has its `bind_<impl>` and its source file is there."""
    module = sys.modules[module_name]
    name = module_name.rpartition(".")[2]
    missing = [n for n in REQUIRED if not hasattr(module, n)]
    if missing:
        raise EvidenceError(f"Operation {name!r} does not define {', '.join(missing)} in "
                            f"harness/ops/{name}/__init__.py.")
    binders: dict[str, Bind] = {}
    sources: dict[str, list[str]] = {}
    kernels_module = f"{module_name}.kernels"
    if (OPS_DIR / name / "kernels.py").is_file():
        kernels = importlib.import_module(kernels_module)
        for impl in OURS:
            source = f"{name}/{SOURCE_FILES[impl].format(name=name)}"
            if hasattr(kernels, f"bind_{impl}") and (KERNELS_DIR / source).is_file():
                binders[impl] = getattr(kernels, f"bind_{impl}")
                sources[impl] = [source]
    binders["torch"] = module.bind_torch
    sources["torch"] = []
    return Operation(name=name, description=module.DESCRIPTION, make_inputs=module.make_inputs,
                     make_output=module.make_output, reference=module.reference, implementations=binders,
                     bytes_moved=module.bytes_moved, flops=module.flops, validate_shape=module.validate_shape,
                     sources=sources, kernels=kernels_module if binders.keys() - {"torch"} else "",
                     dim_names=tuple(module.DIMS), params=dict(getattr(module, "PARAMS", {})),
                     grow=getattr(module, "grow", None))


def dispatch_file(name: str, root: str | Path = ROOT) -> Path:
    """Where operation `name`'s dispatch and launchers lie under `root`: harness/ops/<name>/kernels.py."""
    return Path(root) / "harness" / "ops" / name / "kernels.py"


OWN_DISPATCH, THIS_DISPATCH = "its own", "this checkout's"
"""Whose dispatch chooses and launches a baseline revision's kernels (`whose_dispatch`)."""


def whose_dispatch(name: str, root: str | Path) -> str:
    """OWN_DISPATCH where the revision's sources under `root` hold operation `name`'s dispatch
    (`dispatch` loads it), else THIS_DISPATCH."""
    return OWN_DISPATCH if dispatch_file(name, root).is_file() else THIS_DISPATCH


def dispatch(name: str) -> ModuleType:
    """The module of operation `name`'s kernel dispatch and launchers in force (`bind_cuda`,
    `bind_triton`, `instances_for`): this checkout's, or inside harness.launch.sources.at(root) the
    revision's own under `root` (harness.baseline.extract copies it), loaded beside this checkout's
    and importing this checkout's harness.launch; where `root` holds none (sources extracted before
    dispatches were), this checkout's. EvidenceError (one sentence) where it does not load."""
    module = get(name).kernels
    if not module:
        raise EvidenceError(f"operation {name!r} has no kernels of ours, so it has no dispatch.")
    root = kernel_sources.tree()
    if root is not None and whose_dispatch(name, root) == OWN_DISPATCH:
        return kernel_sources.module(module)
    return importlib.import_module(module)


SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".py", ".ptx")


def sources(name: str, root: str | Path = ROOT) -> list[str]:
    """The files of operation `name` whose edit changes what is built or measured, relative to
    `root`: its host code (harness/ops/<op>/) and its kernels (kernels/<op>/, not its notebook or
    data)."""
    root = Path(root)
    found = [p for folder in (root / "harness" / "ops" / name, root / "kernels" / name) if folder.is_dir()
             for p in folder.iterdir() if p.is_file() and p.suffix in SOURCE_SUFFIXES]
    return sorted(str(p.relative_to(root)) for p in found)


def source_digest(name: str, root: str | Path = ROOT) -> dict[str, str]:
    """SHA-256 of each of `sources(name, root)`: the build and measure rules take it as a param,
    so an edit of the operation's code reruns that operation's jobs only (a param, not an input
    file, so that it holds whatever the working directory or storage of the run)."""
    root = Path(root)
    return {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest() for rel in sources(name, root)}


def known() -> tuple[str, ...]:
    """The operations there are: every folder of harness/ops/ with an __init__.py."""
    return tuple(sorted(d.name for d in OPS_DIR.iterdir() if (d / "__init__.py").is_file()))


def get(name: str) -> Operation:
    if name not in known():
        raise EvidenceError(f"unknown operation {name!r}; known operations are {', '.join(known())}.")
    module = importlib.import_module(f"harness.ops.{name}")
    op: Operation = module.OP
    return op


def grow_rows(inputs: Tensors, out: Any, fraction: float) -> tuple[Tensors, Any, Any]:
    """A row-wise operation's planted-slowdown problem (its `grow`): the first rows of `x` again
    after the last, `fraction` more rows in all; the result is the first rows of the larger output."""
    import torch  # deferred: heavy, and only the GPU path grows a problem

    rows = inputs["x"].shape[0]
    extra = max(1, round(rows * fraction))
    x = torch.cat([inputs["x"], inputs["x"][:extra]]).contiguous()
    bigger = torch.empty_like(x)
    return {**inputs, "x": x}, bigger, bigger[:rows]


def launcher(op: Operation, impl: str, params: Params | None = None, shape: str | None = None) -> Bind:
    """The Bind of one implementation; 'external' is built from the op's config block, its launch
    geometry evaluated on the dimensions of `shape`; a variant ('cuda.block512') binds its base
    with the variant's defines in force, so its dispatch and compile see them; ours at a baseline
    revision ('cuda@main') binds ours with that revision's kernel sources in force (the folder
    `params['baselines'][label]` names, harness.launch.sources), dispatched and launched by that
    revision's own kernels.py where its folder holds one (`dispatch`)."""
    if impl == "external":
        if not params or "external" not in params:
            raise EvidenceError(f"operation {op.name!r} has no 'external' block in the config, so it has no external implementation.")
        ext = external.make_launcher(op, params["external"])
        dims = external.dims_from_shape(shape, op.dim_names) if shape else None
        return lambda inputs, out, p: ext.bind(inputs, out, p, dims=dims)

    ours, revision = baseline.split(impl)
    if revision is not None:
        roots = (params or {}).get("baselines") or {}
        if revision not in roots:
            raise EvidenceError(f"implementation {impl!r} is ours at the baseline {revision!r}, which this run does "
                                f"not build (its baselines: {', '.join(roots) or 'none'}).")
        root = Path(roots[revision])
        root = root if root.is_absolute() else ROOT / root

        def bind_at_revision(inputs: Tensors, out: Tensor, p: Params) -> Call:
            try:
                with kernel_sources.at(root):  # that revision's dispatch and kernels, compiled and loaded now
                    return launcher(op, ours, params, shape)(inputs, out, p)
            except Exception as exc:  # a kernel that does not compile there, a launcher that no longer fits
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                raise baseline.CannotMeasure(f"{impl} cannot be measured at {revision}: {type(exc).__name__}: "
                                             f"{first}") from exc

        bind_at_revision.__name__ = f"{impl} (kernels of {root})"
        return bind_at_revision
    base, name = variants.split(impl)
    if name is not None:
        options = variants.compiler_options(params, impl)
        fraction = variants.grow(params, impl)
        base_bind = launcher(op, base, params, shape)
        if fraction is not None and op.grow is None:
            raise EvidenceError(f"variant {impl!r} plants a slowdown (grow), but operation {op.name!r} defines no grow.")

        def bind_variant(inputs: Tensors, out: Any, p: Params) -> Call:
            with cuda_launch.variant_options(options):
                if fraction is None:
                    return base_bind(inputs, out, p)
                grown, bigger, view = op.grow(inputs, out, fraction)  # type: ignore[misc]
                call = base_bind(grown, bigger, p)

            def planted() -> Tensor:
                call()
                return view

            planted.grown = (grown, bigger)  # type: ignore[attr-defined]  # kept alive with the call
            planted.launch_path = getattr(call, "launch_path", "direct")  # type: ignore[attr-defined]
            return planted

        bind_variant.__name__ = f"{impl} ({' '.join(options) or 'no defines'})"
        return bind_variant
    if impl in OURS and kernel_sources.tree() is not None:  # inside bind_at_revision: the revision's dispatch
        bind = getattr(dispatch(op.name), f"bind_{impl}", None)
        if bind is None:
            raise EvidenceError(f"the dispatch of {op.name} at that revision defines no bind_{impl}.")
        return cast(Bind, bind)
    try:
        return op.implementations[impl]
    except KeyError:
        raise EvidenceError(
            f"operation {op.name!r} has no implementation {impl!r}; it has "
            f"{', '.join(op.implementations)}.") from None


COLD_FOOTPRINT_L2 = 4
"""In cold mode the rotated input sets together hold at least this many times the L2's bytes."""

COLD_MAX_BYTES = 16 * 2**30
"""...but never more than this in all (a shape that moves more is cold with two sets anyway)."""


def cold_sets(bytes_per_set: int, l2_bytes: int, footprint: int = COLD_FOOTPRINT_L2, cap: int = COLD_MAX_BYTES) -> int:
    """How many input sets cold mode rotates through: enough that a set was evicted from the L2 by
    the others before it comes round again (>= footprint x L2 in all, at least 2), within `cap`."""
    if bytes_per_set <= 0:
        return 2
    want = -(-footprint * l2_bytes // bytes_per_set) + 1  # ceil, plus the one in use
    return max(2, min(want, max(2, cap // bytes_per_set)))


def run(op_name: str, impl: str, inputs: Tensors, out: Tensor, params: Params, shape: str | None = None) -> Tensor:
    """One call of an implementation on given inputs and output, as the pipeline makes it (bound
    through `launcher`, then launched once, asynchronously): the tensor holding the result. The
    one seam tests call an implementation through, so they cannot drift from the pipeline's."""
    return launcher(get(op_name), impl, params, shape)(inputs, out, params)()


def bind(op_name: str, impl: str, shape: str, params: Params, seed: int, cache_mode: str = "hot") -> Bound:
    """One implementation's call on inputs of its own: `bind_group` of that implementation alone,
    on one placement."""
    return bind_group(op_name, [impl], shape, params, seed, cache_mode)[impl]


def bind_group(op_name: str, impls: Sequence[str], shape: str, params: Params, seed: int, cache_mode: str = "hot",
               placements: int = 1) -> dict[str, Bound]:
    """Fresh inputs and an output for one (operation, shape), and for each implementation a
    zero-argument call that launches it once on them (the form the capture target and the span
    timer use). Every implementation launches on the same input buffers and output, and those are
    the first part of a planted slowdown's grown ones where they can be (`prefix_views`): what the
    group compares is the kernels, never where their data sit.

    hot: one input set per placement, the same values (seeded from `seed`) allocated `placements`
    times, each while the earlier ones are held, so that each lies at other addresses; `select(p)`
    makes every later call of an implementation launch on placement p, so a shape that fits in
    the L2 is read from it. cold: the calls rotate through `cold_sets` input sets (different
    seeds) and outputs, totalling several times the L2, so each call reads its inputs from device
    memory (`placements` does not apply: the rotation already moves the data)."""
    op = get(op_name)
    binders = {impl: launcher(op, impl, params, shape) for impl in impls}
    count, sets_per_call = max(1, int(placements)), 1
    if cache_mode == "cold":
        import torch

        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
        count = sets_per_call = cold_sets(op.bytes_moved(shape), l2)
    kept: list[tuple[Tensors, Any]] = []  # the input sets stay alive as long as the calls that launch on them
    launches: dict[str, list[Call]] = {impl: [] for impl in impls}
    planted = [impl for impl in impls if variants.split(impl)[1] is not None and variants.grow(params, impl) is not None]
    for i in range(count):
        inputs = op.make_inputs(shape, seed + (i if cache_mode == "cold" else 0), params)
        out = op.make_output(inputs, shape)
        out.fill_(float("nan"))
        bound = {impl: binders[impl](inputs, out, params) for impl in planted}
        if planted:  # the others launch on the first plant's grown buffers, where theirs are a prefix of them
            inputs, out = prefix_views(inputs, out, *getattr(bound[planted[0]], "grown"))
        kept.append((inputs, out))
        for impl in impls:
            launches[impl].append(bound[impl] if impl in bound else binders[impl](inputs, out, params))
    return {impl: _placed(launches[impl], kept, sets_per_call) for impl in impls}


def prefix_views(inputs: Tensors, out: Any, grown: Tensors, bigger: Any) -> tuple[Tensors, Any]:
    """`inputs` and `out` with every tensor that is the leading part of its grown counterpart (the
    same trailing dimensions and dtype, its rows the grown tensor's first rows, value for value)
    replaced by that part of the grown one, a view on the same memory; so the base kernel and its
    planted slowdown read the same addresses for the part they share, and the plant's size is
    its extra work, not a placement of its own. Anything else is left as it is (matmul's A, whose
    rows grow; transpose's output, whose rows grow)."""
    def lead(a: Any, g: Any, values: bool) -> Any:
        shape, gshape = getattr(a, "shape", None), getattr(g, "shape", None)
        if g is a or shape is None or gshape is None or len(shape) != len(gshape) or not len(shape):
            return a
        if a.dtype != g.dtype or a.device != g.device or tuple(shape[1:]) != tuple(gshape[1:]) or gshape[0] < shape[0]:
            return a
        part = g[: shape[0]]
        if not part.is_contiguous() or (values and not bool((part == a).all())):
            return a
        return part

    return {k: lead(v, grown.get(k), True) for k, v in inputs.items()}, lead(out, bigger, False)


def _placed(calls: list[Call], sets: list[tuple[Tensors, Any]], sets_per_call: int) -> Bound:
    """One Bound over the calls of one implementation on each input set: with `sets_per_call` > 1
    (cold) each call launches on the next set in turn; otherwise on the selected placement."""
    state = [0, 0]  # [selected placement, next set of the rotation]

    def select(p: int) -> None:
        state[0] = p % len(calls)

    if len(calls) == 1:
        call = calls[0]
    elif sets_per_call > 1:
        def call() -> Tensor:
            launch = calls[state[1]]
            state[1] = (state[1] + 1) % len(calls)
            return launch()
    else:
        def call() -> Tensor:
            return calls[state[0]]()

    # input_sets: how many sets one call rotates through; placements: how many `select` chooses
    # from; launch_path: how it launches ('direct' for a CUDA launch or the library call, 'prepared'
    # or 'jit' for Triton, harness.launch.triton)
    return _annotated(call, sets=sets, input_sets=sets_per_call, placements=1 if sets_per_call > 1 else len(calls),
                      select=select, launch_path=getattr(calls[0], "launch_path", "direct"))


def _annotated(call: Call, **attributes: Any) -> Bound:
    """`call` carrying `attributes` (a wrapper where the call itself takes none, as a builtin)."""
    try:
        for key, value in attributes.items():
            setattr(call, key, value)
        return cast(Bound, call)
    except AttributeError:
        def wrapped() -> Tensor:
            return call()

        for key, value in attributes.items():
            setattr(wrapped, key, value)
        return cast(Bound, wrapped)
