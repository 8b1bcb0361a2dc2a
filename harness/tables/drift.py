"""Drift between two namespaces (docs/trust.md): every kernel measured in both with its role, and
the bound that our unchanged, cleanly captured kernels put on it, the control's move beside it
(drift.csv, `drift_bound`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from harness.io import row_dicts
from harness.tables.bands import ABOVE
from harness.tables.retained import LIBRARY_IMPLS, Retained, identity_change, kernel_identity, load_namespace
from harness.tables.phrases import _missing, _sentence, _pct, _and, _count, _flag_text, _float, _truthy

LIBRARY_REASON = "the library is not ours and may change with the driver and library version between sessions"

LIBRARY_NOTE = f"{LIBRARY_REASON}, so library baselines are never compared across namespaces"

DRIFT_COLUMNS = ["earlier", "current", "op", "shape", "impl", "before_us", "after_us", "change_pct",
                 "unchanged_kernel", "role", "reason", "band_status", "note"]

ROLES = ("bound", "control", "library", "changed", "excluded")
"""Drift row roles: `bound` (ours, same census, clean captures: these bound the drift), `control`
(judged against its band, never a bound), `library` (never compared), `changed` (our kernel's census
changed), `excluded` (ours, but a capture is not clean, or a figure or census is missing)."""

# Drift between two namespaces


_BAND_WORDS = {"inside": "inside its band", "below": "below its band", "above": "above its band, a suspect capture",
               "under load": "above its band, under load", "establishing": "with no band yet",
               "missing": "not measured"}


def _controls_by_key(controls: pd.DataFrame | None) -> dict[tuple[str, str], dict[str, Any]]:
    if controls is None or controls.empty or not {"op", "shape"} <= set(controls.columns):
        return {}
    return {(str(r["op"]), str(r["shape"])): r for r in row_dicts(controls)}


def _group_suspect(row: Mapping[str, Any] | None) -> str | None:
    """Why a controls row makes every capture of ours at its (op, shape) unfit to bound drift; None
    when it does not: the whole operation's captures are suspect (`suspect` group), or the control
    came back above its band and ours' own range cannot say the slowdown missed it."""
    if not row:
        return None
    status = str(row.get("status") or "")
    if str(row.get("suspect") or "") == "group":
        return "the whole operation's captures at this shape are suspect"
    if status in ABOVE and str(row.get("ours_position") or "") not in ("inside", "below"):
        return "the control came back above its band there and ours has no earlier range to show the slowdown missed it"
    if status == "outside" and str(row.get("side") or "") == "above":  # a controls.csv written before these rules
        return "the control came back above its band there"
    return None


def drift(current_ns_dir: str | Path | Retained, earlier_ns_dir: str | Path | Retained, *, control: str = "triton",
          controls: pd.DataFrame | None = None, earlier_controls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (op, shape, impl) measured in both namespaces: before_us (earlier), after_us (current),
    change_pct = (after − before) / before · 100 (positive: slower now), unchanged_kernel (same
    census in both), and its role:

    * `bound`: ours (not the control, not a library baseline), the same kernel in both, neither
      capture flagged by NVML, and no verdict that the whole operation's captures at that shape are
      suspect (`controls`, `earlier_controls`: the two namespaces' controls tables). Only these
      bound the drift.
    * `control`: the control, its move judged against its band (band_status: its status in `controls`).
    * `library`: a library baseline (`torch`), listed, never compared.
    * `changed`: ours, with another census in the two ('changed source', 'changed compiler',
      'changed options', 'changed specialization').
    * `excluded`: ours, same census, but its capture was flagged ('disturbed') or its group is
      suspect ('suspect group'); or without a census row in one ('no census'), without a time in one
      ('missing'), or every row when the namespaces ran on different GPU models ('different gpu') or
      cache modes ('different cache mode')."""
    cur = current_ns_dir if isinstance(current_ns_dir, Retained) else load_namespace(current_ns_dir)
    old = earlier_ns_dir if isinstance(earlier_ns_dir, Retained) else load_namespace(earlier_ns_dir)
    key = ["op", "shape", "impl"]
    verdict_now, verdict_then = _controls_by_key(controls), _controls_by_key(earlier_controls)
    out = []

    def frame(ns: Retained) -> pd.DataFrame:
        kt = ns.kernel_time
        if kt is None or kt.empty:
            return pd.DataFrame(columns=[*key, "kernel_time_us", "cache_mode"])
        kt = kt.copy()
        for c in key:
            kt[c] = kt[c].astype(str)
        if "cache_mode" not in kt:
            kt["cache_mode"] = None
        return kt.drop_duplicates(key, keep="last")

    after, before = frame(cur), frame(old)
    merged = after[[*key, "kernel_time_us", "cache_mode"]].merge(
        before[[*key, "kernel_time_us", "cache_mode"]], on=key, how="inner", suffixes=("_after", "_before"))
    gpu_differs = cur.gpu is not None and old.gpu is not None and cur.gpu != old.gpu
    between = f"between {old.namespace} and {cur.namespace}"
    for rec in row_dicts(merged):
        op, shape, impl = rec["op"], rec["shape"], rec["impl"]
        b, a = _float(rec["kernel_time_us_before"]), _float(rec["kernel_time_us_after"])
        pct = (a - b) / b * 100.0 if a is not None and b else None
        who = f"{impl}'s {op} {shape}"
        modes = (rec["cache_mode_before"], rec["cache_mode_after"])
        change = identity_change(kernel_identity(old.census, op, impl, shape), kernel_identity(cur.census, op, impl, shape))
        band_status = ""
        if impl in LIBRARY_IMPLS:
            role, reason, note = "library", "library baseline", f"{who} is a library baseline: {LIBRARY_NOTE}."
            change = "library"
        elif gpu_differs:
            role, reason = "excluded", "different gpu"
            note = f"{who} ran on {old.gpu} in {old.namespace} and on {cur.gpu} in {cur.namespace}, so its move is not drift."
        elif not any(_missing(m) for m in modes) and modes[0] != modes[1]:
            role, reason = "excluded", "different cache mode"
            note = f"{who} ran in {modes[0]} cache mode in {old.namespace} and {modes[1]} in {cur.namespace}, so its move is not drift."
        elif impl == control:
            role = "control"
            band_status = str((verdict_now.get((op, shape)) or {}).get("status") or "")
            if a is None or b is None:
                reason, note = "missing", f"{who} is the control and has no kernel time in one of the two namespaces."
            elif change is not None:
                reason = "no census" if change == "missing" else change
                # arg-type: pct is None only where b == 0, and _pct then raises TypeError, as it always has
                note = (f"{who} is the control; its kernel cannot be shown the same {between} ({reason}), so its move "
                        f"({_pct(pct)}) is not compared and never bounds drift.")  # type: ignore[arg-type]
            else:
                reason = "control"
                verdict = _BAND_WORDS.get(band_status, "not judged against a band here")
                if band_status == "inside" and str((verdict_now.get((op, shape)) or {}).get("nvml")) == "disturbed":
                    verdict = "inside its band, though NVML flagged captures there"
                # arg-type: pct is None only where b == 0, and _pct then raises TypeError, as it always has
                note = (f"{who} is the control: it moved {_pct(pct)} ({b:.2f} -> {a:.2f} µs) and this run's capture is "  # type: ignore[arg-type]
                        f"{verdict}; the control is judged against its band and never bounds drift.")
        elif a is None or b is None:
            role, reason, note = "excluded", "missing", f"{who} has no kernel time in one of the two namespaces."
        elif change == "missing":
            lacking = [ns.namespace for ns in (old, cur) if not kernel_identity(ns.census, op, impl, shape)]
            role, reason = "excluded", "no census"
            note = f"{who} has no census row serving that shape in {' or '.join(lacking)}, so it cannot be shown unchanged."
        elif change is not None:
            role, reason = "changed", change
            note = f"{who} {change.replace('changed ', 'changed its ')} {between}, so its move is not drift."
        else:
            flagged_in = [ns for ns in (old, cur) if ns.capture_flagged(op, shape, impl)]
            suspect = [(ns, why) for ns, verdicts in ((old, verdict_then), (cur, verdict_now))
                       if (why := _group_suspect(verdicts.get((op, shape))))]
            if flagged_in:
                role, reason = "excluded", "disturbed"
                said = "; ".join(f"in {ns.namespace}: {_flag_text([ns.capture_flags(op, shape, impl)])}" for ns in flagged_in)
                note = f"{who} is the same kernel in both, but NVML flagged its capture ({said}), so its move does not bound drift."
            elif suspect:
                role, reason = "excluded", "suspect group"
                said = "; ".join(f"in {ns.namespace}, {why}" for ns, why in suspect)
                note = f"{who} is the same kernel in both, but {said}, so its move does not bound drift."
            else:
                role, reason = "bound", ""
                unwatched = [ns.namespace for ns in (old, cur) if not ns.watched(op, shape, impl)]
                seen = (f"NVML flagged neither capture (it recorded nothing in {_and(unwatched)})" if unwatched
                        else "NVML saw both captures quiet")
                note = (f"{who} is the same kernel in both (the same census inputs, or the same SASS) and "
                        f"{seen}, so its move bounds the drift.")
                ctl = verdict_now.get((op, shape)) or {}
                if str(ctl.get("status") or "") in ABOVE:
                    note += (f" The control came back above its band at this shape in {cur.namespace}, but ours stayed "
                             f"in its own earlier range, so the slowdown hit the control's capture alone.")
        out.append({"earlier": old.namespace, "current": cur.namespace, "op": op, "shape": shape, "impl": impl,
                    "before_us": b, "after_us": a, "change_pct": pct, "unchanged_kernel": change is None,
                    "role": role, "reason": reason, "band_status": band_status, "note": note})
    return pd.DataFrame(out, columns=DRIFT_COLUMNS)


def _pair(r: Mapping[str, Any]) -> dict[str, Any]:
    return {"op": str(r["op"]), "shape": str(r["shape"]), "impl": str(r["impl"]), "before_us": float(r["before_us"]),
            "after_us": float(r["after_us"]), "change_pct": float(r["change_pct"]),
            "band_status": "" if _missing(r.get("band_status")) else str(r.get("band_status") or "")}


def _roles(df: pd.DataFrame) -> pd.Series:
    """Each row's role; a drift.csv written before roles existed: its unchanged non-library rows
    were its bound (the control among them, which those tables did not tell apart)."""
    if "role" in df:
        return df["role"].fillna("").astype(str)
    lib = df["impl"].astype(str).isin(LIBRARY_IMPLS)
    unchanged = df["unchanged_kernel"].map(_truthy)
    return pd.Series(["library" if l else ("bound" if u else "excluded") for l, u in zip(lib, unchanged)], index=df.index)


def _control_summary(name: str, pairs: list[dict[str, Any]], others: list[dict[str, Any]], max_pairs: int) -> str:
    """The control's move between the two namespaces, judged against its band, in one sentence."""
    def at(p: dict[str, Any]) -> str:
        return f"{p['op']} {p['shape']}: {p['before_us']:.2f} -> {p['after_us']:.2f} µs"

    inside = [p for p in pairs if p["band_status"] == "inside"]
    new = [p for p in pairs if p["band_status"] == "establishing"]
    rest = [p for p in pairs if p["band_status"] not in ("inside", "establishing")]
    clauses = []
    if inside:
        top = max(inside, key=lambda p: abs(p["change_pct"]))
        where = ("inside its band" if len(pairs) == 1 else "inside its band at every shape" if len(inside) == len(pairs)
                 else f"inside its band at {_count(len(inside), 'shape')}")
        clauses.append(f"moved by at most {abs(top['change_pct']):.1f}% ({at(top)}), {where}")
    if new:
        top = max(new, key=lambda p: abs(p["change_pct"]))
        where = ("with no band yet" if len(pairs) == 1 else "with no band yet at any shape" if len(new) == len(pairs)
                 else f"with no band yet at {_count(len(new), 'shape')}")
        clauses.append(f"moved by at most {abs(top['change_pct']):.1f}% ({at(top)}), {where}")
    for p in rest[:max_pairs]:
        verdict = _BAND_WORDS.get(p["band_status"], "not judged against a band here")
        if p["band_status"] in ABOVE:
            verdict += ", so that move is not drift"
        clauses.append(f"moved {_pct(p['change_pct'])} at {p['op']} {p['shape']} ({p['before_us']:.2f} -> "
                       f"{p['after_us']:.2f} µs), {verdict}")
    if len(rest) > max_pairs:
        clauses.append(f"was outside its band at {_count(len(rest) - max_pairs, 'more shape')}")
    if others:
        not_compared = [f"{o['op']} {o['shape']} ({o['reason']})" for o in others[:max_pairs]]
        if len(others) > max_pairs:
            not_compared.append(f"{len(others) - max_pairs} more")
        clauses.append(f"is not compared at {_and(not_compared)}")
    if not clauses:
        return ""
    return _sentence(f"The control ({name}) " + "; ".join(c if i == 0 else f"it {c}" for i, c in enumerate(clauses)))


def drift_bound(drift_df: pd.DataFrame | None, max_pairs: int = 8) -> dict[str, Any]:
    """The bound our unchanged, cleanly captured kernels put on drift (rows with role `bound`): the
    largest |change_pct|, the kernel that set it, how many kernels, the largest rise and fall, each
    pair and `summary` (one sentence); beside it `control`, the control's move judged against its
    band ({'name', 'count', 'max_abs_change_pct', 'at', 'inside_band', 'summary'}; None without
    control rows); `roles` (rows per role), `changed` and `excluded` (the rows of ours left out,
    with their reasons, and one sentence each: `changed_summary`, `excluded_summary`), and
    `sentence`, the bound and the control's move together."""
    df = drift_df if drift_df is not None else pd.DataFrame(columns=DRIFT_COLUMNS)
    earlier = str(df["earlier"].iloc[0]) if len(df) and "earlier" in df else None
    current = str(df["current"].iloc[0]) if len(df) and "current" in df else None
    roles = _roles(df) if len(df) else pd.Series(dtype=str)
    has_pct = df["change_pct"].notna() if len(df) else pd.Series(dtype=bool)
    bound_rows = df[(roles == "bound") & has_pct] if len(df) else df
    excluded = df[~df.index.isin(bound_rows.index)] if len(df) else df
    reasons = excluded["reason"].fillna("").astype(str).value_counts().to_dict() if len(excluded) else {}
    between = f"between {earlier} and {current}" if earlier and current else "between the two namespaces"
    pairs = [_pair(r) for r in row_dicts(bound_rows)]
    result: dict[str, Any] = {"earlier": earlier, "current": current, "count": len(pairs), "pairs": pairs,
                              "excluded": len(excluded), "excluded_reasons": reasons,
                              "roles": roles.value_counts().to_dict() if len(df) else {},
                              "max_abs_change_pct": None, "max_change_pct": None, "min_change_pct": None, "kernel": None}
    if pairs:
        top = max(pairs, key=lambda p: abs(p["change_pct"]))
        changes = [p["change_pct"] for p in pairs]
        result.update({"max_abs_change_pct": abs(top["change_pct"]), "max_change_pct": max(changes),
                       "min_change_pct": min(changes), "kernel": top})
        result["summary"] = _sentence(
            f"Drift {between} is at most {abs(top['change_pct']):.1f}% ({top['impl']} at {top['op']} {top['shape']}: "
            f"{top['before_us']:.2f} -> {top['after_us']:.2f} µs), from {_count(len(pairs), 'kernel')} of ours that did "
            f"not change")
    else:
        both = f"in both {earlier} and {current}" if earlier and current else "in both namespaces"
        result["summary"] = _sentence(f"No kernel of ours that did not change was captured cleanly {both}, so drift "
                                      f"between them is not bounded by any kernel")

    # the control, beside the bound
    ctl_rows = df[roles == "control"] if len(df) else df
    control_name = str(ctl_rows["impl"].iloc[0]) if len(ctl_rows) else None
    same = ctl_rows[(ctl_rows["reason"].fillna("").astype(str) == "control") & ctl_rows["change_pct"].notna()] if len(ctl_rows) else ctl_rows
    others = [{"op": str(r["op"]), "shape": str(r["shape"]), "reason": str(r["reason"])}
              for r in row_dicts(ctl_rows) if str(r.get("reason")) != "control"] if len(ctl_rows) else []
    if control_name is not None:
        cpairs = [_pair(r) for r in row_dicts(same)]
        inside = [p for p in cpairs if p["band_status"] == "inside"]
        ctl_top = max(inside or cpairs, key=lambda p: abs(p["change_pct"])) if cpairs else None
        result["control"] = {
            "name": control_name, "count": len(cpairs), "pairs": cpairs,
            "max_abs_change_pct": abs(ctl_top["change_pct"]) if ctl_top else None, "at": ctl_top,
            "inside_band": bool(cpairs) and len(inside) == len(cpairs),
            "not_inside": [p for p in cpairs if p["band_status"] != "inside"], "not_compared": others,
            "summary": _control_summary(control_name, cpairs, others, max_pairs),
        }
    else:
        result["control"] = None

    # ours left out, and why
    ours_out = df[roles.isin(["changed", "excluded"])] if len(df) else df
    result["changed"] = [{"op": str(r["op"]), "shape": str(r["shape"]), "impl": str(r["impl"]), "reason": str(r["reason"])}
                         for r in row_dicts(ours_out) if r["role"] == "changed"] if "role" in ours_out else []
    result["left_out"] = [{"op": str(r["op"]), "shape": str(r["shape"]), "impl": str(r["impl"]), "reason": str(r["reason"])}
                          for r in row_dicts(ours_out) if r["role"] == "excluded"] if "role" in ours_out else []

    def listing(rows: list[dict[str, Any]]) -> str:
        shown = [f"{r['impl']} at {r['op']} {r['shape']} ({r['reason']})" for r in rows[:max_pairs]]
        if len(rows) > max_pairs:
            shown.append(f"{len(rows) - max_pairs} more")
        return _and(shown)

    n_changed, n_left = len(result["changed"]), len(result["left_out"])
    result["changed_summary"] = (_sentence(f"{_count(n_changed, 'kernel')} of ours changed {between} and "
                                           f"{'does' if n_changed == 1 else 'do'} not bound drift: "
                                           f"{listing(result['changed'])}") if n_changed else "")
    result["excluded_summary"] = (_sentence(f"{_count(n_left, 'capture')} of ours left out of the bound: {listing(result['left_out'])}")
                                  if n_left else "")
    result["sentence"] = " ".join(s for s in (result["summary"], (result["control"] or {}).get("summary")) if s)
    return result


