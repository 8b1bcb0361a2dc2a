"""Control bands and the verdict on the current namespace's control (docs/trust.md): the min-max of
the control's kernel time over the earlier namespaces NVML did not flag, widened by the margin;
the control's status against it, what NVML saw, whether a pairing ranks, and the notes that say
so (controls.csv)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
import yaml

from harness import ROOT
from harness.errors import EvidenceError
from harness.io import row_dicts
from harness.tables.retained import Retained, identity_change, kernel_identity, retained
from harness.tables.phrases import (_and, _count, _flag_text, _float, _missing, _sentence, _span, _truthy, _us,
                                    in_parentheses, set_aside_cell, set_aside_items, set_aside_text)


def _schema_margin() -> float:
    with open(ROOT / "workflow" / "schemas" / "config.schema.yaml") as fh:
        return float(yaml.safe_load(fh)["properties"]["trust"]["properties"]["margin"]["default"])


MARGIN = _schema_margin()
"""The control band's margin where none is given: the config schema's `trust.margin` default, the
one place it is written."""

OUTLIER_MADS = 3.0
"""How far above the median of a band's sessions (in scaled median absolute deviations, and at least
twice the margin) a session without an NVML record may lie before it is taken for load and set
aside; sessions NVML saw quiet are never set aside for where they fell."""

OURS = "cuda"
"""Our implementation whose own earlier range says whether a slowdown hit the whole operation."""

BAND_COLUMNS = ["op", "shape", "control", "observed_min_us", "observed_max_us", "band_lo_us", "band_hi_us", "margin",
                "n_namespaces", "namespaces", "unrecorded", "min_namespace", "max_namespace", "set_aside"]

CONTROL_COLUMNS = ["op", "shape", "control", "kernel_time_us", "band_lo_us", "band_hi_us", "observed_min_us",
                   "observed_max_us", "margin", "n_namespaces", "namespaces", "unrecorded", "set_aside", "status", "under_load",
                   "rankable", "suspect", "nvml", "nvml_flags", "own_power_cap", "ours", "ours_us", "ours_lo_us", "ours_hi_us",
                   "ours_namespaces", "ours_position", "split_gpus", "note", "claim_note"]

STATUSES = ("inside", "below", "above", "under load", "establishing", "missing")
"""Control statuses. `above`: above its band while NVML saw nothing (or recorded nothing) at that
shape, a suspect capture; `under load`: above its band while NVML flagged the captures there."""

ABOVE = ("above", "under load")

# Control bands


def _as_set(exclude: str | Iterable[str] | None) -> set[str]:
    if exclude is None:
        return set()
    return {exclude} if isinstance(exclude, str) else set(exclude)


def _set_aside_reason(ns: Retained, rec: Mapping[str, Any], impl: str, current_census: pd.DataFrame | None,
                      gpu: str | None, cache_mode: str | None) -> str | None:
    """Why this namespace's capture of `impl` at (op, shape) is left out of a band; None when it
    enters it (same GPU model, cache mode and kernel, and NVML flagged none of its captures there;
    a capture NVML did not record is unknown, not loaded, and enters: `_far_above` guards it)."""
    op, shape = str(rec["op"]), str(rec["shape"])
    mode = rec.get("cache_mode")
    if gpu is not None and ns.gpu is not None and ns.gpu != gpu:
        return f"another GPU model: {ns.gpu}"
    if cache_mode is not None and not _missing(mode) and str(mode) != cache_mode:
        return f"{mode} cache mode"
    if current_census is not None:
        mine = kernel_identity(ns.census, op, impl, shape)
        change = identity_change(mine, kernel_identity(current_census, op, impl, shape))
        if change == "missing" and not mine:
            return "no census row for the kernel"
        if change is not None and change != "missing":
            return f"{impl} kernel {change.replace('changed ', 'changed its ')}"
    flagged = ns.group_flags(op, shape)
    if flagged:
        return f"NVML flagged its captures there: {_flag_text(flagged.values())}"
    return None


def _far_above(points: list[tuple[float, tuple[str, str], str, bool]], margin: float) -> set[str]:
    """The sessions without an NVML record that lie so far above the median of all the band's
    sessions that they are taken for load: more than OUTLIER_MADS scaled median absolute deviations
    and more than twice the margin above it (with fewer than three sessions no centre is robust, so
    none is). Load only slows a kernel, so only the upper side is tested; the median and the MAD are
    symmetric in the sessions, so the band still depends on their set only."""
    if len(points) < 3 or all(not unrecorded for *_, unrecorded in points):
        return set()
    values = sorted(p[0] for p in points)
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    devs = sorted(abs(v - median) for v in values)
    mad = devs[mid] if len(devs) % 2 else (devs[mid - 1] + devs[mid]) / 2
    allowed = max(OUTLIER_MADS * 1.4826 * mad, 2 * margin * median)
    return {name for value, _, name, unrecorded in points if unrecorded and value > median + allowed}


def control_bands(history_like: Any, control: str = "triton", margin: float = MARGIN,
                  exclude: str | Iterable[str] | None = None, *, current_census: pd.DataFrame | None = None,
                  gpu: str | None = None, cache_mode: str | None = None) -> pd.DataFrame:
    """Per (op, shape): the min and max of `control`'s kernel_time_us over the namespaces of the
    history (other than `exclude`) whose captures there NVML did not flag, and the band widened by
    the margin: lo·(1−margin), hi·(1+margin). `unrecorded` names the band's namespaces without an
    NVML record of the control's capture there (what NVML would have seen is unknown).

    A namespace that measured the control at an (op, shape) is set aside there, with its reason in
    `set_aside` ('name, name2 (why); name3 (why2)': phrases.set_aside_cell), when it ran on another
    GPU model than `gpu`, in another cache mode than `cache_mode`, with another control kernel
    serving that shape than `current_census` names (kernel_identity; or without a census row for
    it), with any of its captures there flagged by NVML, or, without an NVML record, far above the
    median of the band's sessions (`_far_above`: one loaded session without a record cannot widen
    the band). Nothing else sets a namespace aside (never where its control fell against some other
    band), so the band depends on the set of namespaces only: permuting the history gives the same
    rows. Namespaces are listed by date, then name; rows are sorted by (op, shape). An (op, shape)
    where every namespace was set aside keeps a row with n_namespaces 0 and no band."""
    if not 0 <= margin < 1:
        raise EvidenceError(f"trust: the control band margin must be at least 0 and below 1, not {margin}.")
    skip = _as_set(exclude)
    points: dict[tuple[str, str], list[tuple[float, tuple[str, str], str, bool]]] = {}
    aside: dict[tuple[str, str], dict[str, tuple[tuple[str, str], str]]] = {}
    for ns in retained(history_like):
        if ns.namespace in skip:
            continue
        kt = ns.kernel_time
        if kt is None or kt.empty or "impl" not in kt:
            continue
        for rec in row_dicts(kt[kt["impl"].astype(str) == control]):
            value = _float(rec.get("kernel_time_us"))
            if value is None:
                continue
            key = (str(rec["op"]), str(rec["shape"]))
            why = _set_aside_reason(ns, rec, control, current_census, gpu, cache_mode)
            if why is None:
                points.setdefault(key, []).append((value, ns.order_key(), ns.namespace,
                                                   not ns.watched(key[0], key[1], control)))
            else:
                aside.setdefault(key, {}).setdefault(ns.namespace, (ns.order_key(), why))
    out = []
    for key in sorted({*points, *aside}):
        pts = points.get(key, [])
        far = _far_above(pts, margin)
        for value, order, name, _ in pts:
            if name in far:
                aside.setdefault(key, {})[name] = (order, f"no NVML record, and at {_us(value)} far above the other "
                                                          f"sessions, as load would put it")
        pts = [p for p in pts if p[2] not in far]
        used = {n for _, _, n, _ in pts}
        left = sorted((k, n, why) for n, (k, why) in aside.get(key, {}).items() if n not in used)
        names = [n for _, n in sorted({(k, n) for _, k, n, _ in pts})]
        unrecorded = [n for _, n in sorted({(k, n) for _, k, n, u in pts if u})]
        row: dict[str, Any] = {"op": key[0], "shape": key[1], "control": control, "margin": margin,
                               "n_namespaces": len(names), "namespaces": ";".join(names),
                               "unrecorded": ";".join(unrecorded),
                               "set_aside": set_aside_cell((n, why) for _, n, why in left)}
        if pts:
            lo = min(pts, key=lambda p: (p[0], p[1]))
            hi = min(pts, key=lambda p: (-p[0], p[1]))
            row.update({"observed_min_us": lo[0], "observed_max_us": hi[0], "min_namespace": lo[2],
                        "max_namespace": hi[2], "band_lo_us": lo[0] * (1 - margin), "band_hi_us": hi[0] * (1 + margin)})
        else:
            row.update({"observed_min_us": None, "observed_max_us": None, "min_namespace": None,
                        "max_namespace": None, "band_lo_us": None, "band_hi_us": None})
        out.append(row)
    return pd.DataFrame(out, columns=BAND_COLUMNS)


# --------------------------------------------------------------------------------------------
# Classifying the current namespace's control


def _unrecorded(row: Mapping[str, Any], column: str = "unrecorded") -> list[str]:
    return [n for n in str(row.get(column) or "").split(";") if n and not _missing(row.get(column))]


def _in_namespaces(n: int, names: str, unrecorded: Sequence[str] = ()) -> str:
    """Which sessions a band rests on: quiet ones (NVML saw them), or sessions NVML did not flag of
    which some (or all) it did not record, which the sentence says."""
    k = len(unrecorded)
    if not k:
        return f"across {n} quiet namespaces" if n != 1 else f"in the quiet namespace {names}"
    if k == n:
        return (f"across {n} namespaces without an NVML record" if n != 1
                else f"in the namespace {names}, which has no NVML record")
    return f"across {n} namespaces NVML did not flag, {k} of them without an NVML record"


def _band_text(row: Mapping[str, Any]) -> str:
    lo, hi, n = float(row["band_lo_us"]), float(row["band_hi_us"]), int(row["n_namespaces"])
    omin, omax = float(row["observed_min_us"]), float(row["observed_max_us"])
    where = _in_namespaces(n, row["namespaces"], _unrecorded(row))
    observed = f"observed {_span(omin, omax)} {where}" if omin != omax else f"observed at {_us(omin)} {where}"
    return f"its band of {_span(lo, hi)} ({observed}, widened by {float(row['margin']) * 100:g}%)"


def _value(kt: pd.DataFrame, impl: str) -> tuple[float | None, str | None]:
    rows = kt[kt["impl"].astype(str) == impl]
    if rows.empty:
        return None, None
    rec = rows.iloc[0]
    uuid = rec.get("gpu_uuid") if "gpu_uuid" in rows else None
    return _float(rec.get("kernel_time_us")), (None if _missing(uuid) else str(uuid))


def _ours_sentence(ours: str, value: float | None, position: str, row: Mapping[str, Any], under_load: bool,
                   ours_flagged: bool) -> str:
    """What ours did while the control came back above its band: stayed in its own earlier range
    (the slowdown hit the control's capture) or moved too (the whole operation's captures)."""
    if value is None:
        return f"Ours ({ours}) was not measured at this shape, so whether the slowdown hit it too is unknown."
    if position == "no range":
        return (f"Ours ({ours}) came back at {_us(value)}, but no earlier quiet namespace captured the same kernel "
                f"at this shape, so whether the slowdown hit it too is unknown.")
    span = _span(float(row["ours_lo_us"]), float(row["ours_hi_us"]))
    n, k = int(row["_ours_n"]), len(row["_ours_unrecorded"])
    sessions = (_count(n, "quiet namespace") if not k else _count(n, "namespace") + " without an NVML record" if k == n
                else f"{_count(n, 'namespace')} NVML did not flag, {k} without an NVML record")
    where = f"its own earlier range of {span} (the same kernel in {sessions}, widened by the margin)"
    if position == "above":
        return (f"Ours ({ours}) came back at {_us(value)}, above {where} too: ours moved with the control, so the "
                f"whole operation's captures at this shape are suspect.")
    side = "inside" if position == "inside" else "below"
    lead = f"Ours ({ours}) came back at {_us(value)}, {side} {where}"
    if side == "below":
        lead += ", which load cannot cause"
    if ours_flagged:
        return f"{lead}, though NVML flagged its capture too, so the load reached the whole operation's captures."
    if under_load:
        return f"{lead}: the load hit the control's capture, not the whole operation."
    return f"{lead}: whatever slowed the control's capture did not slow ours, so it hit the control's capture, not the whole operation."


def classify_controls(current_kernel_time: pd.DataFrame, bands: pd.DataFrame, control: str = "triton", *,
                      gpu_state: pd.DataFrame | None = None, ours: str = OURS, ours_bands: pd.DataFrame | None = None,
                      margin: float | None = None) -> pd.DataFrame:
    """Per (op, shape) of the current namespace: the control's kernel time against its band, what
    NVML saw (`gpu_state`, the namespace's gpu_state.csv), and a verdict.

    status: `inside`; `below` (faster than every earlier quiet capture, which load cannot cause);
    `above` (above its band while NVML saw nothing there: a suspect capture); `under load` (above
    its band while NVML flagged the captures there); `establishing` (no band: no earlier quiet
    namespace measured it); `missing` (this run did not measure the control there).
    rankable: a pairing with the control at this shape can be ranked: the control is inside or
    below its band (or establishing with NVML seeing its capture quiet), NVML flagged no capture at
    this shape, and ours ran on the same GPU as the control. suspect: which capture is suspect,
    `control` or `group` (the whole operation's captures: ours moved out of its own earlier range
    too, `ours_bands`, or NVML flagged ours or another capture there), or empty. note: the verdict
    in sentences; claim_note: what a claim prints instead of a ratio where the row is not rankable."""
    kt = current_kernel_time
    now = Retained("current", kt, gpu_state=gpu_state)
    out = []
    band_by_key = {(str(r["op"]), str(r["shape"])): r for r in row_dicts(bands)} if not bands.empty else {}
    ours_by_key = ({(str(r["op"]), str(r["shape"])): r for r in row_dicts(ours_bands)}
                   if ours_bands is not None and not ours_bands.empty else {})
    for (op, shape), grp in kt.groupby(["op", "shape"], sort=False):
        op, shape = str(op), str(shape)
        who = f"{control}'s {op} {shape}"
        value, ctl_gpu = _value(grp, control)
        ours_value, ours_gpu = _value(grp, ours) if ours != control else (None, None)
        band = band_by_key.get((op, shape))
        has_band = band is not None and not _missing(band.get("band_lo_us"))
        flagged = now.group_flags(op, shape)
        own_cap = now.own_power_cap(op, shape)
        nvml = "disturbed" if flagged else ("quiet" if now.watched(op, shape, control) else "unknown")
        row: dict[str, Any] = {"op": op, "shape": shape, "control": control, "kernel_time_us": value,
                               "band_lo_us": None, "band_hi_us": None, "observed_min_us": None, "observed_max_us": None,
                               "margin": margin, "n_namespaces": 0, "namespaces": "",
                               "set_aside": (band or {}).get("set_aside") or "", "nvml": nvml,
                               "nvml_flags": _flag_text(flagged.values()) if flagged else "", "own_power_cap": own_cap,
                               "ours": ours if ours != control else "", "ours_us": ours_value, "ours_lo_us": None,
                               "ours_hi_us": None, "ours_namespaces": "", "ours_position": "",
                               "split_gpus": bool(ctl_gpu and ours_gpu and ctl_gpu != ours_gpu), "_ours_n": 0,
                               "_ours_unrecorded": []}
        if has_band:
            assert band is not None  # has_band implies it
            row.update({k: band.get(k) for k in ("band_lo_us", "band_hi_us", "observed_min_us", "observed_max_us",
                                                 "margin", "n_namespaces", "namespaces", "unrecorded")})
        obands = ours_by_key.get((op, shape))
        if ours != control:
            if ours_value is None:
                row["ours_position"] = "not measured"
            elif obands is None or _missing(obands.get("band_lo_us")):
                row["ours_position"] = "no range"
            else:
                olo, ohi = float(obands["band_lo_us"]), float(obands["band_hi_us"])
                row.update({"ours_lo_us": olo, "ours_hi_us": ohi, "ours_namespaces": obands["namespaces"],
                            "_ours_n": int(obands["n_namespaces"]), "_ours_unrecorded": _unrecorded(obands),
                            "ours_position": "above" if ours_value > ohi else ("below" if ours_value < olo else "inside")})

        # status
        if value is None:
            status = "missing"
        elif not has_band:
            status = "establishing"
        elif value > float(row["band_hi_us"]):
            status = "under load" if flagged else "above"
        elif value < float(row["band_lo_us"]):
            status = "below"
        else:
            status = "inside"
        row["status"] = status
        row["under_load"] = status == "under load"

        # suspect and rankable
        ours_flagged = ours in flagged
        clean = status in ("inside", "below") or (status == "establishing" and nvml == "quiet")
        capped_clean = own_cap and clean  # the power cap alone, in the group's own windows, and the control in its band
        if status in ABOVE:
            row["suspect"] = "group" if (row["ours_position"] == "above" or ours_flagged) else "control"
        elif flagged and status != "missing" and not capped_clean:
            row["suspect"] = "control" if set(flagged) == {control} else "group"
        else:
            row["suspect"] = ""
        row["rankable"] = bool(clean and (not flagged or capped_clean) and not row["split_gpus"])

        # sentences
        flagged_captures = f"the {_and(sorted(flagged))} {'capture' if len(flagged) == 1 else 'captures'} at this shape"
        flag_clause = f"NVML flagged {flagged_captures} {in_parentheses(row['nvml_flags'])}" if flagged else ""
        own_cap_clause = (f"{flag_clause}, read in the group's own windows and for nothing else: a cap there holds "
                          f"the clock down under every implementation of its interleaved rounds alike "
                          f"(docs/method.md#a-quiet-gpu-watched)")
        parts: list[str] = []
        if status == "missing":
            parts.append(f"This run did not measure {control} at {op} {shape}, so no control judges the captures there.")
            if flagged:
                parts.append(f"{flag_clause}.")
        elif status == "establishing":
            assert value is not None  # only status "missing" has no value
            sa = f" (set aside: {set_aside_text((n, why, '') for n, why in set_aside_items(row['set_aside']))})" if row["set_aside"] else ""
            nvml_said = {"quiet": "which saw no other process and no throttling during the captures at this shape",
                         "unknown": "which recorded nothing for its capture",
                         "disturbed": f"which flagged {flagged_captures} {in_parentheses(row['nvml_flags'])}"}[nvml]
            parts.append(f"No earlier quiet namespace measured {who}{sa}: its band is being established with this "
                         f"run, at {_us(value)}, and until then it is judged by NVML alone, {nvml_said}.")
        else:
            assert value is not None  # only status "missing" has no value
            text = _band_text(row)
            head = f"{who} came back at {_us(value)}"
            if status == "inside":
                if capped_clean:
                    parts.append(f"{head}, inside {text}; {own_cap_clause}.")
                elif flagged:
                    parts.append(f"{head}, inside {text}, but {flag_clause}: not a clean capture.")
                elif nvml == "unknown":
                    parts.append(f"{head}, inside {text}: a clean capture by its band (NVML recorded nothing for it).")
                else:
                    parts.append(f"{head}, inside {text}: a clean capture.")
            elif status == "below":
                parts.append(f"{head}, below {text}: faster than any earlier quiet capture, which load cannot cause "
                             f"(the GPU ran faster this session, or the band is too narrow).")
                if flagged:
                    parts.append(f"{own_cap_clause if capped_clean else flag_clause}.")
            elif status == "above":
                nvml_saw = ("while NVML saw no other process and no throttling during the captures at this shape"
                            if nvml == "quiet" else "while NVML recorded nothing for its capture")
                parts.append(f"{head}, above {text}, {nvml_saw}: the control's capture is suspect (above its band, "
                             f"not shown to be under load).")
                parts.append(_ours_sentence(ours, ours_value, row["ours_position"], row, False, ours_flagged))
            else:  # under load
                parts.append(f"{head}, above {text}, and {flag_clause}: it ran under load.")
                parts.append(_ours_sentence(ours, ours_value, row["ours_position"], row, True, ours_flagged))
        if row["split_gpus"]:
            parts.append(f"Ours ({ours}) ran on {ours_gpu} and {control} on {ctl_gpu}, so this pairing compares two devices.")
        if row["rankable"]:
            parts.append(f"Ours can be ranked against {control} at this shape.")
        elif status == "missing":
            parts.append(f"No ranking against {control} follows there.")
        else:
            parts.append(f"No ranking follows from {control}'s pairings at this shape.")
        row["note"] = " ".join(_sentence(p) for p in parts if p)

        # claim note: what a claim prints instead of a ratio
        row["claim_note"] = ""
        if not row["rankable"]:
            reasons = []
            if status == "missing":
                reasons.append(f"this run did not measure {control} at this shape")
            elif status in ABOVE:
                assert value is not None  # only status "missing" has no value
                reasons.append(f"{control}'s capture ({_us(value)}) came back above its band"
                               + (" under load" if status == "under load" else ", a suspect capture"))
            elif status == "establishing" and nvml == "unknown":
                reasons.append(f"{control} has no band yet at this shape and NVML recorded nothing for its capture")
            if flagged and status != "under load":
                reasons.append(flag_clause)
            if row["split_gpus"]:
                reasons.append(f"ours ran on {ours_gpu} and {control} on {ctl_gpu}")
            because = _and(reasons)
            if ours_value is not None and has_band and status in ABOVE:
                claim = (f"Ours ({ours}) at {_us(ours_value)} against the control's band of "
                         f"{_span(float(row['band_lo_us']), float(row['band_hi_us']))}; no ranking follows from this "
                         f"pairing, because {because}.")
            elif ours_value is not None and value is not None:
                # the band is not what stops the ranking here, so ours is not set against it
                claim = (f"Ours ({ours}) at {_us(ours_value)} and {control} at {_us(value)}"
                         f"{'' if has_band else ' (no band yet)'}; no ranking follows from this pairing, because {because}.")
            else:
                claim = f"No ranking against {control} follows at {op} {shape}, because {because}."
            claims = [claim]
            if status in ABOVE:
                claims.append(_ours_sentence(ours, ours_value, row["ours_position"], row, status == "under load",
                                             ours_flagged))
            row["claim_note"] = " ".join(_sentence(c) for c in claims)
        row.pop("_ours_n")
        row.pop("_ours_unrecorded")
        out.append(row)
    return pd.DataFrame(out, columns=CONTROL_COLUMNS)


def rankable(controls_df: pd.DataFrame | None, op: str, shape: str) -> bool:
    """Whether a pairing with the control at (op, shape) can be ranked, from a controls table: its
    `rankable` column, or for a table written before that column existed, a status of inside,
    below or establishing without under_load. False where the table has no row for (op, shape)
    (no control judged the captures there) or there is no table."""
    if controls_df is None or controls_df.empty or not {"op", "shape"} <= set(controls_df.columns):
        return False
    rows = controls_df[(controls_df["op"].astype(str) == op) & (controls_df["shape"].astype(str) == shape)]
    if rows.empty:
        return False
    rec = rows.iloc[0]
    if "rankable" in rows and not _missing(rec.get("rankable")):
        return _truthy(rec.get("rankable"))
    return str(rec.get("status")) in ("inside", "below", "establishing") and not _truthy(rec.get("under_load"))


