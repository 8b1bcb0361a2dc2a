"""Named variants of our kernels: an implementation '<base>.<name>' (e.g. 'cuda.full_occupancy')
is the base implementation's kernel compiled with the variant's preprocessor defines. A variant is
built, censused, checked, captured and timed like any implementation; harness.tables.variants
compares it with its base.

Defines are validated by the config schema (NAME: integer), and become compiler options
'-DNAME=value' in an argument list; no shell ever sees them. A variant with `grow` plants a known
slowdown: the base kernel on a problem that fraction larger, whose extra part leaves the output as
it is (the operation's `grow`), for the resolution check of the verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.errors import EvidenceError

SEPARATOR = "."


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
    defines = spec(params, impl)["defines"]
    return tuple(f"-D{name}={int(value)}" for name, value in sorted(defines.items()))


def grow(params: Mapping[str, Any] | None, impl: str) -> float | None:
    """The planted slowdown of variant `impl` (the fraction its problem grows), or None: a base
    implementation, or a variant without `grow`."""
    if split(impl)[1] is None:
        return None
    value = spec(params, impl).get("grow")
    return None if value is None else float(value)
