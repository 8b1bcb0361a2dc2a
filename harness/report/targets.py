"""What the reports say of the config's performance targets (config `targets`, tables/targets.csv,
harness.tables.targets): one block per target, its row at each shape it names, and the counts.

`context` is what the templates print (numbers formatted here, strings escaped by the templates);
`rows` is what summary.json holds (numbers as numbers). Both come from the one table; where a shape
is not judged because the control does not rank it, the reason is the controls table's, in the
words the claims use (words.not_ranked_reason)."""

from __future__ import annotations

from typing import Any

from harness.report.words import not_ranked_reason, number, ratio_text, records, text
from harness.tables import targets as tg

def rows(table: Any) -> list[dict[str, Any]]:
    """summary.json's `targets`: one object per (target, op, shape), in the table's order."""
    return [{"target": text(r.get("target")), "op": text(r.get("op")), "shape": text(r.get("shape")),
             "metric": text(r.get("metric")), "ratio": text(r.get("ratio")), "value": number(r.get("value")),
             "lo": number(r.get("lo")), "hi": number(r.get("hi")), "verdict": text(r.get("verdict")),
             "asked": text(r.get("asked")), "status": text(r.get("status"))}
            for r in records(table)]


def context(table: Any, controls: Any = None) -> dict[str, Any] | None:
    """The templates' `targets`: None without a targets table (or an empty one); else `targets`
    (each with its name, ratio, metric label, what it asks, `rows` and `counts`, `summary`), the
    counts over all rows (`counts`, `summary`) and `missed` (each missed row: name, op, shape,
    ratio, value, asked; for the issue comment)."""
    found = records(table)
    if not found:
        return None
    by_controls = {(str(r.get("op")), str(r.get("shape"))): r for r in records(controls)}
    blocks: dict[str, dict[str, Any]] = {}
    every: list[dict[str, Any]] = []
    missed = []
    for r in found:
        name = str(r.get("target"))
        block = blocks.setdefault(name, {"name": name, "ratio": text(r.get("ratio")) or "",
                                         "metric": tg.METRICS.get(str(r.get("metric")), str(r.get("metric"))),
                                         "asked": text(r.get("asked")) or "", "rows": []})
        status = str(r.get("status"))
        reason = text(r.get("reason")) or ""
        key = (str(r.get("op")), str(r.get("shape")))
        if status == tg.NOT_JUDGED and key in by_controls:
            reason = not_ranked_reason(by_controls[key])
        value = ratio_text(r.get("value"), r.get("lo"), r.get("hi"))
        row = {"op": key[0], "shape": key[1], "value": value, "verdict": text(r.get("verdict")) or "",
               "status": status, "reason": reason}
        block["rows"].append(row)
        every.append(row)
        if status == tg.MISSED:
            missed.append({"name": name, "op": key[0], "shape": key[1], "ratio": block["ratio"], "value": value,
                           "asked": block["asked"]})
    for block in blocks.values():
        block["counts"] = tg.counts(row["status"] for row in block["rows"])
        block["summary"] = tg.counts_text(block["counts"])
    total = tg.counts(row["status"] for row in every)
    return {"targets": list(blocks.values()), "counts": total, "summary": tg.counts_text(total), "missed": missed,
            "rows": len(every)}
