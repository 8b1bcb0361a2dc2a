"""Our Triton kernels at run time: one launch prepared once, then launched with nothing around it.

`bind` makes the first launch through the JIT (which compiles, or loads from Triton's cache, and
checks the arguments), keeps the compiled kernel it returns, and from then on calls that kernel's
launcher directly with the argument values fixed at bind time and torch's current stream at the
time of the call. That skips the JIT's per-call work (binding and specialising the arguments,
hashing the cache key), which is most of a Triton launch's host time.

The direct path uses the compiled kernel's `run(grid, stream, function, metadata, hooks, *args)`,
an interface of Triton's runtime rather than a documented one. Where the installed Triton does not
offer it (or launch hooks are set, which want the JIT's bookkeeping), `bind` keeps the JIT call;
the returned launch says which in its `launch_path` attribute ('prepared' or 'jit'), and the span
table records it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from harness.launch.cuda import Launch, raw_stream_reader

if TYPE_CHECKING:
    from torch import Tensor

PREPARED = "prepared"
JIT = "jit"


def _pointer_or_value(arg: Any) -> Any:
    """A tensor as its address (the launcher takes an int as a pointer); anything else unchanged."""
    data_ptr = getattr(arg, "data_ptr", None)
    return data_ptr() if callable(data_ptr) else arg


def bind(fn: Any, grid: Sequence[int], args: Sequence[Any], constexprs: Mapping[str, Any],
         options: Mapping[str, Any], device_index: int, *, out: Tensor) -> Launch:
    """A launch of the @triton.jit function `fn` over `grid` with positional `args`, the
    `constexprs` as keywords and the compile `options` (num_warps, num_stages). The first launch
    happens here, through the JIT; the returned call launches again and returns `out` (the tensor
    the kernel writes)."""
    import torch

    grid3 = (tuple(int(g) for g in grid) + (1, 1))[:3]
    with torch.cuda.device(device_index):
        kernel = fn[grid3](*args, **constexprs, **options)
    if hasattr(kernel, "result"):  # a Triton that compiles asynchronously returns a future
        kernel = kernel.result()

    def jit_call() -> Tensor:
        with torch.cuda.device(device_index):
            fn[grid3](*args, **constexprs, **options)
        return out

    jit_call.launch_path = JIT  # type: ignore[attr-defined]
    prepared, why = _prepared(fn, kernel, grid3, args, constexprs, device_index, out)
    jit_call.launch_reason = why  # type: ignore[attr-defined]
    return prepared if prepared is not None else jit_call


def _hooked(hook: Any) -> bool:
    """Whether a Triton launch hook is set: None, or an empty HookChain (newer Triton's default),
    is not."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return calls is None or len(calls) > 0


def _prepared(fn: Any, kernel: Any, grid3: tuple[int, ...], args: Sequence[Any],
              constexprs: Mapping[str, Any], device_index: int, out: Tensor) -> tuple[Launch | None, str]:
    """The direct launch through the compiled kernel's launcher, or None and why this Triton does
    not offer what it needs."""
    try:
        from triton import knobs

        enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        run, function, packed = kernel.run, kernel.function, kernel.packed_metadata
        names = list(fn.arg_names)
    except (AttributeError, ImportError) as exc:
        return None, f"this Triton's compiled kernel lacks what the direct launch uses ({type(exc).__name__}: {exc})"
    if _hooked(enter) or _hooked(leave):
        return None, "launch hooks are set (a profiler's or a tool's), which want the JIT's bookkeeping"
    if function is None:
        return None, "the compiled kernel has no loaded function"
    given = dict(zip(names, args))
    given.update(constexprs)
    if set(given) != set(names):  # a parameter left to its default: keep the JIT, which fills it in
        return None, f"parameters left to their defaults: {sorted(set(names) - set(given))}"
    values = tuple(_pointer_or_value(given[name]) for name in names)
    g0, g1, g2 = grid3
    current = raw_stream_reader(device_index)

    def call() -> Tensor:
        run(g0, g1, g2, current(), function, packed, None, None, None, *values)
        return out

    call.launch_path = PREPARED  # type: ignore[attr-defined]
    return call, ""
