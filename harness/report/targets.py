"""What the reports say of the config's performance targets (config `targets`, tables/targets.csv,
harness.tables.targets): one block per target, its row at each shape it names, and the counts.

`context` is what the templates print (numbers formatted here, strings escaped by the templates);
`rows` is what summary.json holds (numbers as numbers). Both come from the one table; where a shape
is not judged because the control does not rank it, the reason is the controls table's, in the
words the claims use (words.not_ranked_reason). `beside` sets what else the run measured at a shape
where a target was missed or could not be told (the same-size ceilings, the counters, the variants)
beside it, with the operation's notebook, which records the variants tried in earlier runs and what
the evidence says blocks the target."""

from __future__ import annotations

from typing import Any

from harness.report.words import notebook, not_ranked_reason, num, number, pct, ratio_text, records, text
from harness.tables import targets as tg

OPEN = (tg.MISSED, tg.CANT_TELL)
"""The statuses whose shapes the reports set the run's other evidence beside (`beside`)."""


def rows(table: Any) -> list[dict[str, Any]]:
    """summary.json's `targets`: one object per (target, op, shape), in the table's order."""
    return [{"target": text(r.get("target")), "op": text(r.get("op")), "shape": text(r.get("shape")),
             "metric": text(r.get("metric")), "ratio": text(r.get("ratio")), "value": number(r.get("value")),
             "lo": number(r.get("lo")), "hi": number(r.get("hi")), "verdict": text(r.get("verdict")),
             "asked": text(r.get("asked")), "gap": number(r.get("gap")), "status": text(r.get("status"))}
            for r in records(table)]


def gap_text(gap: Any, status: Any) -> str:
    """'2.6% beyond the bound' for a row missed or not told whose ratio lies beyond its bound;
    '' otherwise (a row met, not judged or not measured says nothing of it)."""
    g = number(gap)
    return "" if g is None or g <= 0 or str(status) not in OPEN else f"{g * 100:.1f}% beyond the bound"


def whose(ratio: str, verdict: str | None) -> str:
    """A target row's verdict with whose it is: 'torch faster' for the ratio torch/cuda, since a
    target's ratio may set the library over ours ('faster' beside a missed 95%-of-cuBLAS read as
    ours); 'same' and "can't tell" as they are, '' for none."""
    if not verdict:
        return ""
    return f"{ratio.split('/')[0]} {verdict}" if verdict in ("faster", "slower") and "/" in ratio else verdict


def _main_counters(counters: list[dict[str, Any]], op: str, shape: str, impl: str) -> dict[str, Any] | None:
    """The counters of the longest kernel ncu measured of `impl` at (op, shape), None without one."""
    found = [r for r in counters if (str(r.get("op")), str(r.get("shape")), str(r.get("impl"))) == (op, shape, impl)
             and str(r.get("status")) == "ok"]
    return max(found, key=lambda r: number(r.get("duration_ns")) or 0.0) if found else None


CEILINGS = {"same_size_copy_fraction": "the same-size copy", "fp32_peak_fraction": "the FP32 peak"}
"""kernel_time.csv's fractions of a ceiling, and what each ceiling is called."""


def _binding(kt: dict[tuple[str, str, str], dict[str, Any]], op: str, shape: str, impls: list[str]) -> str | None:
    """The ceiling that binds at (op, shape): the one the first of `impls` with a fraction runs
    closest to (the larger fraction, as a roofline reads it); None where none has one."""
    for impl in impls:
        row = kt.get((op, shape, impl)) or {}
        found = {c: f for c in CEILINGS if (f := number(row.get(c))) is not None}
        if found:
            return max(found, key=lambda c: found[c])
    return None


def beside(table: Any, kernel_time: Any = None, counters: Any = None, variants: Any = None) -> list[dict[str, Any]]:
    """One entry per (op, shape) where a kernel-time target is missed or can't be told, in the
    targets table's order: the targets (`targets`), each implementation of their ratios against its
    ceiling (`ceilings`: the same-size copy or the FP32 peak, kernel_time.csv's fractions, whichever
    binds, `_binding`),
    the counters of its longest kernel (`counters`: registers, achieved occupancy, DRAM of peak),
    the variants this run measured there (`variants`: name, ratio over its base with the interval,
    verdict) and the notebook (`notebook`: its path, `link` relative to report/<namespace>/)."""
    kt = {(str(r.get("op")), str(r.get("shape")), str(r.get("impl"))): r for r in records(kernel_time)}
    ctr = records(counters)
    var = records(variants)
    entries: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records(table):
        if str(r.get("status")) not in OPEN or str(r.get("metric")) != "kernel":
            continue
        key = (str(r.get("op")), str(r.get("shape")))
        entry = entries.setdefault(key, {"op": key[0], "shape": key[1], "targets": [], "impls": []})
        if str(r.get("target")) not in entry["targets"]:
            entry["targets"].append(str(r.get("target")))
        for impl in str(r.get("ratio")).split("/"):
            if impl not in entry["impls"]:
                entry["impls"].append(impl)
    out = []
    for (op, shape), entry in entries.items():
        ceilings, counted = [], []
        column = _binding(kt, op, shape, entry["impls"])
        for impl in entry["impls"]:
            row = kt.get((op, shape, impl)) or {}
            if column and number(row.get(column)) is not None:
                ceilings.append(f"{impl} {pct(row.get(column))} of {CEILINGS[column]}")
            c = _main_counters(ctr, op, shape, impl)
            if c is not None:
                counted.append(f"{impl} {num(c.get('registers_per_thread'), 0)} registers, "
                               f"{num(c.get('achieved_occupancy_pct'), 1)}% occupancy, "
                               f"DRAM {num(c.get('dram_pct_of_peak'), 1)}% of peak")
        tried = [{"variant": text(v.get("variant")) or "", "ratio": ratio_text(v.get("ratio"), v.get("ratio_lo"), v.get("ratio_hi")),
                  "base": text(v.get("base")) or "", "verdict": text(v.get("verdict")) or "n/a"}
                 for v in var if (str(v.get("op")), str(v.get("shape"))) == (op, shape)]
        said = "; ".join(ceilings)
        if column == "same_size_copy_fraction" and any(
                tg.outruns_copy(number((kt.get((op, shape, i)) or {}).get(column))) for i in entry["impls"]):
            said += f" (more than {1.0 + tg.COPY_BOUNDS:.0%} of it: the copy does not bound these kernels at this size)"
        out.append({"op": op, "shape": shape, "targets": entry["targets"], "ceilings": said,
                    "counters": "; ".join(counted), "variants": tried, "notebook": notebook(op)})
    return out


def context(table: Any, controls: Any = None, kernel_time: Any = None, counters: Any = None,
            variants: Any = None) -> dict[str, Any] | None:
    """The templates' `targets`: None without a targets table (or an empty one); else `targets`
    (each with its name, ratio, metric label, what it asks, `rows` and `counts`, `summary`), the
    counts over all rows (`counts`, `summary`), `missed` (each missed row: name, op, shape,
    ratio, value, asked, and `why`: how far beyond the bound and the reason; for the issue
    comment) and `beside` (the other evidence at the shapes of the targets missed or not told,
    `beside`). A row missed or not told says in `gap` how far its ratio lies beyond the bound,
    where it does; a row not judged says nothing of it (the table has the number). Each row's
    `why` is its gap and reason as one phrase ('2.6% beyond the bound (its interval ...)'), what
    every report prints after its status."""
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
        gap = gap_text(r.get("gap"), status)
        row = {"op": key[0], "shape": key[1], "value": value, "verdict": whose(block["ratio"], text(r.get("verdict"))),
               "status": status, "reason": reason, "gap": gap,
               "why": f"{gap} ({reason})" if gap and reason else gap or reason}
        block["rows"].append(row)
        every.append(row)
        if status == tg.MISSED:
            missed.append({"name": name, "op": key[0], "shape": key[1], "ratio": block["ratio"], "value": value,
                           "asked": block["asked"], "why": row["why"]})
    for block in blocks.values():
        block["counts"] = tg.counts(row["status"] for row in block["rows"])
        block["summary"] = tg.counts_text(block["counts"])
    total = tg.counts(row["status"] for row in every)
    return {"targets": list(blocks.values()), "counts": total, "summary": tg.counts_text(total), "missed": missed,
            "rows": len(every), "beside": beside(table, kernel_time, counters, variants)}
