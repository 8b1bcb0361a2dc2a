"""What the reports say of the change itself: each kernel of ours against itself at a baseline
revision (--config baseline=<revision>), measured in the same session and groups (change.csv,
harness.tables.derive.CHANGE_COLUMNS). With a baseline, the field note, the issue comment and the
page open with it, and summary.json carries the same rows under `change`.

`context` is what the templates print (numbers formatted here, strings escaped by the templates);
`rows` is what summary.json holds (numbers as numbers). Both come from the one table; the
control's state at each shape is the controls table's `status` there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.report.words import number, ratio_text, text, us_text
from harness.tables import stats



def verdict(value: Any) -> str | None:
    """A verdict cell as one of the four verdicts, or None."""
    said = text(value)
    return said if said in stats.VERDICTS else None


def _records(frame: Any) -> list[dict[str, Any]]:
    if frame is None or len(frame) == 0:
        return []
    return list(frame.to_dict("records"))


def _control_states(controls: Any) -> dict[tuple[str, str], str]:
    return {(str(r.get("op")), str(r.get("shape"))): str(r.get("status") or "")
            for r in _records(controls)}


def rows(change: Any) -> list[dict[str, Any]]:
    """summary.json's `change`: one object per (revision, op, shape, impl), in the table's order."""
    out = []
    for r in _records(change):
        out.append({"revision": text(r.get("revision")), "commit": text(r.get("commit")), "op": text(r.get("op")),
                    "shape": text(r.get("shape")), "impl": text(r.get("impl")),
                    "current_us": number(r.get("current_us")), "baseline_us": number(r.get("baseline_us")),
                    "ratio": number(r.get("ratio")), "lo": number(r.get("ratio_lo")), "hi": number(r.get("ratio_hi")),
                    "verdict": verdict(r.get("verdict"))})
    return out


def context(change: Any, controls: Any = None, order: Mapping[str, int] | None = None) -> dict[str, Any] | None:
    """The templates' `change`: None without a baseline; else its revisions in the order the
    table first names them, each with its commit and rows (op, shape, impl, current and baseline
    kernel time, ratio with its interval, verdict, the control's state at that shape), the
    operations in `order` (name -> position) and the counts of each verdict."""
    records = _records(change)
    if not records:
        return None
    states = _control_states(controls)
    revisions: dict[str, dict[str, Any]] = {}
    for r in records:
        label = str(r.get("revision"))
        rev = revisions.setdefault(label, {"label": label, "commit": text(r.get("commit")) or "unknown", "rows": [],
                                           "counts": {v: 0 for v in stats.VERDICTS}})
        said = verdict(r.get("verdict"))
        if said is not None:
            rev["counts"][said] += 1
        state = states.get((str(r.get("op")), str(r.get("shape"))))
        rev["rows"].append({
            "op": str(r.get("op")), "shape": str(r.get("shape")), "impl": str(r.get("impl")),
            "current": us_text(r.get("current_us")), "baseline": us_text(r.get("baseline_us")),
            "ratio": ratio_text(r.get("ratio"), r.get("ratio_lo"), r.get("ratio_hi")),
            "verdict": said or "no verdict",
            "control": state if state else "not judged",
        })
    rank = order or {}
    for rev in revisions.values():
        rev["rows"].sort(key=lambda row: (rank.get(row["op"], len(rank)), row["op"]))
    return {"revisions": list(revisions.values()), "labels": list(revisions)}
