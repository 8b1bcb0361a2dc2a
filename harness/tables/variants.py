"""The one-line outcome of each variant measured in a run, from tables/variants.csv (each variant
against its base at every shape, with the interval and verdict of harness.tables.stats): a
"candidate" where it was faster at one shape or more and slower at none, else "not kept", with the
verdict counts and the range of its ratio to the base. Tables from before the four verdicts say
'no difference' where the envelope of the launches held 1; that counts as "can't tell"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.tables import stats

LEGACY = {"no difference": stats.CANT_TELL}


def _number(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v == v else None


def outcomes(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One dict per (operation, variant): its counts per verdict, ratio range, outcome and shapes."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        grouped.setdefault((str(r["op"]), str(r["variant"])), []).append(r)
    out = []
    for (op, variant), rs in grouped.items():
        verdicts = [LEGACY.get(str(r.get("verdict")), r.get("verdict")) for r in rs]
        counts = {v: sum(1 for x in verdicts if x == v) for v in stats.VERDICTS}
        ratios = [v for v in (_number(r.get("ratio")) for r in rs) if v is not None]
        kept = counts[stats.FASTER] > 0 and counts[stats.SLOWER] == 0
        out.append({"op": op, "variant": variant, "base": rs[0]["base"], "description": rs[0].get("description", ""),
                    "shapes": len(rs), "faster": counts[stats.FASTER], "slower": counts[stats.SLOWER],
                    "same": counts[stats.SAME], "cant_tell": counts[stats.CANT_TELL], "counts": counts,
                    "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
                    "outcome": "candidate" if kept else "not kept",
                    "per_shape": [{"shape": r["shape"], "ratio": r.get("ratio"), "verdict": v} for r, v in zip(rs, verdicts)]})
    return out
