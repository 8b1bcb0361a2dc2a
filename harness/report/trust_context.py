"""What a report template needs from the trust tables (`report_context`): the controls with their
verdicts, the namespaces left out of the bands and one sentence naming them, the drift rows and
bound, the flag lines and the clean clauses (harness.tables.flags.review)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.report.words import records
from harness.tables import trust
from harness.tables.phrases import _and, _count, _sentence, _truthy, set_aside_items, set_aside_text


def report_context(controls: str | Path | pd.DataFrame | None, drifted: str | Path | pd.DataFrame | None, *,
                   counters: str | Path | pd.DataFrame | None = None, check: str | Path | pd.DataFrame | None = None,
                   kernel_time: str | Path | pd.DataFrame | None = None,
                   gpu_state: str | Path | pd.DataFrame | None = None) -> dict[str, Any]:
    """What a report template needs from the trust tables, given as paths or DataFrames (any may be
    absent: a namespace retained before these tables existed has neither controls nor drift).

    controls (rows, with rankable/under_load as booleans), by_key ('op shape' -> row), rankable
    ('op shape' -> bool), above (status above or under load), under_load, below, outside (above,
    under load or below), suspect (rows with a suspect capture), not_rankable, establishing,
    set_aside ([{op, shape, namespace, reason}] for every namespace left out of a band) and
    set_aside_summary (one sentence naming them, '' when none), any_band,
    drift (rows), bound (drift_bound: `summary`, `control`, `sentence`, ...), earlier, flags
    and clean (review(...) of the tables given: the flags, and the clause of every check that ran
    and raised none), library_note, library_reason."""

    ctl, dft = trust.table(controls), trust.table(drifted)
    checked = trust.review(ctl, dft, counters, check, kernel_time, gpu_state)
    rows = records(ctl)
    for r in rows:
        r["under_load"] = _truthy(r.get("under_load"))
        r["rankable"] = trust.rankable(ctl, str(r["op"]), str(r["shape"]))
    bound = trust.drift_bound(dft) if dft is not None and len(dft) else None
    margins = [r["margin"] for r in rows if r.get("margin") is not None]
    set_aside = [{"op": r["op"], "shape": r["shape"], "namespace": name, "reason": why}
                 for r in rows for name, why in set_aside_items(r.get("set_aside"))]
    above = [r for r in rows if r.get("status") in trust.ABOVE or (r.get("status") == "outside" and r.get("side") == "above")]
    left: dict[tuple[str, str], list[str]] = {}
    for aside in set_aside:
        left.setdefault((aside["namespace"], aside["reason"]), []).append(f"{aside['op']} {aside['shape']}")
    set_aside_summary = _sentence("Left out of the control bands: " + set_aside_text(
        (name, reason, f"at {_and(where) if len(where) <= 3 else _count(len(where), 'shape')}")
        for (name, reason), where in left.items())) if left else ""
    return {
        "controls": rows,
        "by_key": {f"{r['op']} {r['shape']}": r for r in rows},
        "rankable": {f"{r['op']} {r['shape']}": r["rankable"] for r in rows},
        "control": rows[0]["control"] if rows else None,
        "margin": margins[0] if margins else None,
        "above": above,
        "under_load": [r for r in rows if r["under_load"]],
        "below": [r for r in rows if r.get("status") == "below"],
        "outside": [r for r in rows if r.get("status") in ("above", "under load", "below", "outside")],
        "suspect": [r for r in rows if r.get("suspect")],
        "not_rankable": [r for r in rows if not r["rankable"]],
        "establishing": [r for r in rows if r.get("status") == "establishing"],
        "set_aside": set_aside,
        "set_aside_summary": set_aside_summary,
        "any_band": any(r.get("band_lo_us") is not None for r in rows),
        "drift": records(dft),
        "bound": bound,
        "earlier": bound["earlier"] if bound else None,
        "flags": checked.flags,
        "clean": checked.clean,
        "library_note": trust.LIBRARY_NOTE,
        "library_reason": trust.LIBRARY_REASON,
    }
