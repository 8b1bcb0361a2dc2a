"""How far a namespace's numbers can be trusted: control bands and drift between namespaces.

Three rules, from the original study (where they were applied by hand):

* **Same-session controls with a known band.** One implementation (the control, `triton` by default)
  is captured in every session. Its kernel times across the retained namespaces, widened by a
  margin, form a band per (op, shape); a capture whose control comes back above its band probably
  ran under load, so comparisons quote the band instead of that capture. A control with no earlier
  namespace at that (op, shape) is `establishing` its band.
* **Drift bounded by the kernels that did not change.** Between two namespaces, only kernels whose
  census (source hash, compiler, options, kernel and specialization serving that shape) is the same
  in both are compared; how far those moved bounds the drift between the sessions.
* **Library baselines are never compared across sessions.** `torch` is not ours and may change with
  the driver and library version between sessions; its rows are listed, never used as a bound.

Inputs are the retained tables (`artifacts/<ns>/tables/*.csv`, `provenance.json`) or the history
index (harness.history); outputs are DataFrames, and `trust_tables` writes them as
`tables/controls.csv` and `tables/drift.csv` of the current namespace, so a report quotes a table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import sqlite_utils

from harness.errors import ConfigError, EvidenceError
from harness.io import write_csv
from harness.tables import history

LIBRARY_IMPLS = ("torch",)
"""Library baselines: never compared across namespaces."""

LIBRARY_REASON = "the library is not ours and may change with the driver and library version between sessions"
LIBRARY_NOTE = f"{LIBRARY_REASON}, so library baselines are never compared across namespaces"

BAND_COLUMNS = ["op", "shape", "control", "observed_min_us", "observed_max_us", "band_lo_us", "band_hi_us", "margin",
                "n_namespaces", "namespaces", "min_namespace", "max_namespace", "set_aside"]
CONTROL_COLUMNS = ["op", "shape", "control", "kernel_time_us", "band_lo_us", "band_hi_us", "observed_min_us",
                   "observed_max_us", "margin", "n_namespaces", "namespaces", "status", "side", "under_load", "note"]
DRIFT_COLUMNS = ["earlier", "current", "op", "shape", "impl", "before_us", "after_us", "change_pct",
                 "unchanged_kernel", "reason", "note"]
IDENTITY_COLUMNS = ["kernel", "specialization", "source_sha256", "compiler", "options"]


# --------------------------------------------------------------------------------------------
# Loading retained namespaces


@dataclass
class Retained:
    """One retained namespace as the trust rules see it."""

    namespace: str
    kernel_time: pd.DataFrame
    census: pd.DataFrame | None = None
    gpu: str | None = None
    under_load: set[tuple[str, str]] = field(default_factory=set)
    """(op, shape) whose control that namespace itself found above its band (its controls.csv)."""
    disturbed: bool = False
    """True where NVML saw another process or a slowing throttle reason during any of its captures
    (its gpu_state.csv); such a namespace is never the one drift is bounded against."""


def _read(path: Path) -> pd.DataFrame | None:
    return history.read_table(path) if path.is_file() else None


def _gpu_name(provenance: Mapping[str, Any]) -> str | None:
    return history.gpu_model(provenance.get("gpus") or [])


def _loaded_points(controls: pd.DataFrame | None) -> set[tuple[str, str]]:
    if controls is None or controls.empty or "under_load" not in controls:
        return set()
    flagged = controls[controls["under_load"].map(_truthy)]
    return {(str(r.op), str(r.shape)) for r in flagged.itertuples()}


def _any_disturbed(state: pd.DataFrame | None) -> bool:
    if state is None or state.empty or "disturbed" not in state:
        return False
    return bool(state["disturbed"].map(_truthy).any())


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value) and not (isinstance(value, float) and math.isnan(value))


def load_namespace(ns_dir: str | Path) -> Retained:
    """A namespace folder's kernel time, census, GPU and its own under-load flags."""
    ns_dir = Path(ns_dir)
    tables = ns_dir / "tables"
    kt = _read(tables / "kernel_time.csv")
    return Retained(namespace=ns_dir.name,
                    kernel_time=kt if kt is not None else pd.DataFrame(columns=["op", "shape", "impl", "kernel_time_us"]),
                    census=_read(tables / "census.csv"),
                    gpu=_gpu_name(history.read_provenance(ns_dir)),
                    under_load=_loaded_points(_read(tables / "controls.csv")),
                    disturbed=_any_disturbed(_read(tables / "gpu_state.csv")))


def _from_index(db: sqlite_utils.Database) -> list[Retained]:
    nss = history.table_frame(db, "namespaces")
    kt, census, controls = (history.table_frame(db, t) for t in ("kernel_time", "census", "controls"))
    out = []
    for row in nss.sort_values("position").itertuples() if not nss.empty else []:
        name = row.name

        def part(frame: pd.DataFrame) -> pd.DataFrame | None:
            return frame[frame["namespace"] == name].reset_index(drop=True) if "namespace" in frame else None

        k = part(kt)
        out.append(Retained(namespace=name,
                            kernel_time=k if k is not None else pd.DataFrame(columns=["op", "shape", "impl", "kernel_time_us"]),
                            census=part(census), gpu=row.gpu_name if isinstance(row.gpu_name, str) else None,
                            under_load=_loaded_points(part(controls))))
    return out


def retained(history_like: Any) -> list[Retained]:
    """Normalise a history: an artifacts folder, a history index (path to the .sqlite or an open
    Database), or an iterable of Retained or tuples (namespace, kernel_time[, census[, gpu]])."""
    if isinstance(history_like, sqlite_utils.Database):
        return _from_index(history_like)
    if isinstance(history_like, (str, Path)):
        path = Path(history_like)
        if path.is_dir():
            return [load_namespace(path / name) for name in history.namespaces_in_order(path)]
        if path.is_file():
            return _from_index(history.open_index(path))
        raise EvidenceError(f"trust: {path} is neither an artifacts folder nor a history index.")
    out = []
    for item in history_like:
        if isinstance(item, Retained):
            out.append(item)
        else:
            out.append(Retained(*item))
    return out


# --------------------------------------------------------------------------------------------
# Kernel identity from the census


def kernel_identity(census: pd.DataFrame | None, op: str, impl: str, shape: str) -> frozenset[tuple[str, ...]]:
    """The census rows of (op, impl) that serve `shape`, as a set of (kernel, specialization,
    source_sha256, compiler, options); empty where the census has none. The census names shapes by
    their dimensions, so a shape with a tag ('65536x1048576x64-powerlaw', another graph through the
    same kernels) is served by the rows of its dimensions ('65536x1048576x64')."""
    if census is None or census.empty or not {"op", "impl", "shapes"} <= set(census.columns):
        return frozenset()
    rows = census[(census["op"].astype(str) == op) & (census["impl"].astype(str) == impl)]
    out = set()
    for rec in rows.to_dict("records"):
        served = [s.strip() for s in str(rec.get("shapes") if rec.get("shapes") is not None else "").split(";")]
        if shape in served or shape.split("-", 1)[0] in served:
            out.add(tuple("" if _missing(rec.get(c)) else str(rec.get(c)) for c in IDENTITY_COLUMNS))
    return frozenset(out)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def identity_change(before: frozenset, after: frozenset) -> str | None:
    """None when the two identities are the same; else the first difference, in the order
    'missing', 'changed source', 'changed compiler', 'changed options', 'changed specialization'."""
    if not before or not after:
        return "missing"
    for i, reason in ((2, "changed source"), (3, "changed compiler"), (4, "changed options")):
        if {r[i] for r in before} != {r[i] for r in after}:
            return reason
    return None if before == after else "changed specialization"


# --------------------------------------------------------------------------------------------
# Control bands


def _as_set(exclude: str | Iterable[str] | None) -> set[str]:
    if exclude is None:
        return set()
    return {exclude} if isinstance(exclude, str) else set(exclude)


def control_bands(history_like: Any, control: str = "triton", margin: float = 0.05,
                  exclude: str | Iterable[str] | None = None, *, current_census: pd.DataFrame | None = None,
                  gpu: str | None = None, cache_mode: str | None = None) -> pd.DataFrame:
    """Per (op, shape): the control's kernel_time_us min and max across the retained namespaces other
    than `exclude`, and the band widened by the margin: lo·(1−margin), hi·(1+margin).

    Optional filters, so a band only holds comparable captures: `gpu` (provenance GPU name; a
    namespace with another GPU is left out), `cache_mode`, and `current_census` (a namespace whose
    control kernel serving that shape differs from the current one's, by kernel_identity, is set
    aside for that (op, shape), as is one without a census). A namespace whose own controls.csv found
    its control above the band at an (op, shape) is set aside there too. Set-aside namespaces are
    listed in `set_aside` ('name (why)'); an (op, shape) where every namespace was set aside keeps
    a row with n_namespaces 0 and no band."""
    if not 0 <= margin < 1:
        raise EvidenceError(f"trust: the control band margin must be at least 0 and below 1, not {margin}.")
    skip = _as_set(exclude)
    points: dict[tuple[str, str], list[tuple[float, str]]] = {}
    aside: dict[tuple[str, str], list[str]] = {}
    for ns in retained(history_like):
        if ns.namespace in skip:
            continue
        if gpu is not None and ns.gpu is not None and ns.gpu != gpu:
            continue
        kt = ns.kernel_time
        if kt is None or kt.empty or "impl" not in kt:
            continue
        rows = kt[kt["impl"].astype(str) == control]
        if cache_mode is not None and "cache_mode" in rows:
            rows = rows[rows["cache_mode"].astype(str) == cache_mode]
        for rec in rows.to_dict("records"):
            value = rec.get("kernel_time_us")
            if _missing(value):
                continue
            key = (str(rec["op"]), str(rec["shape"]))
            if key in ns.under_load:
                aside.setdefault(key, []).append(f"{ns.namespace} (under load)")
                continue
            if current_census is not None:
                change = identity_change(kernel_identity(ns.census, key[0], control, key[1]),
                                         kernel_identity(current_census, key[0], control, key[1]))
                if change is not None:
                    aside.setdefault(key, []).append(f"{ns.namespace} ({change})")
                    continue
            points.setdefault(key, []).append((float(value), ns.namespace))
    out = []
    for key in list(dict.fromkeys([*points, *aside])):
        pts = points.get(key, [])
        row: dict[str, Any] = {"op": key[0], "shape": key[1], "control": control, "margin": margin,
                               "n_namespaces": len({n for _, n in pts}),
                               "namespaces": ";".join(dict.fromkeys(n for _, n in pts)),
                               "set_aside": ";".join(aside.get(key, []))}
        if pts:
            lo, hi = min(pts), max(pts)
            row.update({"observed_min_us": lo[0], "observed_max_us": hi[0], "min_namespace": lo[1],
                        "max_namespace": hi[1], "band_lo_us": lo[0] * (1 - margin), "band_hi_us": hi[0] * (1 + margin)})
        else:
            row.update({"observed_min_us": None, "observed_max_us": None, "min_namespace": None,
                        "max_namespace": None, "band_lo_us": None, "band_hi_us": None})
        out.append(row)
    return pd.DataFrame(out, columns=BAND_COLUMNS)


def _us(value: float) -> str:
    return f"{value:.2f} us"


def _in_namespaces(n: int) -> str:
    return f"across {n} namespaces" if n != 1 else "from 1 namespace"


def classify_controls(current_kernel_time: pd.DataFrame, bands: pd.DataFrame, control: str = "triton") -> pd.DataFrame:
    """Per (op, shape) of the current namespace: the control's kernel time, its band and a status:
    `inside`; `outside` (side `above`: the capture probably ran under load, under_load=True; side
    `below`: faster than every earlier capture, which load cannot cause, so under_load stays False
    and the note says so); `establishing` (no earlier namespace has that (op, shape), or every one
    was set aside); `no_control` (this namespace did not measure the control there). With a
    one-sentence note per row."""
    kt = current_kernel_time
    out = []
    band_by_key = {(str(r["op"]), str(r["shape"])): r for r in bands.to_dict("records")} if not bands.empty else {}
    for (op, shape), grp in kt.groupby(["op", "shape"], sort=False):
        op, shape = str(op), str(shape)
        who = f"{control}'s {op} {shape}"
        ctl = grp[grp["impl"].astype(str) == control]
        value = None if ctl.empty or _missing(ctl["kernel_time_us"].iloc[0]) else float(ctl["kernel_time_us"].iloc[0])
        band = band_by_key.get((op, shape))
        row: dict[str, Any] = {"op": op, "shape": shape, "control": control, "kernel_time_us": value,
                               "band_lo_us": None, "band_hi_us": None, "observed_min_us": None, "observed_max_us": None,
                               "margin": None, "n_namespaces": 0, "namespaces": "", "side": "", "under_load": False}
        has_band = band is not None and not _missing(band.get("band_lo_us"))
        if has_band:
            row.update({k: band[k] for k in ("band_lo_us", "band_hi_us", "observed_min_us", "observed_max_us",
                                             "margin", "n_namespaces", "namespaces")})
        if value is None:
            row["status"] = "no_control"
            row["note"] = (f"This run did not measure {control} at {op} {shape}, so no control tells whether its "
                           f"captures there ran on a quiet GPU.")
        elif not has_band:
            row["status"] = "establishing"
            set_aside = (band or {}).get("set_aside") or ""
            if set_aside:
                row["note"] = (f"No comparable earlier capture of {who} remains (set aside: {set_aside}): "
                               f"its band is being established again with this run, at {_us(value)}.")
            else:
                row["note"] = f"No earlier namespace measured {who}: its band is being established with this run, at {_us(value)}."
        else:
            lo, hi, n = float(row["band_lo_us"]), float(row["band_hi_us"]), int(row["n_namespaces"])
            omin, omax = float(row["observed_min_us"]), float(row["observed_max_us"])
            observed = (f"observed {omin:.2f}-{omax:.2f} us {_in_namespaces(n)}" if n != 1 or omin != omax
                        else f"observed at {omin:.2f} us in {row['namespaces']}")
            band_text = f"its band of {lo:.2f}-{hi:.2f} us ({observed}, widened by {float(row['margin']) * 100:g}%)"
            if lo <= value <= hi:
                row["status"] = "inside"
                row["note"] = f"{who} came back at {_us(value)}, inside {band_text}: a clean capture by this control."
            elif value > hi:
                row.update({"status": "outside", "side": "above", "under_load": True})
                row["note"] = (f"{who} came back at {_us(value)}, above {band_text}: this capture probably ran under "
                               f"load, so its comparisons quote the band instead of this capture.")
            else:
                row.update({"status": "outside", "side": "below"})
                row["note"] = (f"{who} came back at {_us(value)}, below {band_text}: faster than any earlier capture, "
                               f"which load cannot cause, so the GPU ran faster this session or the band is too narrow.")
        out.append(row)
    return pd.DataFrame(out, columns=CONTROL_COLUMNS)


# --------------------------------------------------------------------------------------------
# Drift between two namespaces


def drift(current_ns_dir: str | Path | Retained, earlier_ns_dir: str | Path | Retained) -> pd.DataFrame:
    """Per (op, shape, impl) measured in both namespaces: before_us (earlier), after_us (current),
    change_pct = (after − before) / before · 100 (positive: slower now), and whether the kernel is
    unchanged. Excluded, with a reason: library baselines (`torch`), kernels whose census differs
    ('changed source', 'changed compiler', 'changed options', 'changed specialization'), kernels
    without a census row serving that shape in either namespace ('missing'), and every row when the
    namespaces ran on different GPU models ('different gpu') or cache modes ('different cache mode')."""
    cur = current_ns_dir if isinstance(current_ns_dir, Retained) else load_namespace(current_ns_dir)
    old = earlier_ns_dir if isinstance(earlier_ns_dir, Retained) else load_namespace(earlier_ns_dir)
    key = ["op", "shape", "impl"]
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
    for rec in merged.to_dict("records"):
        op, shape, impl = rec["op"], rec["shape"], rec["impl"]
        b, a = rec["kernel_time_us_before"], rec["kernel_time_us_after"]
        b = None if _missing(b) else float(b)
        a = None if _missing(a) else float(a)
        pct = (a - b) / b * 100.0 if a is not None and b else None
        who = f"{impl}'s {op} {shape}"
        modes = (rec["cache_mode_before"], rec["cache_mode_after"])
        if impl in LIBRARY_IMPLS:
            reason, note = "torch", f"{who} is a library baseline: {LIBRARY_NOTE}."
        elif gpu_differs:
            reason, note = "different gpu", f"{who} ran on {old.gpu} in {old.namespace} and on {cur.gpu} in {cur.namespace}."
        elif not any(_missing(m) for m in modes) and modes[0] != modes[1]:
            reason, note = "different cache mode", f"{who} ran in {modes[0]} cache mode in {old.namespace} and {modes[1]} in {cur.namespace}."
        elif a is None or b is None:
            reason, note = "missing", f"{who} has no kernel time in one of the two namespaces."
        else:
            change = identity_change(kernel_identity(old.census, op, impl, shape), kernel_identity(cur.census, op, impl, shape))
            if change is None:
                reason, note = "", f"{who} is the same kernel in both (same census: source, compiler, options, specialization)."
            elif change == "missing":
                lacking = [ns.namespace for ns in (old, cur) if not kernel_identity(ns.census, op, impl, shape)]
                reason, note = change, f"{who} has no census row serving that shape in {' or '.join(lacking)}, so it cannot be shown unchanged."
            else:
                reason, note = change, f"{who} {change.replace('changed ', 'changed its ')} between {old.namespace} and {cur.namespace}."
        out.append({"earlier": old.namespace, "current": cur.namespace, "op": op, "shape": shape, "impl": impl,
                    "before_us": b, "after_us": a, "change_pct": pct, "unchanged_kernel": reason == "",
                    "reason": reason, "note": note})
    return pd.DataFrame(out, columns=DRIFT_COLUMNS)


def drift_bound(drift_df: pd.DataFrame, max_pairs: int = 8) -> dict[str, Any]:
    """The bound the unchanged kernels put on drift: max |change_pct|, how many there were, the
    largest rise and fall, each pair, and a one-sentence summary."""
    df = drift_df if drift_df is not None else pd.DataFrame(columns=DRIFT_COLUMNS)
    earlier = str(df["earlier"].iloc[0]) if len(df) and "earlier" in df else None
    current = str(df["current"].iloc[0]) if len(df) and "current" in df else None
    unchanged = df[df["unchanged_kernel"].map(_truthy)] if len(df) else df
    unchanged = unchanged[unchanged["change_pct"].notna()] if len(unchanged) else unchanged
    excluded = df[~df.index.isin(unchanged.index)] if len(df) else df
    reasons = excluded["reason"].fillna("").astype(str).value_counts().to_dict() if len(excluded) else {}
    between = f"between {earlier} and {current}" if earlier and current else "between the two namespaces"
    pairs = [{"op": r["op"], "shape": r["shape"], "impl": r["impl"], "before_us": float(r["before_us"]),
              "after_us": float(r["after_us"]), "change_pct": float(r["change_pct"])} for r in unchanged.to_dict("records")]
    result: dict[str, Any] = {"earlier": earlier, "current": current, "count": len(pairs), "pairs": pairs,
                              "excluded": int(len(excluded)), "excluded_reasons": reasons,
                              "max_abs_change_pct": None, "max_change_pct": None, "min_change_pct": None}
    if not pairs:
        result["summary"] = (f"no kernel measured in both namespaces was unchanged {between}, so drift between them "
                             f"is not bounded by any kernel.")
        return result
    changes = [p["change_pct"] for p in pairs]
    result.update({"max_abs_change_pct": max(abs(c) for c in changes), "max_change_pct": max(changes),
                   "min_change_pct": min(changes)})
    shown = ", ".join(f"{p['before_us']:.2f} -> {p['after_us']:.2f} us" for p in pairs[:max_pairs])
    if len(pairs) > max_pairs:
        shown += f", and {len(pairs) - max_pairs} more"
    kernels = "kernel" if len(pairs) == 1 else "kernels"
    result["summary"] = (f"unchanged {kernels} moved by at most {result['max_abs_change_pct']:.1f}% ({shown}) {between}")
    return result


# --------------------------------------------------------------------------------------------
# Choosing the earlier namespace, and the step that writes the tables


def _op_shapes(ns: Retained) -> set[tuple[str, str]]:
    kt = ns.kernel_time
    if kt is None or kt.empty:
        return set()
    return {(str(o), str(s)) for o, s in zip(kt["op"], kt["shape"])}


def choose_earlier(artifacts: str | Path, current: str, configured: str | None = None) -> str | None:
    """The namespace to bound drift against: `configured` when given (it must exist under
    `artifacts` with tables); else the most recent namespace dated before `current` (by provenance
    date; all others when `current` is not retained yet) that shares at least one (op, shape) with
    it, ran on the same GPU model where both record one, and was taken clean: no capture disturbed
    (NVML) and no control above its band. None when there is none."""
    artifacts = Path(artifacts)
    order = history.namespaces_in_order(artifacts)
    if configured:
        if configured == current:
            raise EvidenceError(f"trust: the earlier namespace for drift cannot be {current} itself.")
        if configured not in order:
            raise EvidenceError(f"trust: the configured earlier namespace {configured} has no tables under {artifacts}.")
        return configured
    if current not in order:
        candidates = order
    else:
        candidates = order[: order.index(current)]
    cur = load_namespace(artifacts / current)
    mine = _op_shapes(cur)
    for name in reversed(candidates):
        other = load_namespace(artifacts / name)
        if cur.gpu is not None and other.gpu is not None and cur.gpu != other.gpu:
            continue
        if other.disturbed or other.under_load:
            continue
        if mine & _op_shapes(other):
            return name
    return None


def earlier_namespaces(artifacts: str | Path, current: str) -> list[str]:
    """The namespaces retained before `current` in date order (all others when it has no tables yet)."""
    order = history.namespaces_in_order(artifacts)
    return order[: order.index(current)] if current in order else [n for n in order if n != current]


def retained_inputs(artifacts: str | Path, current: str) -> list[str]:
    """The files of the namespaces retained before `current` that its trust tables read (a Snakemake
    rule's input; a namespace retained later never makes an older one's tables out of date)."""
    artifacts = Path(artifacts)
    out = []
    for name in earlier_namespaces(artifacts, current):
        for rel in ("tables/kernel_time.csv", "tables/census.csv", "tables/controls.csv", "provenance.json"):
            if (artifacts / name / rel).is_file():
                out.append((artifacts / name / rel).as_posix())
    return out


def check_earlier(artifacts: Path, current: str, earlier: str | None) -> None:
    """ConfigError (one sentence) when `trust.earlier` names a namespace with no retained tables."""

    if earlier is None:
        return
    if not (Path(artifacts) / earlier / "tables" / "kernel_time.csv").is_file() or earlier == current:
        retained = sorted(p.parent.parent.name for p in Path(artifacts).glob("*/tables/kernel_time.csv")
                          if p.parent.parent.name != current)
        raise ConfigError(f"config: trust.earlier names {earlier!r}, which is not a retained namespace under "
                          f"{artifacts}/ other than this one (retained: {', '.join(retained) or 'none'}).")


def trust_tables(artifacts: str | Path, current: str, controls_out: str | Path, drift_out: str | Path,
                 control: str = "triton", margin: float = 0.05, earlier: str | None = None) -> dict[str, Any]:
    """Write the current namespace's `controls.csv` (its control against the band of the namespaces
    retained before it, same GPU model and cache mode, same control kernel) and `drift.csv`
    (against `earlier`, or choose_earlier's pick; header only when there is none). Returns
    {'controls': DataFrame, 'drift': DataFrame, 'bound': drift_bound(...), 'earlier': name or None}."""

    artifacts = Path(artifacts)
    cur = load_namespace(artifacts / current)
    cache_mode = None
    if not cur.kernel_time.empty and "cache_mode" in cur.kernel_time:
        modes = cur.kernel_time["cache_mode"].dropna().astype(str).unique()
        cache_mode = modes[0] if len(modes) == 1 else None
    before = [load_namespace(artifacts / n) for n in earlier_namespaces(artifacts, current)]
    bands = control_bands(before, control, margin, exclude=current, current_census=cur.census, gpu=cur.gpu,
                          cache_mode=cache_mode)
    controls = classify_controls(cur.kernel_time, bands, control)
    controls["margin"] = margin  # also on rows still establishing: the margin their band will use
    write_csv(controls.to_dict("records"), CONTROL_COLUMNS, controls_out)
    chosen = choose_earlier(artifacts, current, earlier)
    drifted = drift(cur, artifacts / chosen) if chosen else pd.DataFrame(columns=DRIFT_COLUMNS)
    write_csv(drifted.to_dict("records"), DRIFT_COLUMNS, drift_out)
    return {"controls": controls, "drift": drifted, "bound": drift_bound(drifted), "earlier": chosen}


def report_context(controls: str | Path | pd.DataFrame | None, drifted: str | Path | pd.DataFrame | None) -> dict[str, Any]:
    """What a report template needs from the two trust tables, given as paths or DataFrames (either
    may be absent: a namespace retained before these tables existed has neither)."""
    def read(src: str | Path | pd.DataFrame | None) -> pd.DataFrame | None:
        if isinstance(src, pd.DataFrame):
            return src
        return history.read_table(src) if src and Path(src).is_file() else None

    def records(frame: pd.DataFrame | None) -> list[dict[str, Any]]:
        return [] if frame is None else [{k: (None if _missing(v) else v) for k, v in r.items()}
                                         for r in frame.to_dict("records")]

    ctl, dft = read(controls), read(drifted)
    rows = records(ctl)
    for r in rows:
        r["under_load"] = _truthy(r.get("under_load"))
    bound = drift_bound(dft) if dft is not None and len(dft) else None
    margins = [r["margin"] for r in rows if r.get("margin") is not None]
    return {
        "controls": rows,
        "by_key": {f"{r['op']} {r['shape']}": r for r in rows},
        "control": rows[0]["control"] if rows else None,
        "margin": margins[0] if margins else None,
        "under_load": [r for r in rows if r["under_load"]],
        "outside": [r for r in rows if r.get("status") == "outside"],
        "establishing": [r for r in rows if r.get("status") == "establishing"],
        "any_band": any(r.get("status") in ("inside", "outside") for r in rows),
        "drift": records(dft),
        "bound": bound,
        "earlier": bound["earlier"] if bound else None,
        "library_note": LIBRARY_NOTE,
        "library_reason": LIBRARY_REASON,
    }


__all__ = [
    "BAND_COLUMNS", "CONTROL_COLUMNS", "DRIFT_COLUMNS", "LIBRARY_IMPLS", "LIBRARY_NOTE", "LIBRARY_REASON", "Retained", "choose_earlier",
    "classify_controls", "control_bands", "drift", "drift_bound", "earlier_namespaces", "identity_change",
    "kernel_identity", "load_namespace", "report_context", "retained", "retained_inputs", "trust_tables",
]
