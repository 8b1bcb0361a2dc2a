"""Named variants of our kernels: an implementation '<base>.<name>' (e.g. 'cuda.full_occupancy')
is the base implementation's kernel compiled with the variant's preprocessor defines. A variant is
built, censused, checked, captured and timed like any implementation; the report compares it with
its base at every shape and lists the ones that did not beat it under "What was tried and not
kept".

Defines are validated by the config schema (NAME: integer), and become compiler options
'-DNAME=value' in an argument list; no shell ever sees them.
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


VARIANT_COLUMNS = ["namespace", "op", "shape", "variant", "base", "description", "cache_mode", "base_us",
                   "variant_us", "ratio", "ratio_lo", "ratio_hi", "verdict"]
"""tables/variants.csv: each enabled variant against its base at each shape, same session."""


def variant_rows(kernel_time: list[Mapping[str, Any]], cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each variant's kernel time against its base at every shape it was measured at, with the
    interval of the ratio from the spread of the launches and its verdict (tables.ratio_interval)."""
    from harness.tables import ratio_interval, same_gpu

    by_key = {(r["op"], r["shape"], r["impl"]): r for r in kernel_time}
    out = []
    for (op, shape, impl), row in by_key.items():
        base, name = split(str(impl))
        if name is None:
            continue
        ref = by_key.get((op, shape, base))
        if ref is not None and not same_gpu(row, ref):
            ref = None  # never a ratio across two GPUs
        lo, hi, verdict = ratio_interval(row, ref)
        block = (cfg["operations"][op].get("variants") or {}).get(name, {})
        out.append({"namespace": cfg["namespace"], "op": op, "shape": shape, "variant": impl, "base": base,
                    "description": block.get("description", ""), "cache_mode": cfg["cache_mode"],
                    "base_us": ref["kernel_time_us"] if ref else None, "variant_us": row["kernel_time_us"],
                    "ratio": (float(row["kernel_time_us"]) / float(ref["kernel_time_us"])) if ref else None,
                    "ratio_lo": lo, "ratio_hi": hi, "verdict": verdict})
    return out


def outcomes(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One line per variant: 'candidate' when it was faster than its base beyond the spread at
    one shape or more and slower at none; otherwise 'not kept', with the verdict counts and the
    range of its ratio to the base (the metric the report quotes)."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        grouped.setdefault((r["op"], r["variant"]), []).append(r)
    out = []
    for (op, variant), rs in grouped.items():
        counts = {v: sum(1 for r in rs if r["verdict"] == v) for v in ("faster", "slower", "no difference")}
        ratios = [float(r["ratio"]) for r in rs if r["ratio"] is not None and r["ratio"] == r["ratio"]]
        kept = counts["faster"] > 0 and counts["slower"] == 0
        out.append({"op": op, "variant": variant, "base": rs[0]["base"], "description": rs[0]["description"],
                    "shapes": len(rs), **{k.replace(" ", "_"): v for k, v in counts.items()},
                    "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
                    "outcome": "candidate" if kept else "not kept",
                    "per_shape": [{"shape": r["shape"], "ratio": r["ratio"], "verdict": r["verdict"]} for r in rs]})
    return out
