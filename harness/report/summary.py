"""The namespace's machine-readable summary, `artifacts/<ns>/summary.json`, and the reading of its
tables' verdicts and intervals that every report shares.

The schema is documented in docs/summary-schema.md and named by the file's `schema` key
(`SCHEMA`). `build` composes a summary from the loaded tables and the provenance, `write` writes it
(after `validate`), `read` reads one back and refuses anything that is not this schema version in
one sentence. Every value comes from a table or the provenance; a value a table lacks is null,
never estimated.

Two generations of tables exist. Tables written since the rounds record a `margin` column in
sweep.csv: their intervals are 95% intervals over interleaved rounds (over the rounds' placements
where its `placements` column says they ran on several) and their verdicts are the four of
harness.tables.stats. Older tables have no margin: their intervals are the min-max
envelope of the launches, and their verdict 'no difference' is read as "can't tell"
(`LEGACY_VERDICTS`); the summary records the verdict as the table wrote it beside the one it is
read as.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import EvidenceError
from harness.io import write_text
from harness.report import change, resolution, targets
from harness.report.words import NOT_RANKED, integer, missing, number, records, text, truth
from harness.runlog import superseded
from harness.tables import stats, trust
from harness.tables.derive import SWEEP_PAIRS

SCHEMA = "kernel-evidence-summary/1"
SCHEMA_PREFIX = "kernel-evidence-summary/"

VERDICTS = stats.VERDICTS
"""The four verdicts, in the order reports count them: faster, slower, same, can't tell."""

LEGACY_VERDICTS = {"no difference": stats.CANT_TELL}
"""Verdicts of older tables and the verdict each is read as."""

BOOTSTRAP = "bootstrap"
PLACED_DESCRIPTION = "95% interval over the placements the interleaved rounds ran on (Student's t)"
"""The sweep table's intervals where its rounds ran on several placements (its `placements`
column; harness.tables.stats): the kind stays 'bootstrap', the table generation with a margin."""
BETWEEN_RUNS_DESCRIPTION = ", widened by the component between runs that the config holds for the pair"
"""Added to the description where a row's interval was widened by the component between runs (its
`between_runs` column above 0: harness.evidence.between_runs; docs/method.md#between-runs)."""
ENVELOPE = "envelope"
NO_INTERVAL = "none"

PROVENANCE_KEYS = ("namespace", "git", "date_utc", "host", "gpus", "versions", "config_sha256", "commands")
"""The provenance keys a summary carries."""

HEADLINE_KEYS = ("flags", "checked", "claims", "counts", "disturbed", "cross_check_disagree")
"""What a rendered summary carries beside its rows: the reports' first screen, as data."""

TOP_KEYS = ("schema", "namespace", "control", "interval", "verdicts", "provenance", "rows")
ROW_KEYS = ("op", "shape", "impl", "base", "default", "kernel_time_us", "kernel_time_lo_us", "kernel_time_hi_us",
            "launch_path", "gpu_uuid", "ratios", "span", "census", "check")


# ------------------------------------------------------------------------------ shared readings


def verdict(value: Any) -> str | None:
    """The verdict a table's cell is read as: one of VERDICTS, a legacy verdict mapped by
    LEGACY_VERDICTS, or None (no verdict, or 'different GPUs': not compared)."""
    raw = text(value)
    if raw in VERDICTS:
        return raw
    return LEGACY_VERDICTS.get(raw or "")


def interval_kind(sweep: Any) -> dict[str, Any]:
    """What the sweep table's intervals are: {'kind': 'bootstrap', 'level': 0.95, 'margin': m,
    'description': ...} for tables with a margin column; {'kind': 'envelope', 'level': None,
    'margin': None, ...} for older tables with interval columns; {'kind': 'none', ...} for tables
    that record no interval at all."""
    margins = []
    if sweep is not None and "margin" in sweep:
        margins = [m for m in (number(v) for v in sweep["margin"]) if m is not None]
    if margins:
        placed = "placements" in sweep and any((number(v) or 0) > 1 for v in sweep["placements"])
        widened = "between_runs" in sweep and any((number(v) or 0) > 0 for v in sweep["between_runs"])
        return {"kind": BOOTSTRAP, "level": stats.LEVEL, "margin": margins[0],
                "description": (PLACED_DESCRIPTION if placed else "95% bootstrap interval over interleaved rounds")
                + (BETWEEN_RUNS_DESCRIPTION if widened else "")}
    if sweep is not None and "cuda_over_triton_lo" in sweep:
        return {"kind": ENVELOPE, "level": None, "margin": None,
                "description": "the min–max envelope of the launches"}
    return {"kind": NO_INTERVAL, "level": None, "margin": None, "description": "no interval"}


def commands(provenance: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The provenance's commands as {command, start, jobs, end, status, seconds, times} (keys absent
    from the record are null); an entry of the older plain-text form 'STAMP command' gives its stamp
    as `start` when the stamp looks like a date. A run of the same re-derivation in a row (rerender,
    retrust) is one entry, the last of them, `times` counting the run (harness.runlog.superseded);
    every other entry has `times` 1."""
    out = []
    for entry in superseded(list(provenance.get("commands") or [])):
        if isinstance(entry, Mapping):
            item = {k: entry.get(k) for k in ("command", "start", "jobs", "end", "status", "seconds")}
            item["times"] = int(entry.get("times") or 1)
        else:
            raw = str(entry)
            stamp, _, rest = raw.partition(" ")
            dated = len(stamp) >= 10 and stamp[:4].isdigit() and stamp[4:5] == "-"
            item = {"command": rest if dated else raw, "start": stamp if dated else None, "jobs": None, "end": None,
                    "status": None, "seconds": None, "times": 1}
        out.append(item)
    return out


# ------------------------------------------------------------------------------ building


def _by(frame: Any, keys: tuple[str, ...]) -> dict[tuple[str, ...], dict[str, Any]]:
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in records(frame):
        if all(k in r for k in keys):
            out.setdefault(tuple(str(r[k]) for k in keys), r)
    return out


def _ratio(row: Mapping[str, Any] | None, a: str, b: str, role: str) -> dict[str, Any] | None:
    if row is None or f"{a}_over_{b}" not in row:
        return None
    value = number(row.get(f"{a}_over_{b}"))
    recorded = text(row.get(f"{a}_vs_{b}"))
    if value is None and recorded is None:
        return None
    return {"over": b, "role": role, "ratio": value, "lo": number(row.get(f"{a}_over_{b}_lo")),
            "hi": number(row.get(f"{a}_over_{b}_hi")), "verdict": verdict(recorded), "verdict_recorded": recorded}


def build(tables: Mapping[str, Any], provenance: Mapping[str, Any], *, control: str | None = None,
          headline: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The summary of a namespace (docs/summary-schema.md) from its loaded tables (name ->
    DataFrame, as harness.report.render.load_tables gives them) and its provenance. `control` is
    the control implementation (default: the provenance config's trust.control, else 'triton').
    One row per (operation, shape, implementation) that has a kernel time or a check. A ratio over
    the control that the controls table does not rank carries the verdict 'not ranked' (the
    table's own verdict stays in `verdict_recorded`). `headline` (render.headline: the flags, the
    claims, the counts, the disturbed captures and the cross-check's disagreements the reports
    print) is carried as it is, under the keys HEADLINE_KEYS."""
    cfg = provenance.get("config") or {}
    control = control or str((cfg.get("trust") or {}).get("control") or "triton")
    defaults = {str(op): str(spec.get("default")) for op, spec in (cfg.get("operations") or {}).items()
                if isinstance(spec, Mapping)}
    kt, sweep, span, check = (tables.get(n) for n in ("kernel_time", "sweep", "span", "check"))
    census, controls, variants = (tables.get(n) for n in ("census", "controls", "variants"))
    sweep_by = _by(sweep, ("op", "shape"))
    span_by = _by(span, ("op", "shape", "impl"))
    check_by = _by(check, ("op", "shape", "impl"))
    variant_by = _by(variants, ("op", "shape", "variant"))
    judged = controls is not None and len(controls) > 0

    keys: list[tuple[str, str, str]] = []
    for frame in (kt, check):
        for r in records(frame):
            key = (str(r.get("op")), str(r.get("shape")), str(r.get("impl")))
            if None not in (r.get("op"), r.get("shape"), r.get("impl")) and key not in keys:
                keys.append(key)
    kt_by = _by(kt, ("op", "shape", "impl"))
    reasons = {(str(c["op"]), str(c["shape"])): c.get("reason") for c in (headline or {}).get("claims", [])}

    rows = []
    for op, shape, impl in keys:
        k = kt_by.get((op, shape, impl)) or {}
        s = sweep_by.get((op, shape))
        base, _, variant_name = impl.partition(".")
        ratios = []
        for a, b in SWEEP_PAIRS:
            if a == impl:
                got = _ratio(s, a, b, "control" if b == control else "library" if b == "torch" else "other")
                if got is not None:
                    if got["role"] == "control":
                        got["rankable"] = trust.rankable(controls, op, shape) if judged else None
                        if got["rankable"] is False:
                            got["verdict"] = NOT_RANKED
                            got["reason"] = reasons.get((op, shape))
                    ratios.append(got)
        v = variant_by.get((op, shape, impl)) if variant_name else None
        if v is not None:
            recorded = text(v.get("verdict"))
            ratios.append({"over": base, "role": "base", "ratio": number(v.get("ratio")), "lo": number(v.get("ratio_lo")),
                           "hi": number(v.get("ratio_hi")), "verdict": verdict(recorded), "verdict_recorded": recorded})
        sp = span_by.get((op, shape, impl))
        c = check_by.get((op, shape, impl))
        identity = sorted(trust.kernel_identity(census, op, impl, shape)) if census is not None else []
        rows.append({
            "op": op, "shape": shape, "impl": impl, "base": base if variant_name else None,
            "default": defaults.get(op) == shape if op in defaults else None,
            "kernel_time_us": number(k.get("kernel_time_us")),
            "kernel_time_lo_us": number(k.get("kernel_time_lo_us")),
            "kernel_time_hi_us": number(k.get("kernel_time_hi_us")),
            "launch_path": text(k.get("launch_path")), "gpu_uuid": text(k.get("gpu_uuid")),
            "ratios": ratios,
            "span": None if sp is None else {
                "median_us": number(sp.get("span_median_us")), "samples": integer(sp.get("samples")),
                "launch_path": text(sp.get("launch_path")), "exclusive": truth(sp.get("exclusive")),
                "threads": integer(sp.get("threads"))},
            "census": [dict(zip(trust.IDENTITY_COLUMNS, ident[:len(trust.IDENTITY_COLUMNS)], strict=True))
                       for ident in identity],
            "check": None if c is None else {"passed": truth(c.get("passed")), "error": text(c.get("error"))},
        })
    prov = {key: provenance.get(key) for key in PROVENANCE_KEYS}
    git = provenance.get("git") or {}
    prov["git"] = {"commit": git.get("commit"), "dirty": git.get("dirty")}
    prov["gpus"] = [{"name": g.get("name"), "uuid": g.get("uuid")} for g in provenance.get("gpus") or []
                    if isinstance(g, Mapping)]
    prov["commands"] = commands(provenance)
    namespace = provenance.get("namespace") or cfg.get("namespace")
    prov["namespace"] = namespace
    out = {"schema": SCHEMA, "namespace": namespace, "control": control, "interval": interval_kind(sweep),
           "verdicts": list(VERDICTS), "legacy_verdicts": dict(LEGACY_VERDICTS), "provenance": prov, "rows": rows}
    changed = change.rows(tables.get("change"))
    if changed:  # with a baseline revision: each kernel of ours against itself there, first in every report
        out["change"] = changed
    target_rows = targets.rows(tables.get("targets"))
    if target_rows:  # with targets in the config: each judged at each shape it names
        out["targets"] = target_rows
    known = resolution.rows(cfg, variants, tables.get("cross_check"), tables.get("census"))
    if known:  # with A/A twins or planted slowdowns: how the verdicts came out where the answer is known
        out["resolution"] = known
    for part in HEADLINE_KEYS:
        if headline is not None and part in headline:
            out[part] = headline[part]
    return out


# ------------------------------------------------------------------------------ reading and writing


def validate(summary: Any, where: str = "The summary") -> dict[str, Any]:
    """`summary` itself when it is a summary of this schema version; else EvidenceError, one
    sentence naming what is wrong."""
    if not isinstance(summary, Mapping):
        raise EvidenceError(f"{where} is not a JSON object, so it is no kernel evidence summary.")
    schema = summary.get("schema")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        raise EvidenceError(f"{where} names no schema {SCHEMA_PREFIX}N, so it is no kernel evidence summary.")
    if schema != SCHEMA:
        raise EvidenceError(f"{where} has schema {schema}, and this checkout reads {SCHEMA} only.")
    absent = [k for k in TOP_KEYS if k not in summary]
    if absent:
        raise EvidenceError(f"{where} lacks the key{'s' if len(absent) > 1 else ''} {', '.join(absent)} that {SCHEMA} requires.")
    if not isinstance(summary["rows"], list) or not isinstance(summary["provenance"], Mapping):
        raise EvidenceError(f"{where} has rows that are not a list or a provenance that is not an object.")
    for i, row in enumerate(summary["rows"]):
        lacking = [k for k in ROW_KEYS if not isinstance(row, Mapping) or k not in row]
        if lacking:
            raise EvidenceError(f"{where} row {i} lacks {', '.join(lacking)}, which {SCHEMA} requires of every row.")
    return dict(summary)


def write(summary: Mapping[str, Any], path: str | Path) -> None:
    """Write a valid summary as indented JSON, atomically (NaN is refused: JSON has none)."""
    validate(summary)
    write_text(json.dumps(summary, indent=1, ensure_ascii=False, allow_nan=False) + "\n", path)


def read(path: str | Path) -> dict[str, Any]:
    """The summary at `path`, validated; EvidenceError (one sentence) for a missing or unreadable
    file, text that is not JSON, or anything that is not a summary of schema SCHEMA."""
    p = Path(path)
    try:
        raw = p.read_text()
    except FileNotFoundError:
        raise EvidenceError(f"There is no summary at {p}.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EvidenceError(f"The summary {p} cannot be read ({type(exc).__name__}).") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise EvidenceError(f"The summary {p} is not JSON ({getattr(exc, 'msg', exc)} at line "
                            f"{getattr(exc, 'lineno', '?')}).") from None
    return validate(data, f"The summary {p}")


__all__ = ["BOOTSTRAP", "ENVELOPE", "LEGACY_VERDICTS", "NO_INTERVAL", "SCHEMA", "VERDICTS", "build", "commands", "integer",
           "interval_kind", "missing", "number", "read", "text", "truth", "validate", "verdict", "write"]
