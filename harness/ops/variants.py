"""Named variants of our kernels: an implementation '<base>.<name>' (e.g. 'cuda.full_occupancy')
is the base implementation's kernel compiled with the variant's preprocessor defines. A variant is
built, censused, checked, captured and timed like any implementation; harness.tables.variants
compares it with its base.

Defines are validated by the config schema (NAME: integer), and become compiler options
'-DNAME=value' in an argument list; no shell ever sees them. A variant with `grow` plants a known
slowdown: the base kernel on a problem that fraction larger, whose extra part leaves the output as
it is (the operation's `grow`), for the resolution check of the verdicts. A variant with `delay`
plants one another way: the base kernel with DELAY_DEFINE set, so that one thread of every block
waits that many SM clock cycles after the block's work (the kernel source must read the define;
the config refuses a delay where it does not). A grown problem's extra work falls in the kernel's
last, partial wave, whose cost depends on how the calls are launched (one by one, as the capture
launches them, or back to back in a graph: docs/method.md#calibrated-plants); a delay adds the
same time to every block either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.errors import EvidenceError

SEPARATOR = "."

DELAY_DEFINE = "PLANT_DELAY_CYCLES"
"""The preprocessor define a variant's `delay` becomes."""


def split(impl: str) -> tuple[str, str | None]:
    """('cuda', 'full_occupancy') for 'cuda.full_occupancy'; ('cuda', None) for 'cuda'."""
    base, sep, name = impl.partition(SEPARATOR)
    return base, (name if sep else None)


def spec(params: Mapping[str, Any] | None, impl: str) -> Mapping[str, Any]:
    """The config block of variant `impl` from its operation's config block."""
    base, name = split(impl)
    variants = (params or {}).get("variants") or {}
    if name is None or name not in variants:
        raise EvidenceError(f"implementation {impl!r} is not a variant defined in this operation's config "
                            f"(defined: {', '.join(variants) or 'none'}).")
    block = variants[name]
    if block["base"] != base:
        raise EvidenceError(f"variant {name!r} varies {block['base']!r}, not {base!r}.")
    return block


def compiler_options(params: Mapping[str, Any] | None, impl: str) -> tuple[str, ...]:
    """The '-DNAME=value' options of variant `impl` (sorted by name, so the option set is stable);
    () for a base implementation."""
    if split(impl)[1] is None:
        return ()
    return tuple(f"-D{name}={int(value)}" for name, value in sorted(defines(spec(params, impl)).items()))


def defines(block: Mapping[str, Any]) -> dict[str, int]:
    """A variant's preprocessor defines (its config block): its own `defines`, and its `delay`, if
    any, as DELAY_DEFINE."""
    out = {str(name): int(value) for name, value in (block.get("defines") or {}).items()}
    if block.get("delay") is not None:
        out[DELAY_DEFINE] = int(block["delay"])
    return out


def grow(params: Mapping[str, Any] | None, impl: str) -> float | None:
    """The planted slowdown of variant `impl` (the fraction its problem grows), or None: a base
    implementation, or a variant without `grow`."""
    if split(impl)[1] is None:
        return None
    value = spec(params, impl).get("grow")
    return None if value is None else float(value)
