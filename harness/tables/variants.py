"""Each enabled variant against its base implementation at every shape both were measured at, and
the one-line outcome per variant that the report lists ("candidate" or "not kept")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.ops.variants import split
from harness.tables.derive import ratio_interval, same_gpu

VARIANT_COLUMNS = ["namespace", "op", "shape", "variant", "base", "description", "cache_mode", "base_us",
                   "variant_us", "ratio", "ratio_lo", "ratio_hi", "verdict"]
"""tables/variants.csv: each enabled variant against its base at each shape, same session."""


def variant_rows(kernel_time: list[Mapping[str, Any]], cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each variant's kernel time against its base at every shape it was measured at, with the
    interval of the ratio from the spread of the launches and its verdict (tables.ratio_interval)."""

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
